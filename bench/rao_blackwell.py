"""Variance reduction of q*_RB over q* on the default model, measured over run seeds at one J·N budget.

For each question and each of S run seeds, PPR (and PPR + SEED_5) draws J paths of N answers; q* (mean answer
frequency) and q*_RB (mean θ_n) come from the same paths. Prints, per method, the std of each estimate over seeds
(averaged over labels and questions) and the variance ratio Var(q*_RB) / Var(q*).

    python bench/rao_blackwell.py [--dataset demo] [--questions 10] [--seeds 10] [-J 8] [-N 30]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from tqdm import tqdm

from beliefdrift.backend import DEFAULT_MODEL, load_model
from beliefdrift.data.registry import load_dataset
from beliefdrift.engine.methods import parse_method, run_methods
from beliefdrift.prompts import DEFAULT_PPR_TEMPLATE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--dataset", default="demo")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--questions", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("-J", "--paths", type=int, default=8)
    parser.add_argument("-N", "--steps", type=int, default=30)
    parser.add_argument("--methods", nargs="+", default=["ppr", "ppr-seed5"])
    args = parser.parse_args()

    lm = load_model(args.model, dtype="float32")
    questions = load_dataset(args.dataset, data_dir=args.data_dir, n=args.questions, seed=0)
    methods = [parse_method(name) for name in args.methods]
    # estimates[method][estimator][question] = [seeds, K]
    estimates = {m.name: {"q*": [], "q*_RB": []} for m in methods}
    start = time.perf_counter()
    for question in tqdm(questions, desc="questions"):
        runs = [run_methods(lm, question, methods, paths=args.paths, steps=args.steps, seed=seed,
                            template=DEFAULT_PPR_TEMPLATE)
                for seed in range(args.seeds)]
        for i, method in enumerate(methods):
            estimates[method.name]["q*"].append(np.stack([run[i].probs.numpy() for run in runs]))
            estimates[method.name]["q*_RB"].append(np.stack([run[i].alternatives["q_star_rb"].numpy()
                                                             for run in runs]))
    seconds = time.perf_counter() - start

    print(f"\n{len(questions)} {args.dataset} questions × {args.seeds} seeds, J={args.paths}, N={args.steps} "
          f"({seconds:.0f} s); std over seeds, mean over labels and questions")
    print("| method | std q* | std q*_RB | Var(q*_RB) / Var(q*) |\n|---|---|---|---|")
    for method in methods:
        variance = {name: np.mean([per_q.var(axis=0, ddof=1).mean() for per_q in values])
                    for name, values in estimates[method.name].items()}
        std = {name: np.mean([per_q.std(axis=0, ddof=1).mean() for per_q in values])
               for name, values in estimates[method.name].items()}
        print(f"| {method.title} | {std['q*']:.4f} | {std['q*_RB']:.4f} | {variance['q*_RB'] / variance['q*']:.3f} |")


if __name__ == "__main__":
    main()
