"""`beliefdrift drift`: marginal drift of θ_n and a c.i.d. check for PPR-type methods (paper Figure 1).

For each question × method: J PPR paths of N answers; E[θ_n] ± std across paths against n, the label-free shift
‖E[θ_n] − E[θ_0]‖_1, and the first-half vs second-half answer-frequency difference (c.i.d. check). Stores each
question × method's records in the run store (resumable); writes records.csv, summary.md/json and the figures.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from beliefdrift.commands.units import DiagnosticsConfig, for_each_unit, to_json
from beliefdrift.config import SamplingOptions, add_command, option, out_option, retuned, settings_from
from beliefdrift.diagnostics.trajectory import cid_summary, trajectory_quantities
from beliefdrift.files import write_atomic
from beliefdrift.report.diagnostic_plots import plot_curves
from beliefdrift.report.marginal import plot_average_drift, record_drift
from beliefdrift.report.plots import plot_marginal_drift
from beliefdrift.report.text import markdown_table, mean_std, plus_minus


@dataclass(frozen=True)
class DriftConfig(DiagnosticsConfig):
    """The settings of `beliefdrift drift`."""

    _argument_group_name = "drift"

    paths: int = retuned(SamplingOptions, "paths", 16)
    plot_questions: int = option(1, "per-question drift figures to draw", operational=True, minimum=0)
    out: Path = out_option("beliefdrift-out/drift")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "drift", DriftConfig, "marginal drift of θ_n and a c.i.d. check", __doc__)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = settings_from(args, DriftConfig)
    writer, questions, methods = for_each_unit(
        "drift", config, lambda runner, m: trajectory_quantities(runner, m, config.paths, config.steps, config.seed),
        config.steps,
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
    write_atomic(config.out / "summary.md", table + "\n")
    write_atomic(config.out / "summary.json", to_json(summary))

    written = plot_curves([(m.title, summary[m.name]["marginal_shift_mean"], summary[m.name]["marginal_shift_std"])
                           for m in methods], "n (answers generated)", r"$\|E[\theta_n] - E[\theta_0]\|_1$",
                          config.out / "marginal_shift", title=f"{config.dataset}: mean ± std over questions")
    written += plot_average_drift(questions, methods, records, config.out / "marginal_drift", config.dataset)
    for question in questions[: config.plot_questions]:
        i = questions.index(question)
        panels = [(m.title, record_drift(records[m.name][i])) for m in methods]
        written += plot_marginal_drift(panels, question.labels, config.out / f"marginal_drift_{question.id}",
                                       title=f"{question.id}: {question.stem[:70]}")
    print(f"wrote {config.out}/summary.md, records.csv and {len(written)} figure files")
    return 0
