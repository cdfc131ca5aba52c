"""Thought–answer pair generation throughput: `model.generate` one rollout at a time vs our batched decode on
a shared prompt cache, in one run.

    python bench/reasoning.py [--model smollm2-135m-instruct] [--rollouts 4 8] [--tokens 32] [--threads 1]

Both write exactly R × T tokens per question for the pairs prompt of a demo question (end-of-sequence is
suppressed in both; the batched side uses guided decoding, which suppresses it by design). Times include
the prompt prefill (once per question batched, once per rollout with `generate`). Prints tokens/s and the
speed-up per R. One torch thread by default: on a shared machine, oversubscribed threads make timings erratic.
"""

from __future__ import annotations

import argparse
import time

import torch

from beliefdrift.backend import DEFAULT_MODEL, load_model
from beliefdrift.data.registry import load_dataset
from beliefdrift.prompts import chat_context
from beliefdrift.reasoning import DecodeConfig, PromptCache, ReasoningTask, generate_rollouts, nucleus_sampler
from beliefdrift.resampling import make_generator


def sequential(lm, prompt_ids: list[int], rollouts: int, tokens: int, seed: int) -> tuple[float, int]:
    """Seconds and tokens of R `generate` calls (the way one would write it first)."""
    prompt = torch.tensor([prompt_ids])
    torch.manual_seed(seed)
    start, written = time.perf_counter(), 0
    with torch.no_grad():
        for _ in range(rollouts):
            out = lm.model.generate(
                prompt, attention_mask=torch.ones_like(prompt), do_sample=True, temperature=1.0, top_p=0.95,
                top_k=0, max_new_tokens=tokens, min_new_tokens=tokens,
                pad_token_id=lm.tokenizer.pad_token_id or lm.tokenizer.eos_token_id,
            )
            written += out.shape[1] - prompt.shape[1]
    return time.perf_counter() - start, written


def batched(lm, context: str, rollouts: int, tokens: int, seed: int) -> tuple[float, int]:
    """Seconds and tokens of one batched decode of R rollouts on a shared prompt cache (prefill included)."""
    start = time.perf_counter()
    cache = PromptCache.from_text(lm, context)
    config = DecodeConfig(num_pairs=10_000, max_new_tokens=tokens, guided=True)
    sampler = nucleus_sampler(1.0, 0.95, make_generator(seed, "bench"))
    result = generate_rollouts(cache, [""] * rollouts, config, sampler, collect_hidden=True)
    return time.perf_counter() - start, sum(len(r.token_ids) for r in result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--rollouts", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--tokens", type=int, default=32, help="tokens per rollout (T)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    lm = load_model(args.model, dtype="float32")
    task = ReasoningTask.from_item(load_dataset("demo", n=1, seed=args.seed)[0])
    context = chat_context(lm.tokenizer, task.pairs_prompt(10))
    prompt_ids = lm.tokenizer(context, add_special_tokens=False)["input_ids"]
    print(f"{args.model} (float32, {torch.get_num_threads()} threads), pairs prompt of {len(prompt_ids)} tokens, "
          f"T={args.tokens} tokens per rollout")
    batched(lm, context, 1, 2, args.seed)  # warm-up
    for rollouts in args.rollouts:
        seq_s, seq_n = sequential(lm, prompt_ids, rollouts, args.tokens, args.seed)
        bat_s, bat_n = batched(lm, context, rollouts, args.tokens, args.seed)
        print(f"R={rollouts}: model.generate one rollout at a time {seq_s:6.1f} s {seq_n / seq_s:6.1f} tokens/s | "
              f"batched shared-prefix {bat_s:6.1f} s {bat_n / bat_s:6.1f} tokens/s | "
              f"speed-up {bat_n / bat_s / (seq_n / seq_s):.1f}x", flush=True)


if __name__ == "__main__":
    main()
