"""`beliefdrift emd`: expected martingale drift (paper §5.1, Figure 3) with a c.i.d. check beside it.

For each question × method: EMD‾ (d(p^(k)_n, p^(1)_n) averaged over k = 2 … K at one of the top-K prefixes of each
length n ∈ 𝒩), EMD_k(b) at sampled burn-in prefixes b = 0 … B, and the c.i.d. check on J × N PPR paths. Stores
each question × method's records in the run store (resumable); writes records.csv, summary.md/json, EMD‾ bars and
EMD_k(b) curves. Beside every EMD figure: its noise floor, the EMD the same estimator gives for Pólya-urn
martingales matched to each record (`diagnostics.noise_floor`), computed from the stored records with its own
generators (the measured numbers do not depend on it; stores from before it show no floor). After the table: each
method's paired Δ EMD‾ against PPR over the same questions (`report.paired`).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from beliefdrift.commands.units import DiagnosticsConfig, for_each_unit, to_json
from beliefdrift.config import SamplingOptions, add_command, option, out_option, retuned, settings_from
from beliefdrift.diagnostics.emd import DISTANCES, EMDConfig, EMDRow, aggregate_emd, question_emd
from beliefdrift.diagnostics.kstep import BATCH_BUDGET, EXACT_BUDGET
from beliefdrift.diagnostics.noise_floor import (
    floor_generator,
    missing_fields,
    replicate_summaries,
    spread_fields,
    with_floor,
)
from beliefdrift.diagnostics.trajectory import cid_summary, trajectory_quantities
from beliefdrift.files import write_atomic
from beliefdrift.methods import Method
from beliefdrift.report.diagnostic_plots import DISTANCE_LABELS, plot_emd_bars, plot_emd_burn_in
from beliefdrift.report.paired import emd_comparisons, emd_markdown
from beliefdrift.report.text import markdown_table
from beliefdrift.resampling import QuestionRunner, make_generator


@dataclass(frozen=True)
class EMDCommandConfig(DiagnosticsConfig):
    """The settings of `beliefdrift emd`: -J is the number of Monte Carlo continuations per k-step estimate and of
    c.i.d. paths; -N the c.i.d. path length."""

    _argument_group_name = "EMD"

    paths: int = retuned(SamplingOptions, "paths", 32, "Monte Carlo continuations per k-step estimate and c.i.d. "
                                                       "paths (J)")
    horizon: int = option(10, "EMD‾ averages k = 2 … K", "-K", minimum=2)
    prefix_lengths: list[int] = option([0, 2, 4, 6, 8], "prefix lengths 𝒩 of EMD‾", minimum=0)
    top_k: int = option(5, "a prefix is drawn from the top-k prefixes of each length", minimum=1)
    burn_in: int = option(10, "EMD_k(b) for b = 0 … this", minimum=0)
    lookahead: int = option(10, "the horizon k of EMD_k(b)", "-k", minimum=2)
    burn_in_paths: int = option(1, "sampled burn-in prefixes per question", minimum=1)
    distance: list[str] = option(["l1", "kl"], "distances: l1, kl and tv (total variation = ½ L1)",
                                 choices=DISTANCES)
    exact_budget: int = option(EXACT_BUDGET, "enumerate p^(k) exactly when |options|^(k-1) ≤ this, else Monte Carlo")
    batch_budget: int = option(BATCH_BUDGET, "most paths per forward pass", operational=True, minimum=1)
    noise_floor_replicates: int = option(100, "EMD of R matched Pólya-urn martingales per question: the floor printed "
                                              "beside every EMD figure, with its 95%% interval and whether EMD lies "
                                              "above it (0: off)", operational=True, minimum=0, metavar="R")
    out: Path = out_option("beliefdrift-out/emd")

    @property
    def emd(self) -> EMDConfig:
        return EMDConfig(horizon=self.horizon, prefix_lengths=tuple(self.prefix_lengths), top_k=self.top_k,
                         num_rollouts=self.paths, burn_in=self.burn_in, k=self.lookahead,
                         burn_in_paths=self.burn_in_paths, exact_budget=self.exact_budget,
                         batch_budget=self.batch_budget)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "emd", EMDCommandConfig,
                         "expected martingale drift (EMD‾, EMD_k(b)) and a c.i.d. check", __doc__)
    parser.set_defaults(func=run)


def emd_quantities(runner: QuestionRunner, method: Method, settings: EMDCommandConfig) -> dict[str, Any]:
    """The records of one question × method: EMD summaries and ingredients, then marginal drift and the c.i.d.
    check of J × N PPR paths, and the step spread of θ along J × N more (the floor's own) that the floor matches."""
    result = question_emd(runner, method.num_seeds, settings.emd, make_generator(settings.seed, runner.question.id,
                                                                                  method.name, "emd"))
    return {
        **result.summary(),
        "prefix_lengths": list(result.prefix_lengths),
        "prefixes": [list(p) for p in result.prefixes],
        "seeds": result.seeds,
        "kstep": result.kstep.tolist(),
        "kstep_exact": result.exact,
        "prefixes_exact": result.prefixes_exact,
        "burn_in_first": result.burn_in_first.tolist(),
        "burn_in_kth": result.burn_in_kth.tolist(),
        **trajectory_quantities(runner, method, settings.paths, settings.steps, settings.seed),
        **spread_fields(runner.ppr(settings.paths, settings.steps, floor_generator(settings.seed, runner.question,
                                                                                   method, "paths"),
                                   method.num_seeds).thetas),
    }


def _emd_cells(row: EMDRow, points: list[int]) -> list[str]:
    """EMD‾ and EMD_k(b) at the burn-in `points` as mean ± std, each followed by its floor when `row` has one."""
    cells = [f"{row.emd_bar:.4f} ± {row.emd_bar_std:.4f}"]
    if row.floor_replicates:
        cells += [f"{row.floor:.4f} [{row.floor_low:.4f}, {row.floor_high:.4f}]",
                  f"{'yes' if row.above_floor else 'no'} ({row.floor_p:.3f}); {row.questions_above_floor}/"
                  f"{row.questions} questions"]
    for b in points:
        cells.append(f"{row.burn_in[b]:.4f} ± {row.burn_in_std[b]:.4f}")
        if row.floor_replicates:
            low, high = row.burn_in_floor_low[b], row.burn_in_floor_high[b]
            cells.append(f"{row.burn_in_floor[b]:.4f} [{low:.4f}, {high:.4f}]")
    return cells


def run(args: argparse.Namespace) -> int:
    settings = settings_from(args, EMDCommandConfig)
    config = settings.emd
    answers = max(settings.steps, max(config.prefix_lengths, default=0) + config.horizon, config.burn_in + config.k)
    writer, questions, methods = for_each_unit("emd", settings, lambda runner, m: emd_quantities(runner, m, settings),
                                               answers)
    records = {m.name: [writer.read(q.id, m.name) for q in questions] for m in methods}
    writer.write_scalars([(q.id, m.name) for q in questions for m in methods])

    missing = missing_fields([r for m in methods for r in records[m.name]])
    if settings.noise_floor_replicates and missing:
        print(f"no noise floor: records stored before it existed lack {', '.join(missing)} (new --out for one)")
    floors = {m.name: replicate_summaries(records[m.name], [floor_generator(settings.seed, q, m) for q in questions],
                                          config, settings.noise_floor_replicates, settings.distance)
              for m in methods} if settings.noise_floor_replicates and not missing else {}

    summary: dict[str, Any] = {}
    header = ["method", "questions"]
    for distance in settings.distance:
        label = DISTANCE_LABELS[distance]
        floor = ["floor [95%]"] if floors else []
        header += [f"EMD‾ ({label})", *floor, *(["> floor (p)"] if floors else [])]
        header += [f"EMD_{settings.lookahead}(0) ({label})", *floor]
        header += [f"EMD_{settings.lookahead}({settings.burn_in}) ({label})", *floor] if settings.burn_in else []
    header += ["c.i.d. ‖D̄‖₁", "c.i.d. rejected"]
    rows = {m.name: [m.title, str(len(questions))] for m in methods}
    for distance in settings.distance:
        emd_rows = [aggregate_emd(m.title, records[m.name], distance) for m in methods]
        if floors:
            emd_rows = [with_floor(row, records[m.name], floors[m.name]) for m, row in zip(methods, emd_rows,
                                                                                          strict=True)]
        for method, row in zip(methods, emd_rows, strict=True):
            summary.setdefault(method.name, {})[distance] = row.__dict__
            rows[method.name] += _emd_cells(row, [0, len(row.burn_in) - 1] if settings.burn_in else [0])
        plot_emd_bars({settings.dataset: emd_rows}, settings.out / f"emd_bar_{distance}",
                      title=f"K = {settings.horizon}")
        plot_emd_burn_in(emd_rows, settings.lookahead, settings.out / f"emd_k_b_{distance}", title=settings.dataset)
    for method in methods:
        cid = cid_summary(records[method.name])
        summary[method.name]["cid"] = cid
        summary[method.name]["kstep_exact"] = all(r["kstep_exact"] for r in records[method.name])
        summary[method.name]["prefixes_exact"] = all(r["prefixes_exact"] for r in records[method.name])
        rows[method.name] += [f"{cid['cid_l1_mean']:.3f} ± {cid['cid_l1_std']:.3f}",
                              f"{cid['cid_rejected']}/{cid['questions']}"]
    table = markdown_table(header, list(rows.values()))
    if floors:
        table += (f"\n\nfloor: mean [2.5%, 97.5%] of the same figure for {settings.noise_floor_replicates} "
                  "replicates of Pólya-urn martingales matched to each question's θ and spread (exact martingales: "
                  "EMD = 0, so the floor is the estimator's noise); > floor: EMD‾ above the 97.5% point (one-sided p), "
                  "and the questions whose own EMD‾ is above their own floor's")
    paired = emd_markdown(emd_comparisons(records, settings.distance))
    table += f"\n\n{paired}" if paired else ""
    print(table)
    write_atomic(settings.out / "summary.md", table + "\n")
    write_atomic(settings.out / "summary.json", to_json(summary))
    print(f"wrote {settings.out}/summary.md, records.csv, emd_bar_*.png/pdf and emd_k_b_*.png/pdf")
    return 0
