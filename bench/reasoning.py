"""Chain-of-thought decoding throughput: our batched decode on a shared prompt cache, its decoding steps growing,
static and static replayed as CUDA graphs, against `model.generate` and the weight-read floor; then our per-token cost
early and late in a long rollout, in one run.

    python bench/reasoning.py --shape llama-3.1-8b --device cuda --dtype bfloat16 --rollouts 1 8 32 --tokens 128 \
                              --long-tokens 512 --tokenizer DIR      # random weights of a real shape
    python bench/reasoning.py --shape tiny --device cpu --dtype float32 --rollouts 1 2 --tokens 8 --long-tokens 0 \
                              --tokenizer DIR                        # the script itself, on a CPU (no capture)
    python bench/reasoning.py [--model smollm2-135m-instruct] [--device cpu] [--rollouts 1 4 8] [--tokens 32]

For each R, R rollouts of T tokens after the pairs prompt of a demo question: one `generate` call with
`num_return_sequences=R`, and our guided decoder (`cot.generate_rollouts`, which suppresses end-of-sequence by design,
as `min_new_tokens` does for `generate`) with its decoding steps growing (`--no-cuda-graphs`), static
(`EngineSettings.decode_step`, uncaptured) and, on a CUDA device, static and replayed as CUDA graphs (`--cuda-graphs`,
the default there). Each is timed at T and at T/4 tokens after a short warm-up: tokens/s is that of the whole call at T
(the prompt's prefill, and the warm-up steps and capture of the graphs, included); ms/step is the marginal time of a
step, (time at T − time at T/4) / (T − T/4 steps), which the floor bounds: a step reads every weight once, so the
weight-read floor is (bytes of the weights / the device's copy bandwidth, measured) per step, R tokens a step. Also
printed: the share of rollouts whose tokens are those of the growing decode (the same sampler draws; in float32 the
same tokens), and on a CUDA device issue 50's targets for the CUDA graphs: R = 1 at ≥ 50% of the floor's speed
(its marginal step), R = 1 and R = 8 ≥ 3× `generate` (tokens/s).

Then one guided rollout of `--long-tokens` tokens on growing steps: the median time per token (forward pass, sampling
and text) over its first and last `--window` tokens, and, replayed on the same tokens, the host's text work per
token (incremental detokenization, pair parsing, guided tags) against decoding the whole text every token as the
decoder did before. Attention still grows with the context; the text work must not.

With `--shape` (`bench/rollout.py`'s shapes) the model has random weights of a real model's shape, so the text is
noise and only the rates mean anything. One torch thread by default: on a shared machine, oversubscribed threads
make timings erratic.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from statistics import median
from typing import Any

import torch
from rollout import SHAPES, TOKENIZER_HELP, copy_bandwidth, shaped_model

from beliefdrift.backend import DEFAULT_MODEL, EngineSettings, LanguageModel, StepMode, load_model
from beliefdrift.backend.loading import resolve_device, resolve_dtype
from beliefdrift.backend.model import CAPTURED, EAGER
from beliefdrift.cot import DecodeConfig, PromptCache, ReasoningTask, Rollout, generate_rollouts, nucleus_sampler
from beliefdrift.cot.generation import GUIDE_TAGS, _RolloutState
from beliefdrift.data.registry import load_dataset
from beliefdrift.engine.resampling import make_generator
from beliefdrift.prompts import chat_context

ENGINES = {"growing": EAGER, "static": StepMode(static=True), "cuda graphs": CAPTURED}
#: Issue 50's targets: R = 1 at this share of the weight-read floor's speed; R = 1 and R = 8 this many times generate.
FLOOR_TARGET, GENERATE_TARGET = 0.5, 3.0


def timed(lm: LanguageModel, run: Callable[[], Any]) -> tuple[float, Any]:
    """Seconds of `run()` (the device drained before and after) and what it returns."""
    sync = torch.cuda.synchronize if lm.device.type == "cuda" else lambda: None
    sync()
    start = time.perf_counter()
    written = run()
    sync()
    return time.perf_counter() - start, written


def generate(lm: LanguageModel, prompt_ids: list[int], rollouts: int, tokens: int, seed: int) -> int:
    """Tokens written by one `generate` call of `rollouts` sequences."""
    prompt = torch.tensor([prompt_ids], device=lm.device)
    torch.manual_seed(seed)
    with torch.no_grad():
        out = lm.model.generate(
            prompt, attention_mask=torch.ones_like(prompt), do_sample=True, temperature=1.0, top_p=0.95,
            top_k=0, max_new_tokens=tokens, min_new_tokens=tokens, num_return_sequences=rollouts,
            pad_token_id=lm.tokenizer.pad_token_id or lm.tokenizer.eos_token_id,
        )
    return out[:, prompt.shape[1] :].numel()


def ours(lm: LanguageModel, context: str, rollouts: int, tokens: int, seed: int,
         on_sample: Callable[[], None] | None = None) -> list[Rollout]:
    """One batched guided decode of R rollouts on a shared prompt cache (prefill included), its steps as
    `lm.engine` says; `on_sample` is called as each token is drawn (which makes the steps growing)."""
    cache = PromptCache.from_text(lm, context)
    config = DecodeConfig(num_pairs=10_000, max_new_tokens=tokens, guided=True)
    draw = nucleus_sampler(1.0, 0.95, make_generator(seed, "bench"))

    def stamped(logits: torch.Tensor) -> torch.Tensor:
        assert on_sample is not None
        on_sample()
        return draw(logits)

    return generate_rollouts(cache, [""] * rollouts, config, draw if on_sample is None else stamped,
                             collect_hidden=True)


def rates(run: Callable[[int], tuple[int, Any]], lm: LanguageModel, tokens: int) -> tuple[float, float, Any]:
    """(tokens/s of `run(tokens)`, the marginal seconds of a step between `tokens` // 4 and `tokens`, what `run` gave
    besides its tokens written at `tokens`), after a warm-up of 2 tokens; `run(T)` returns (tokens written, a
    result)."""
    run(2)
    short = max(tokens // 4, 1)
    t_short, _ = timed(lm, lambda: run(short))
    t_long, (written, result) = timed(lm, lambda: run(tokens))
    return written / t_long, (t_long - t_short) / (tokens - short), result


def equal_share(reference: list[list[int]], other: list[list[int]]) -> float:
    return sum(a == b for a, b in zip(reference, other, strict=True)) / len(reference)


def throughput(lm: LanguageModel, args: argparse.Namespace, context: str, prompt_ids: list[int]) -> None:
    """The table of tokens/s, marginal ms/step, × generate and share of the floor per R and engine."""
    weights = sum(p.numel() * p.element_size() for p in lm.model.parameters())
    floor = weights / copy_bandwidth(lm.device) if lm.device.type == "cuda" else None  # (a CPU's: not measured)
    if floor is not None:
        print(f"weights {weights / 2**30:.2f} GiB, weight-read floor {floor * 1e3:.2f} ms/step "
              f"({1 / floor:,.1f} tokens/s at R = 1)", flush=True)
    engines = {k: v for k, v in ENGINES.items() if lm.device.type == "cuda" or not v.capture}
    print("| R | decoder | tokens/s | ms/step | × generate | of floor | rollouts as growing |\n"
          "|---|---|---|---|---|---|---|", flush=True)
    for r in args.rollouts:
        def by_generate(t: int, r: int = r) -> tuple[int, None]:
            return generate(lm, prompt_ids, r, t, args.seed), None

        base, step, _ = rates(by_generate, lm, args.tokens)
        shown = {"generate": (base, step, None)}
        growing: list[list[int]] | None = None
        for name, mode in engines.items():
            lm.engine = EngineSettings(decode_step=mode)

            def by_ours(t: int, r: int = r) -> tuple[int, list[list[int]]]:
                rollouts = ours(lm, context, r, t, args.seed)
                return sum(len(x.token_ids) for x in rollouts), [x.token_ids for x in rollouts]

            rate, step, tokens = rates(by_ours, lm, args.tokens)
            growing = growing if growing is not None else tokens
            shown[name] = (rate, step, equal_share(growing, tokens))
        for name, (rate, step, same) in shown.items():
            of_floor = f"{floor / step:.0%}" if floor is not None else "–"
            print(f"| {r} | {name} | {rate:,.1f} | {step * 1e3:.2f} | {rate / base:.2f} | {of_floor} | "
                  f"{'–' if same is None else f'{same:.0%}'} |", flush=True)
        best = shown[list(engines)[-1]]
        if r in (1, 8) and lm.device.type == "cuda":
            met = best[0] / base >= GENERATE_TARGET
            print(f"R={r}: {list(engines)[-1]} {best[0] / base:.2f}× generate (target ≥ {GENERATE_TARGET:g}×: "
                  f"{'met' if met else 'not met'})", flush=True)
        if r == 1 and floor is not None:
            share = floor / best[1]
            print(f"R=1: {list(engines)[-1]} at {share:.0%} of the floor's speed (target ≥ {FLOOR_TARGET:.0%}: "
                  f"{'met' if share >= FLOOR_TARGET else 'not met'})", flush=True)
    lm.engine = EngineSettings()


def text_work(lm: LanguageModel, token_ids: list[int], whole: bool) -> list[float]:
    """Seconds per token of the host's text work for a rollout's tokens, replayed: our decoder's state
    (`whole`: decoding the whole text instead, as before)."""
    tags = {name: lm.tokenizer(text, add_special_tokens=False)["input_ids"] for name, text in GUIDE_TAGS.items()}
    state = _RolloutState(lm.tokenizer, DecodeConfig(num_pairs=10_000, max_new_tokens=len(token_ids), guided=True),
                          tags)
    seconds = []
    for n, token in enumerate(token_ids, 1):
        start = time.perf_counter()
        if whole:
            lm.tokenizer.decode(token_ids[:n], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        else:
            state.step(token, eos=set())
        seconds.append(time.perf_counter() - start)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--shape", choices=sorted(SHAPES), help="random weights of this shape instead of --model")
    parser.add_argument("--tokenizer", help=TOKENIZER_HELP)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--rollouts", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--tokens", type=int, default=32, help="tokens per rollout (T, at least 4)")
    parser.add_argument("--long-tokens", type=int, default=512, help="tokens of the long rollout (0: skip it)")
    parser.add_argument("--window", type=int, default=64, help="tokens averaged at its start and end")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.tokens < 4:
        parser.error("--tokens must be at least 4 (a step's time is measured between T/4 and T)")
    torch.set_num_threads(args.threads)
    if args.shape:
        device = resolve_device(args.device)
        lm = shaped_model(args.shape, device, resolve_dtype(args.dtype, device), args.tokenizer)
    else:
        lm = load_model(args.model, device=args.device, dtype=args.dtype)
    task = ReasoningTask.from_item(load_dataset("demo", n=1, seed=args.seed)[0])
    context = chat_context(lm.tokenizer, task.pairs_prompt(10))
    prompt_ids = lm.tokenizer(context, add_special_tokens=False)["input_ids"]
    print(f"{args.shape or args.model} ({lm.dtype}, {lm.device}, {torch.get_num_threads()} threads), pairs prompt of "
          f"{len(prompt_ids)} tokens, T={args.tokens} tokens per rollout", flush=True)
    throughput(lm, args, context, prompt_ids)
    if not args.long_tokens:
        return
    stamps: list[float] = []
    rollout = ours(lm, context, 1, args.long_tokens, args.seed, lambda: stamps.append(time.perf_counter()))[0]
    steps, ids, w = torch.tensor(stamps).diff().tolist(), rollout.token_ids, args.window

    def ends(seconds: list[float], unit: float) -> str:
        return f"{median(seconds[:w]) * unit:8.3f} → {median(seconds[-w:]) * unit:8.3f}"

    print(f"long rollout (growing steps), {len(ids)} tokens ({len(rollout.text)} characters), median over the first "
          f"{w} → the last {w} tokens:")
    print(f"  ms per token, whole step (forward, sampling, text)  {ends(steps, 1e3)}")
    print(f"  µs per token, text work (ours)                      {ends(text_work(lm, ids, whole=False), 1e6)}")
    print(f"  µs per token, decoding the whole text (before)      {ends(text_work(lm, ids, whole=True), 1e6)}",
          flush=True)


if __name__ == "__main__":
    main()
