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
from typing import Any

from beliefdrift.commands.units import add_run_args, for_each_unit, run_config, to_json
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


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def _distances(text: str) -> tuple[str, ...]:
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    unknown = [name for name in names if name not in DISTANCES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"distances must be among {', '.join(DISTANCES)}; got {text!r}")
    return names


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("emd", help="expected martingale drift (EMD‾, EMD_k(b)) and a c.i.d. check",
                                   description=__doc__)
    add_run_args(parser, paths=32, steps=20, out="beliefdrift-out/emd")
    group = parser.add_argument_group("EMD", "-J is the number of Monte Carlo continuations per k-step estimate "
                                             "and of c.i.d. paths; -N the c.i.d. path length")
    group.add_argument("--K", type=int, default=10, dest="horizon", help="EMD‾ averages k = 2 … K")
    group.add_argument("--prefix-lengths", type=_ints, default=(0, 2, 4, 6, 8), help="𝒩, comma list")
    group.add_argument("--top-k", type=int, default=5, help="a prefix is drawn from the top-k of each length")
    group.add_argument("--burn-in", type=int, default=10, help="EMD_k(b) for b = 0 … this")
    group.add_argument("--k", type=int, default=10, help="horizon of EMD_k(b)")
    group.add_argument("--burn-in-paths", type=int, default=1, help="sampled burn-in prefixes per question")
    group.add_argument("--distance", type=_distances, default=("l1", "kl"),
                       help="comma list of l1, kl and tv (total variation = ½ L1)")
    group.add_argument("--exact-budget", type=int, default=EXACT_BUDGET,
                       help="enumerate p^(k) exactly when |options|^(k-1) ≤ this, else Monte Carlo")
    group.add_argument("--batch-budget", type=int, default=BATCH_BUDGET, help="most paths per forward pass")
    group.add_argument("--noise-floor-replicates", type=int, default=100, metavar="R",
                       help="EMD of R matched Pólya-urn martingales per question: the floor printed beside every "
                            "EMD figure, with its 95%% interval and whether EMD lies above it (0: off)")
    parser.set_defaults(func=run)


def config_from_args(args: argparse.Namespace) -> EMDConfig:
    return EMDConfig(horizon=args.horizon, prefix_lengths=args.prefix_lengths, top_k=args.top_k,
                     num_rollouts=args.paths, burn_in=args.burn_in, k=args.k, burn_in_paths=args.burn_in_paths,
                     exact_budget=args.exact_budget, batch_budget=args.batch_budget)


def emd_quantities(
    runner: QuestionRunner, method: Method, config: EMDConfig, args: argparse.Namespace
) -> dict[str, Any]:
    """The records of one question × method: EMD summaries and ingredients, then marginal drift and the c.i.d.
    check of J × N PPR paths, and the step spread of θ along J × N more (the floor's own) that the floor matches."""
    result = question_emd(runner, method.num_seeds, config, make_generator(args.seed, runner.question.id,
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
        **trajectory_quantities(runner, method, args.paths, args.steps, args.seed),
        **spread_fields(runner.ppr(args.paths, args.steps, floor_generator(args.seed, runner.question, method, "paths"),
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
    config = config_from_args(args)
    identity = run_config(args, "horizon", "prefix_lengths", "top_k", "burn_in", "k", "burn_in_paths", "exact_budget")
    answers = max(args.steps, max(config.prefix_lengths, default=0) + config.horizon, config.burn_in + config.k)
    writer, questions, methods = for_each_unit(
        args, identity, lambda runner, m: emd_quantities(runner, m, config, args), "emd", answers
    )
    records = {m.name: [writer.read(q.id, m.name) for q in questions] for m in methods}
    writer.write_scalars([(q.id, m.name) for q in questions for m in methods])

    missing = missing_fields([r for m in methods for r in records[m.name]])
    if args.noise_floor_replicates and missing:
        print(f"no noise floor: records stored before it existed lack {', '.join(missing)} (new --out for one)")
    floors = {m.name: replicate_summaries(records[m.name], [floor_generator(args.seed, q, m) for q in questions],
                                          config, args.noise_floor_replicates, args.distance)
              for m in methods} if args.noise_floor_replicates and not missing else {}

    summary: dict[str, Any] = {}
    header = ["method", "questions"]
    for distance in args.distance:
        label = DISTANCE_LABELS[distance]
        floor = ["floor [95%]"] if floors else []
        header += [f"EMD‾ ({label})", *floor, *(["> floor (p)"] if floors else [])]
        header += [f"EMD_{args.k}(0) ({label})", *floor]
        header += [f"EMD_{args.k}({args.burn_in}) ({label})", *floor] if args.burn_in else []
    header += ["c.i.d. ‖D̄‖₁", "c.i.d. rejected"]
    rows = {m.name: [m.title, str(len(questions))] for m in methods}
    for distance in args.distance:
        emd_rows = [aggregate_emd(m.title, records[m.name], distance) for m in methods]
        if floors:
            emd_rows = [with_floor(row, records[m.name], floors[m.name]) for m, row in zip(methods, emd_rows,
                                                                                          strict=True)]
        for method, row in zip(methods, emd_rows, strict=True):
            summary.setdefault(method.name, {})[distance] = row.__dict__
            rows[method.name] += _emd_cells(row, [0, len(row.burn_in) - 1] if args.burn_in else [0])
        plot_emd_bars({args.dataset: emd_rows}, args.out / f"emd_bar_{distance}", title=f"K = {args.horizon}")
        plot_emd_burn_in(emd_rows, args.k, args.out / f"emd_k_b_{distance}", title=args.dataset)
    for method in methods:
        cid = cid_summary(records[method.name])
        summary[method.name]["cid"] = cid
        summary[method.name]["kstep_exact"] = all(r["kstep_exact"] for r in records[method.name])
        summary[method.name]["prefixes_exact"] = all(r["prefixes_exact"] for r in records[method.name])
        rows[method.name] += [f"{cid['cid_l1_mean']:.3f} ± {cid['cid_l1_std']:.3f}",
                              f"{cid['cid_rejected']}/{cid['questions']}"]
    table = markdown_table(header, list(rows.values()))
    if floors:
        table += (f"\n\nfloor: mean [2.5%, 97.5%] of the same figure for {args.noise_floor_replicates} replicates of "
                  "Pólya-urn martingales matched to each question's θ and spread (exact martingales: EMD = 0, so the "
                  "floor is the estimator's noise); > floor: EMD‾ above the 97.5% point (one-sided p), "
                  "and the questions whose own EMD‾ is above their own floor's")
    paired = emd_markdown(emd_comparisons(records, args.distance))
    table += f"\n\n{paired}" if paired else ""
    print(table)
    write_atomic(args.out / "summary.md", table + "\n")
    write_atomic(args.out / "summary.json", to_json(summary))
    print(f"wrote {args.out}/summary.md, records.csv, emd_bar_*.png/pdf and emd_k_b_*.png/pdf")
    return 0
