"""Thought–answer pair generation throughput: `model.generate` vs our batched decode on a shared prompt cache,
and our per-token cost early and late in a long rollout, in one run.

    python bench/reasoning.py [--model smollm2-135m-instruct] [--device cpu] [--rollouts 1 4 8] [--tokens 32]
                              [--long-tokens 512] [--threads 1]
    python bench/reasoning.py --shape llama-3.1-8b --device cuda --dtype bfloat16   # random weights, real shape

For each R, three ways of writing R × T tokens for the pairs prompt of a demo question: `generate` one
rollout at a time (the way one would write it first), one `generate` call with `num_return_sequences=R`, and
our decoder (end-of-sequence is suppressed in all three; ours uses guided decoding, which suppresses it by
design). Times include the prompt prefill (once per call). Prints tokens/s and our speed-up over each.

Then one guided rollout of `--long-tokens` tokens: the median time per token (forward pass, sampling and
text) over its first and last `--window` tokens, and, replayed on the same tokens, the host's text work per
token (incremental detokenization, pair parsing, guided tags) against decoding the whole text every token as
the decoder did before. Attention still grows with the context; the text work must not.

With `--shape` (`bench/rollout.py`'s shapes) the model has random weights of a real model's shape, so the text is
noise and only the rates mean anything. One torch thread by default: on a shared machine, oversubscribed threads
make timings erratic.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from statistics import median

import torch
from rollout import SHAPES, TOKENIZER_HELP, shaped_model

from beliefdrift.backend import DEFAULT_MODEL, LanguageModel, load_model
from beliefdrift.backend.loading import resolve_device, resolve_dtype
from beliefdrift.cot import DecodeConfig, PromptCache, ReasoningTask, Rollout, generate_rollouts, nucleus_sampler
from beliefdrift.cot.generation import GUIDE_TAGS, _RolloutState
from beliefdrift.data.registry import load_dataset
from beliefdrift.engine.resampling import make_generator
from beliefdrift.prompts import chat_context


def timed(lm: LanguageModel, run: Callable[[], int]) -> tuple[float, int]:
    """Seconds of `run()` (the device drained before and after) and the number of tokens it reports."""
    sync = torch.cuda.synchronize if lm.device.type == "cuda" else lambda: None
    sync()
    start = time.perf_counter()
    written = run()
    sync()
    return time.perf_counter() - start, written


def generate(lm: LanguageModel, prompt_ids: list[int], calls: int, rollouts: int, tokens: int, seed: int) -> int:
    """Tokens written by `calls` `generate` calls of `rollouts` sequences each."""
    prompt = torch.tensor([prompt_ids], device=lm.device)
    torch.manual_seed(seed)
    written = 0
    with torch.no_grad():
        for _ in range(calls):
            out = lm.model.generate(
                prompt, attention_mask=torch.ones_like(prompt), do_sample=True, temperature=1.0, top_p=0.95,
                top_k=0, max_new_tokens=tokens, min_new_tokens=tokens, num_return_sequences=rollouts,
                pad_token_id=lm.tokenizer.pad_token_id or lm.tokenizer.eos_token_id,
            )
            written += out[:, prompt.shape[1] :].numel()
    return written


def ours(lm: LanguageModel, context: str, rollouts: int, tokens: int, seed: int,
         on_sample: Callable[[], None] = lambda: None) -> list[Rollout]:
    """One batched guided decode of R rollouts on a shared prompt cache (prefill included); `on_sample` is
    called as each token is drawn."""
    cache = PromptCache.from_text(lm, context)
    config = DecodeConfig(num_pairs=10_000, max_new_tokens=tokens, guided=True)
    draw = nucleus_sampler(1.0, 0.95, make_generator(seed, "bench"))

    def sampler(logits: torch.Tensor) -> torch.Tensor:
        on_sample()
        return draw(logits)

    return generate_rollouts(cache, [""] * rollouts, config, sampler, collect_hidden=True)


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
    parser.add_argument("--tokens", type=int, default=32, help="tokens per rollout (T)")
    parser.add_argument("--long-tokens", type=int, default=512, help="tokens of the long rollout (0: skip it)")
    parser.add_argument("--window", type=int, default=64, help="tokens averaged at its start and end")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
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
          f"{len(prompt_ids)} tokens, T={args.tokens} tokens per rollout")
    ours(lm, context, 1, 2, args.seed)  # warm-up
    for r in args.rollouts:
        rates = {
            "generate one at a time": timed(lm, lambda r=r: generate(lm, prompt_ids, r, 1, args.tokens, args.seed)),
            f"generate num_return_sequences={r}": timed(
                lm, lambda r=r: generate(lm, prompt_ids, 1, r, args.tokens, args.seed)),
            "ours": timed(lm, lambda r=r: sum(len(x.token_ids) for x in ours(lm, context, r, args.tokens, args.seed))),
        }
        rates = {name: written / seconds for name, (seconds, written) in rates.items()}
        speed_ups = ", ".join(f"{rates['ours'] / rate:.1f}x" for name, rate in rates.items() if name != "ours")
        print(f"R={r}: " + " | ".join(f"{name} {rate:7.1f} tokens/s" for name, rate in rates.items())
              + f" | ours {speed_ups} as fast", flush=True)
    if not args.long_tokens:
        return
    stamps: list[float] = []
    rollout = ours(lm, context, 1, args.long_tokens, args.seed, lambda: stamps.append(time.perf_counter()))[0]
    steps, ids, w = torch.tensor(stamps).diff().tolist(), rollout.token_ids, args.window

    def ends(seconds: list[float], unit: float) -> str:
        return f"{median(seconds[:w]) * unit:8.3f} → {median(seconds[-w:]) * unit:8.3f}"

    print(f"long rollout, {len(ids)} tokens ({len(rollout.text)} characters), median over the first {w} → "
          f"the last {w} tokens:")
    print(f"  ms per token, whole step (forward, sampling, text)  {ends(steps, 1e3)}")
    print(f"  µs per token, text work (ours)                      {ends(text_work(lm, ids, whole=False), 1e6)}")
    print(f"  µs per token, decoding the whole text (before)      {ends(text_work(lm, ids, whole=True), 1e6)}",
          flush=True)


if __name__ == "__main__":
    main()
