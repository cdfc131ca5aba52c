"""`beliefdrift drift`: marginal drift of θ_n and a c.i.d. check for PPR-type methods (paper Figure 1).

For each question × method: J PPR paths of N answers; E[θ_n] ± std across paths against n, the label-free shift
‖E[θ_n] − E[θ_0]‖_1, and the first-half vs second-half answer-frequency difference (c.i.d. check). Stores each
question × method's records in the run store (resumable); writes records.csv, summary.md/json and the figures.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tqdm import tqdm

from beliefdrift.adapters import base_model, load_adapter
from beliefdrift.backend import LanguageModel
from beliefdrift.commands.common import (
    add_data_args,
    add_model_args,
    add_output_args,
    add_sampling_args,
    add_template_ending_arg,
    model_from_args,
)
from beliefdrift.data.question import MCQuestion
from beliefdrift.data.registry import fingerprint, load_dataset
from beliefdrift.diagnostics.cid import cid_check
from beliefdrift.diagnostics.marginal import marginal_drift, marginal_shift
from beliefdrift.evaluation import split_long_prompts
from beliefdrift.files import write_atomic
from beliefdrift.methods import Method, parse_method
from beliefdrift.prompts import DEFAULT_TEMPLATE_ENDING
from beliefdrift.records import RecordWriter
from beliefdrift.report.diagnostic_plots import plot_curves
from beliefdrift.report.marginal import plot_average_drift, record_drift
from beliefdrift.report.plots import plot_marginal_drift
from beliefdrift.report.text import markdown_table, mean_std, plus_minus
from beliefdrift.resampling import QuestionRunner, make_generator

BASE_METHODS = ("ppr", "ppr-seed5")
ADAPTER_METHODS = ("am-ppr", "am-ppr-seed5")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("drift", help="marginal drift of θ_n and a c.i.d. check", description=__doc__)
    add_run_args(parser, paths=16, steps=20, out="beliefdrift-out/drift")
    parser.add_argument("--plot-questions", type=int, default=1, help="per-question drift figures to draw")
    parser.set_defaults(func=run)


def add_run_args(parser: argparse.ArgumentParser, paths: int, steps: int, out: str) -> None:
    """Model, questions, methods, sampling and output options shared by `drift` and `emd`."""
    add_model_args(parser)
    add_template_ending_arg(parser)
    add_sampling_args(parser, paths=paths, steps=steps)
    add_output_args(parser, out)
    add_data_args(parser, dataset="demo")
    group = parser.add_argument_group("methods")
    group.add_argument("--methods", default=None,
                       help=f"comma list of PPR-type methods (default {','.join(BASE_METHODS)}, "
                            f"plus {','.join(ADAPTER_METHODS)} with --adapter)")
    group.add_argument("--adapter", type=Path, default=None, help="peft LoRA directory of the SC-tuned model (AM-PPR)")
    parser.add_argument("--skip-long-prompts", action="store_true",
                        help="skip (and count) questions whose prompt and answers exceed the model's context")


def methods_from_args(args: argparse.Namespace) -> list[Method]:
    names = args.methods.split(",") if args.methods else [*BASE_METHODS, *(ADAPTER_METHODS if args.adapter else ())]
    methods = [parse_method(name) for name in names]
    for method in methods:
        if not method.resamples:
            raise ValueError(f"{method.name}: drift diagnostics need a resampling method (ppr…, am-ppr…)")
        if method.needs_adapter and args.adapter is None:
            raise ValueError(f"{method.name} needs --adapter (a LoRA directory of the SC-tuned model)")
    return methods


def questions_from_args(args: argparse.Namespace) -> list[MCQuestion]:
    questions = load_dataset(args.dataset, split=args.split, data_dir=args.data_dir, n=args.n, seed=args.seed)
    if not questions or not isinstance(questions[0], MCQuestion):
        raise ValueError(f"{args.dataset}: drift diagnostics need multiple-choice questions")
    return questions


class Models:
    """The base model and, with an adapter, the tuned one; `use(method)` gives the model a method runs on."""

    def __init__(self, args: argparse.Namespace):
        print(f"loading {args.model} ...", flush=True)
        self.base = model_from_args(args)
        self.tuned = load_adapter(self.base, args.adapter) if args.adapter else None

    @contextmanager
    def use(self, method: Method) -> Iterator[LanguageModel]:
        if method.needs_adapter:
            yield self.tuned
        elif self.tuned is None:
            yield self.base
        else:  # loading the adapter patched the base modules: switch it off for the base methods
            with base_model(self.tuned):
                yield self.tuned


def run_config(args: argparse.Namespace, *names: str) -> dict[str, Any]:
    """The settings that determine a question × method record (what a resumed run must share)."""
    keys = ("command", "model", "dtype", "template", "dataset", "split", "seed", "adapter", "paths", "steps", *names)
    if args.template_ending != DEFAULT_TEMPLATE_ENDING:  # absent for the default: earlier runs still resume
        keys += ("template_ending",)
    return {key: str(getattr(args, key)) if isinstance(getattr(args, key), Path) else getattr(args, key)
            for key in keys}


def for_each_unit(
    args: argparse.Namespace,
    config: dict[str, Any],
    compute: Callable[[QuestionRunner, Method], dict[str, Any]],
    desc: str,
    answers: int,
) -> tuple[RecordWriter, list[MCQuestion], list[Method]]:
    """Write `compute(runner, method)` (a dict of quantities) for every question × method not written yet, into
    the run store of `config` and the questions' fingerprint, opened once model and questions have loaded.
    `answers` is the most answers a path holds after its seeds (for the check against the model's context)."""
    questions, methods = questions_from_args(args), methods_from_args(args)
    models = Models(args)
    questions, skipped = split_long_prompts(models.base, questions, methods, answers, args.template,
                                            args.template_ending, args.skip_long_prompts)
    if args.skip_long_prompts:
        config = {**config, "skipped_long_prompts": [q.id for q in skipped]}
        print(f"skipped {len(skipped)} questions longer than the model's context", flush=True)
    writer = RecordWriter(args.out, {**config, "questions_sha256": fingerprint(questions)})
    todo = [(q, m) for q in questions for m in methods if not writer.done(q.id, m.name)]
    print(f"{len(questions)} questions × {len(methods)} methods ({len(questions) * len(methods) - len(todo)} done)",
          flush=True)
    current, runners = None, {}
    for question, method in tqdm(todo, desc=desc, unit="question×method"):
        if writer.done(question.id, method.name):  # another process on this directory stored it meanwhile
            continue
        if question is not current:  # one question's prefills at a time (base and tuned model)
            current, runners = question, {}
        with models.use(method) as lm:
            runner = runners.setdefault(method.needs_adapter, QuestionRunner(lm, question, args.template,
                                                                                args.template_ending))
            writer.write(question.id, {method.name: compute(runner, method)})
    return writer, questions, methods


def trajectory_quantities(runner: QuestionRunner, method: Method, paths: int, steps: int, seed: int) -> dict[str, Any]:
    """Marginal drift and c.i.d. check of J × N PPR paths (the generator of `run_methods`, so the same paths)."""
    traj = runner.ppr(paths, steps, make_generator(seed, runner.question.id, method.name), method.num_seeds)
    drift = marginal_drift(traj)
    cid = cid_check(traj.answers, traj.num_labels, make_generator(seed, runner.question.id, method.name, "cid"))
    return {
        "marginal_mean": drift.mean.tolist(),
        "marginal_std": drift.std.tolist(),
        "marginal_shift": marginal_shift(drift).tolist(),
        "valid_mass": float(traj.valid_mass.mean()),
        "cid_difference": cid.difference.tolist(),
        "cid_low": cid.low.tolist(),
        "cid_high": cid.high.tolist(),
        "cid_l1": cid.l1,
        "cid_consistent": cid.consistent,
    }


def cid_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    mean, std = mean_std([r["cid_l1"] for r in records], ddof=1)
    return {"cid_l1_mean": float(mean), "cid_l1_std": float(std),
            "cid_rejected": sum(not r["cid_consistent"] for r in records), "questions": len(records)}


def run(args: argparse.Namespace) -> int:
    writer, questions, methods = for_each_unit(
        args, run_config(args), lambda runner, m: trajectory_quantities(runner, m, args.paths, args.steps, args.seed),
        "drift", args.steps,
    )
    records = {m.name: [writer.read(q.id, m.name) for q in questions] for m in methods}
    writer.write_scalars([(q.id, m.name) for q in questions for m in methods])

    summary, rows = {}, []
    for method in methods:
        shift_mean, shift_std = mean_std([r["marginal_shift"] for r in records[method.name]], ddof=1)
        summary[method.name] = {"marginal_shift_mean": shift_mean.tolist(), "marginal_shift_std": shift_std.tolist(),
                                **cid_summary(records[method.name])}
        s = summary[method.name]
        rows.append([method.title, str(len(questions)), plus_minus(shift_mean[-1], shift_std[-1]),
                     plus_minus(s["cid_l1_mean"], s["cid_l1_std"]), f"{s['cid_rejected']}/{len(questions)}"])
    table = markdown_table(["method", "questions", "‖E[θ_N] − E[θ_0]‖₁", "c.i.d. ‖D̄‖₁", "c.i.d. rejected"], rows)
    print(table)
    write_atomic(args.out / "summary.md", table + "\n")
    write_atomic(args.out / "summary.json", to_json(summary))

    written = plot_curves([(m.title, summary[m.name]["marginal_shift_mean"], summary[m.name]["marginal_shift_std"])
                           for m in methods], "n (answers generated)", r"$\|E[\theta_n] - E[\theta_0]\|_1$",
                          args.out / "marginal_shift", title=f"{args.dataset}: mean ± std over questions")
    written += plot_average_drift(questions, methods, records, args.out / "marginal_drift", args.dataset)
    for question in questions[: args.plot_questions]:
        i = questions.index(question)
        panels = [(m.title, record_drift(records[m.name][i])) for m in methods]
        written += plot_marginal_drift(panels, question.labels, args.out / f"marginal_drift_{question.id}",
                                       title=f"{question.id}: {question.stem[:70]}")
    print(f"wrote {args.out}/summary.md, records.csv and {len(written)} figure files")
    return 0


def to_json(value: Any) -> str:
    return json.dumps(value, indent=2) + "\n"
