"""PPR rollout throughput: the naive `model.generate` way vs our shared-prefix engine, in one run.

    python bench/rollout.py [--model smollm2-135m-instruct] [--paths 32] [--steps 50] [--questions 2]

(a) naive: `generate(do_sample=True, num_return_sequences=J, max_new_tokens=2N, output_scores=True)`, then
    parse the text into answers and read θ off the scores — what a researcher would write first;
(b) engine, float32; (c) engine, `--dtype auto` (bf16 only where bf16 matmuls are fast).
Prints trajectory-steps/s (J·N per question), the ratios, and achieved FLOP/s as a fraction of a
matrix-multiply peak measured in the same run.
"""

from __future__ import annotations

import argparse
import time

import torch

from beliefdrift.backend import DEFAULT_MODEL, load_model
from beliefdrift.backend.loading import resolve_dtype
from beliefdrift.data.registry import load_dataset
from beliefdrift.prompts import DEFAULT_PPR_TEMPLATE
from beliefdrift.resampling import QuestionRunner, make_generator, ppr_tokens


def matmul_peak(dtype: torch.dtype, size: int = 1024, repeats: int = 20) -> float:
    """FLOP/s of a square matmul, the machine's practical peak for this dtype."""
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    for _ in range(3):
        a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * size**3 * repeats / (time.perf_counter() - start)


def forward_flops(model: torch.nn.Module, new_tokens: int, context: int, logits_rows: int) -> float:
    """≈ 2·(body params)·tokens + 2·(lm_head params)·logit rows + 4·layers·hidden·tokens·context (attention)."""
    config = model.config
    head = config.vocab_size * config.hidden_size
    body = sum(p.numel() for p in model.parameters()) - head * (1 if config.tie_word_embeddings else 2)
    attention = 4 * config.num_hidden_layers * config.hidden_size * new_tokens * context
    return 2 * body * new_tokens + 2 * head * logits_rows + attention


def naive_rollout(lm, question, paths: int, steps: int, seed: int) -> tuple[float, float]:
    """Seconds and FLOPs of the naive generate-and-parse rollout for one question."""
    tokens = ppr_tokens(lm, question, DEFAULT_PPR_TEMPLATE)
    prompt = torch.tensor([tokens.prompt_ids])
    torch.manual_seed(seed)
    start = time.perf_counter()
    with torch.no_grad():
        out = lm.model.generate(
            prompt, attention_mask=torch.ones_like(prompt), do_sample=True, num_return_sequences=paths,
            max_new_tokens=2 * steps, output_scores=True, return_dict_in_generate=True, top_k=0, top_p=1.0,
            pad_token_id=lm.tokenizer.pad_token_id or lm.tokenizer.eos_token_id,
        )
    label_ids = torch.tensor(tokens.label_ids)
    for j in range(paths):  # parse: answers from the text, θ from the score at each answer position
        text = lm.tokenizer.decode(out.sequences[j, prompt.shape[1]:], skip_special_tokens=True)
        answers = [line.strip() for line in text.split("\n") if line.strip() in question.labels]
        positions = [i for i, t in enumerate(out.sequences[j, prompt.shape[1]:].tolist()) if t in tokens.label_ids]
        _ = [torch.softmax(out.scores[i][j, label_ids], -1) for i in positions], answers
    seconds = time.perf_counter() - start
    new = out.sequences.shape[1] - prompt.shape[1]
    flops = forward_flops(lm.model, paths * prompt.shape[1], prompt.shape[1], paths)  # prefill, copied J times
    flops += sum(forward_flops(lm.model, paths, prompt.shape[1] + i, paths) for i in range(1, new))
    return seconds, flops


def engine_rollout(lm, question, paths: int, steps: int, seed: int) -> tuple[float, float]:
    """Seconds and FLOPs of our engine (shared prefill, one forward per answer) for one question."""
    start = time.perf_counter()
    runner = QuestionRunner(lm, question, DEFAULT_PPR_TEMPLATE)
    runner.ppr(paths, steps, make_generator(seed, question.id))
    seconds = time.perf_counter() - start
    prompt = len(runner.ppr_prompt.tokens.prompt_ids)
    width = runner.ppr_prompt.tokens.step_length
    flops = forward_flops(lm.model, prompt, prompt, 1)
    flops += sum(forward_flops(lm.model, paths * width, prompt + width * (i + 1), paths) for i in range(steps))
    return seconds, flops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--paths", type=int, default=32)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--questions", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    questions = load_dataset("demo", n=args.questions, seed=args.seed)
    auto = resolve_dtype("auto", torch.device("cpu"))
    peaks = {torch.float32: matmul_peak(torch.float32)}
    peaks[auto] = peaks.get(auto) or matmul_peak(auto)
    print("matmul peak: " + ", ".join(f"{dt}: {p / 1e9:.1f} GFLOP/s" for dt, p in peaks.items()))
    print(f"bf16 matmul: {matmul_peak(torch.bfloat16, repeats=2) / 1e9:.2f} GFLOP/s; --dtype auto -> {auto}")

    configs = [("naive generate (fp32)", "float32", naive_rollout), ("engine (fp32)", "float32", engine_rollout),
               (f"engine (--dtype auto = {auto})", "auto", engine_rollout)]
    rows = []
    for name, dtype, rollout in configs:
        lm = load_model(args.model, dtype=dtype)
        seconds = flops = 0.0
        for question in questions:
            s, f = rollout(lm, question, args.paths, args.steps, args.seed)
            seconds, flops = seconds + s, flops + f
        rate = args.paths * args.steps * len(questions) / seconds
        rows.append((name, seconds, rate, flops / seconds / peaks[lm.dtype]))
        print(f"{name:32s} {seconds:8.1f} s  {rate:8.1f} trajectory-steps/s  "
              f"{flops / seconds / 1e9:6.1f} GFLOP/s = {rows[-1][3]:.1%} of matmul peak", flush=True)
    naive = rows[0][2]
    print(f"\nJ={args.paths}, N={args.steps}, {len(questions)} questions")
    for name, _, rate, _ in rows[1:]:
        print(f"{name}: {rate / naive:.1f}x naive")


if __name__ == "__main__":
    main()
