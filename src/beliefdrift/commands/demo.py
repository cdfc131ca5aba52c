"""`beliefdrift demo`: the paper's main observations on the bundled demo set with the default model.

Runs Direct-Query, PPR, PPR+SEED_1 and PPR+SEED_5, prints a short table and draws the marginal drift
of θ_n (the paper's Figure 1 (a)/(b)) for one question.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from tqdm import tqdm

from beliefdrift.commands.common import add_model_args, add_output_args, add_sampling_args, model_from_args
from beliefdrift.data.registry import load_dataset
from beliefdrift.diagnostics.marginal import marginal_drift
from beliefdrift.methods import MethodResult, parse_method, run_methods
from beliefdrift.report.plots import plot_marginal_drift

DEMO_METHODS = ("direct", "ppr", "ppr-seed1", "ppr-seed5")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("demo", help="run the paper's methods on the bundled demo set", description=__doc__)
    add_model_args(parser)
    add_sampling_args(parser, paths=8, steps=20)
    add_output_args(parser, "beliefdrift-out/demo")
    parser.add_argument("--n", type=int, default=None, help="number of demo questions (default: all)")
    parser.add_argument("--plot-question", default=None, help="question id for the drift figure (default: first)")
    parser.set_defaults(func=run)


def summary_rows(results: dict[str, list[MethodResult]], targets: list[int]) -> list[tuple[str, float, float, float]]:
    """(method, accuracy, mean confidence, mean valid_mass) per method."""
    rows = []
    for per_question in results.values():
        probs = torch.stack([r.probs for r in per_question])
        correct = (probs.argmax(1) == torch.tensor(targets)).double().mean().item()
        confidence = probs.max(1).values.mean().item()
        valid = sum(r.valid_mass for r in per_question) / len(per_question)
        rows.append((per_question[0].method.title, correct, confidence, valid))
    return rows


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    questions = load_dataset("demo", n=args.n, seed=args.seed)
    methods = [parse_method(name) for name in DEMO_METHODS]
    print(f"loading {args.model} ...", flush=True)
    lm = model_from_args(args)
    print(f"{len(questions)} questions × {len(methods)} methods, J={args.paths} paths, N={args.steps} answers "
          f"({lm.dtype}, {lm.device})", flush=True)
    results: dict[str, list[MethodResult]] = {m.name: [] for m in methods}
    for question in tqdm(questions, desc="demo", unit="question"):
        for result in run_methods(lm, question, methods, args.paths, args.steps, args.seed, args.template):
            results[result.method.name].append(result)

    rows = summary_rows(results, [q.answer_index for q in questions])
    table = markdown_table(
        ["method", "accuracy", "mean confidence", "mean valid_mass"],
        [[name, f"{acc:.3f}", f"{conf:.3f}", f"{valid:.3f}"] for name, acc, conf, valid in rows],
    )
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.md").write_text(table + "\n")

    index = next((i for i, q in enumerate(questions) if q.id == args.plot_question), 0)
    question = questions[index]
    panels = [(results[name][index].method.title, marginal_drift(results[name][index].trajectories))
              for name in ("ppr", "ppr-seed5")]
    written = plot_marginal_drift(panels, question.labels, Path(args.out) / "marginal_drift",
                                  title=f"{question.id}: {question.stem[:70]}")
    print(f"wrote {args.out / 'summary.md'} and {', '.join(str(p) for p in written)}")
    return 0
