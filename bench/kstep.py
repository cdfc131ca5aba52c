"""k-step predictives on the default model: exact enumeration vs Monte Carlo (J = 32) for k ≤ 4 with |𝒜| = 5.

Exact p^(k) needs the 1 + 5 + … + 5^{k−2} nodes above the leaves (one forward pass per level); Monte Carlo needs
k − 1 forward passes of J paths. Prints wall-clock time of each and the Monte Carlo error ‖p̂^(k) − p^(k)‖_1
(measured in the same run), at the empty prefix and after a 4-answer prefix.

    python bench/kstep.py [--model NAME] [--rollouts 32] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from beliefdrift.backend import DEFAULT_MODEL, load_model
from beliefdrift.data.registry import load_dataset
from beliefdrift.diagnostics.kstep import kstep_exact, kstep_monte_carlo
from beliefdrift.engine.resampling import QuestionRunner, make_generator


def timed(repeats: int, fn, *args):
    """The result of the last call fn(*args) and the best wall-clock time over `repeats` calls."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn(*args)
        best = min(best, time.perf_counter() - start)
    return result, best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--rollouts", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", torch.get_num_threads())))
    lm = load_model(args.model, dtype="float32")
    question = next(q for q in load_dataset("demo") if q.num_choices == 5)
    runner = QuestionRunner(lm, question)
    print(f"{lm.name}: question {question.id}, |A| = {question.num_choices}, "
          f"prompt {len(runner.ppr_prompt.tokens.prompt_ids)} tokens, J = {args.rollouts}, "
          f"{torch.get_num_threads()} threads, best of {args.repeats}")
    print("| prefix | k | exact nodes | exact s | MC s | exact/MC | MC L1 error |")
    print("|---|---|---|---|---|---|---|")
    for prefix in ([], [0, 1, 1, 0]):
        batch = runner.paths(1)
        if prefix:
            batch.advance(torch.tensor([prefix]))
        for k in (2, 3, 4):
            exact, t_exact = timed(args.repeats, kstep_exact, batch, k)
            mc, t_mc = timed(args.repeats, kstep_monte_carlo, batch, k, args.rollouts, make_generator(0, k))
            error = float((mc.p(k) - exact.p(k)).abs().sum())
            nodes = sum(question.num_choices**level for level in range(1, k))
            print(f"| {''.join('ABCDE'[a] for a in prefix) or '∅'} | {k} | {nodes} | {t_exact:.3f} | {t_mc:.3f} | "
                  f"{t_exact / t_mc:.2f} | {error:.4f} |")


if __name__ == "__main__":
    main()
