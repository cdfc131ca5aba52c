"""Seconds per SC optimizer update and peak RSS when training the default model on the CPU; with --memory, the peak
memory of one update's forward and backward passes against the paths per update, with and without gradient caching.

Each precision runs in its own subprocess (peak RSS is per process): fp32 for a few updates after a warm-up one,
bf16 likewise where bf16 matmuls are fast (AVX512-BF16/AMX CPUs, CUDA) and for ONE update only (no warm-up)
elsewhere, where they are emulated and ~100x slower than fp32. Rollouts are generated once (fp32) and shared.
Prints prompt length, seconds per update, peak RSS, and the bf16/fp32 ratio.

    python bench/train.py [--config configs/train-cpu.yaml] [--updates 3] [--threads 1] [--skip-bf16]

--memory builds a model of a named shape with random weights (no download), LoRA as in the paper presets, a random
prompt and random rollouts of depth K − 1 = 5 (the deepest update, k = (5, 6)), and runs one update's backward
pass (`backward_sc_loss`) for each paths-per-update × {one graph, gradient caching} [× gradient checkpointing].
It reports the bytes autograd saved for backward at peak (any device) and, on CUDA, torch.cuda.max_memory_allocated
(weights included):

    python bench/train.py --memory                                          # tiny shape, CPU
    python bench/train.py --memory --shape llama-3.1-8b --device cuda --checkpointing

On a CPU shared with other jobs, use --threads 1: with two threads on two busy cores every op waits for the
descheduled second thread (we measured a 12x slowdown of the same forward pass).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path
from time import perf_counter

ROOT = Path(__file__).resolve().parents[1]


def worker(config_path: str, out: str, dtype: str, updates: int, warm_up: bool) -> None:
    """Time `updates` optimizer updates (after one warm-up update if asked) and print a JSON line."""
    import torch

    from beliefdrift.amortize.trainer import SCTrainer, TrainConfig
    from beliefdrift.config.options import load_settings

    config = load_settings(TrainConfig, config_path, {"dtype": dtype,
                                                      "rollout_dir": str(Path(out).parent / "rollouts")})
    trainer = SCTrainer(config=config, out=out)
    plan = trainer.updates
    if warm_up:
        trainer.update(plan[0])  # first-touch allocations, caches
    times, prompt = [], 0
    for update in plan[int(warm_up) : int(warm_up) + updates]:
        start = perf_counter()
        trainer.update(update)
        times.append(perf_counter() - start)
        prompt = max(prompt, len(trainer.tokens(trainer.groups[update.group].question).prompt_ids))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB → GiB (Linux)
    print(json.dumps({"dtype": str(next(trainer.peft_model.parameters()).dtype), "updates": len(times),
                      "seconds": sum(times) / len(times), "peak_rss_gib": peak, "prompt_tokens": prompt,
                      "paths": config.paths_per_update, "threads": torch.get_num_threads()}))


def run(config: str, out: str, dtype: str, updates: int, warm_up: bool, threads: int | None) -> dict:
    command = [sys.executable, __file__, "--worker", "--config", config, "--out", out, "--dtype", dtype,
               "--updates", str(updates)] + (["--warm-up"] if warm_up else [])
    env = {**os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {})}
    result = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
    return json.loads(result.stdout.strip().splitlines()[-1])


def prepare_rollouts(config_path: str, out: str) -> None:
    """Generate the preset's rollouts once (fp32), for the first few questions only."""
    from beliefdrift.amortize.rollouts import generate_groups, save_rollouts
    from beliefdrift.amortize.trainer import TrainConfig
    from beliefdrift.backend import load_model
    from beliefdrift.config.options import load_settings
    from beliefdrift.data.registry import load_dataset

    config = load_settings(TrainConfig, config_path, {"n": 2})
    lm = load_model(config.model, dtype="float32")
    questions = load_dataset(config.dataset, config.split, data_dir=config.data_dir, n=config.n, seed=config.seed)
    groups = generate_groups(lm, questions, config.prefix_lengths, config.paths, config.horizon - 1,
                               config.seed, config.template, config.prefix_mode)
    save_rollouts(groups, Path(out) / "rollouts", {"bench": True})


SHAPES = {
    "tiny": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "vocab_size": 259},
    "llama-3.1-8b": {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                     "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
                     "rope_theta": 500000.0},
}


def memory(shape: str, device: str, dtype: str, paths: list[int], micro_batch: int, prompt: int,
           checkpointing: bool) -> None:
    """Peak memory of one update's backward pass on a random model of `shape` (see the module doc)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    from beliefdrift.amortize import SelfConsistencyLoss, backward_sc_loss
    from beliefdrift.amortize.backward import SavedTensorMeter
    from beliefdrift.amortize.forward import enable_gradient_checkpointing
    from beliefdrift.backend import AnswerTokens
    from beliefdrift.backend.shared_prefix import enable_shared_prefix

    torch.manual_seed(0)
    config = LlamaConfig(**SHAPES[shape], max_position_embeddings=8192, tie_word_embeddings=False)
    with torch.device(device):
        model = LlamaForCausalLM._from_config(config, dtype=getattr(torch, dtype), attn_implementation="sdpa")
    enable_shared_prefix(model)
    lora = LoraConfig(r=16, lora_alpha=8, lora_dropout=0.05, target_modules="all-linear", task_type="CAUSAL_LM")
    model = get_peft_model(model, lora).train()
    vocab = config.vocab_size
    tokens = AnswerTokens(tuple(torch.randint(vocab, (prompt,)).tolist()), (10, 11, 12, 13, 14), (15,))
    loss = SelfConsistencyLoss()
    weights = torch.cuda.memory_allocated() if device == "cuda" else 0
    print(f"{shape} ({sum(p.numel() for p in model.parameters()) / 1e9:.2f}B parameters, {dtype}) on {device}: "
          f"prompt {prompt} tokens, micro-batch {micro_batch}, depth 5" + (f", weights {weights / 2**30:.2f} GiB"
                                                                          if weights else ""))
    print("| paths | backward | checkpointing | autograd saved (MiB) | CUDA peak (GiB) | seconds |")
    print("|---|---|---|---|---|---|")
    for checkpoint in (False, True) if checkpointing else (False,):
        if checkpoint:
            enable_gradient_checkpointing(model)
        for caching in (False, True):
            for j in paths:
                rollouts = torch.randint(5, (j, 5), device=device)
                if device == "cuda":
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                start = perf_counter()
                with SavedTensorMeter(model) as meter:
                    backward_sc_loss(model, tokens, (), rollouts, lambda c, r=rollouts: loss(c.log_theta, r, 5, 6),
                                     micro_batch, caching)
                peak = ""
                if device == "cuda":
                    torch.cuda.synchronize()
                    peak = f"{torch.cuda.max_memory_allocated() / 2**30:.2f}"
                seconds = perf_counter() - start
                model.zero_grad(set_to_none=True)
                print(f"| {j} | {'caching' if caching else 'one graph'} | {'on' if checkpoint else 'off'} | "
                      f"{meter.peak / 2**20:.1f} | {peak} | {seconds:.2f} |", flush=True)


def main() -> None:
    import torch

    from beliefdrift.backend.loading import resolve_dtype

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "train-cpu.yaml"))
    parser.add_argument("--updates", type=int, default=3, help="timed fp32 updates (after one warm-up)")
    parser.add_argument("--threads", type=int, help="torch threads per worker (OMP_NUM_THREADS; default: all cores)")
    parser.add_argument("--skip-bf16", action="store_true")
    parser.add_argument("--memory", action="store_true", help="peak memory against paths per update (module doc)")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny", help="--memory: the model's shape")
    parser.add_argument("--device", default="cpu", help="--memory: cpu or cuda")
    parser.add_argument("--memory-dtype", default="bfloat16", help="--memory: weight dtype")
    parser.add_argument("--paths", type=int, nargs="+", default=[8, 16, 32], help="--memory: paths per update")
    parser.add_argument("--micro-batch", type=int, default=4, help="--memory: paths per forward pass")
    parser.add_argument("--prompt-tokens", type=int, default=500, help="--memory: prompt length")
    parser.add_argument("--checkpointing", action="store_true", help="--memory: also with gradient checkpointing")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--dtype", default="float32", help=argparse.SUPPRESS)
    parser.add_argument("--warm-up", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.config, args.out, args.dtype, args.updates, args.warm_up)
        return
    if args.memory:
        if args.threads:
            torch.set_num_threads(args.threads)
        memory(args.shape, args.device, args.memory_dtype, args.paths, args.micro_batch, args.prompt_tokens,
               args.checkpointing)
        return
    with tempfile.TemporaryDirectory() as tmp:
        prepare_rollouts(args.config, tmp)
        fp32 = run(args.config, str(Path(tmp) / "fp32"), "float32", args.updates, True, args.threads)
        print(f"fp32: {fp32['seconds']:.2f} s/update over {fp32['updates']} updates ({fp32['paths']} paths, "
              f"prompt ≤ {fp32['prompt_tokens']} tokens, {fp32['threads']} threads); "
              f"peak RSS {fp32['peak_rss_gib']:.2f} GiB "
              f"({'under' if fp32['peak_rss_gib'] < 6 else 'OVER'} the 6 GiB budget)")
        if args.skip_bf16:
            return
        fast = resolve_dtype("auto", torch.device("cpu")) == torch.bfloat16
        bf16 = run(args.config, str(Path(tmp) / "bf16"), "bfloat16", args.updates if fast else 1, fast, args.threads)
        note = "" if fast else " (no AVX512-BF16/AMX on this CPU: bf16 matmuls are emulated)"
        print(f"bf16: {bf16['seconds']:.2f} s/update over {bf16['updates']} updates{note}; "
              f"peak RSS {bf16['peak_rss_gib']:.2f} GiB")
        print(f"bf16 / fp32 seconds per update: {bf16['seconds'] / fp32['seconds']:.1f}x")


if __name__ == "__main__":
    main()
