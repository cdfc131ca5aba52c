"""A study as a notebook runs it, on the documented API alone (`import beliefdrift as bd`, docs/api.md): five
questions, two methods scored and compared question by question, their EMD and its drift test, one figure.

tests/test_api.py runs it on a tiny random model and type-checks it with `mypy --strict`; `python tests/study.py
MODEL OUT` runs it on any model (e.g. `smollm2-135m-instruct`)."""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # figures to files, no window
import matplotlib.pyplot as plt

import beliefdrift as bd

METHODS = ["ppr", "ppr-seed1"]


def study(model: str, out: Path) -> dict[str, float]:
    lm = bd.load_model(model, dtype="float32")
    questions = bd.load_dataset("demo", n=5)

    # the methods' answer distributions, scored with bootstrap intervals (quality control keeps every question here,
    # qc_path_mass=0: a random model puts little mass on the labels)
    run = bd.evaluate(questions=questions, lm=lm, methods=METHODS, paths=4, steps=3, qc_path_mass=0.0,
                      out=out / "evaluate", progress=False)
    scores: list[bd.ScoreRow] = run.scores(n_resamples=200)
    for score in scores:
        accuracy: bd.Interval = score.metrics["ACC"]
        print(f"{score.title:24} ACC {accuracy.point:.2f} [{accuracy.low:.2f}, {accuracy.high:.2f}] on {score.n}")

    # seeded against unseeded PPR on the same questions: Δ NLL with its paired interval and p
    (pair,) = run.paired(n_resamples=200)
    nll: bd.PairedDelta = pair.deltas["NLL"]
    print(f"{pair.method.title} − {pair.baseline.title}: Δ NLL {nll.delta:+.3f} [{nll.low:+.3f}, {nll.high:+.3f}], "
          f"p = {nll.p:.2f}")

    # EMD over questions (Monte Carlo predictives, whose noise the drift test weighs), Δ EMD‾ question by question
    diagnosed = bd.emd(questions=questions, lm=lm, methods=METHODS, paths=4, steps=2, horizon=2, prefix_lengths=[0],
                       burn_in=2, lookahead=2, exact_budget=0, noise_floor_replicates=0, out=out / "emd",
                       progress=False)
    rows: list[bd.EMDRow] = diagnosed.emd_rows()
    for row in rows:
        test: bd.DriftTest | None = row.drift
        verdict = "untested" if test is None or test.p is None else f"drift test p = {test.p:.2f}"
        print(f"{row.method:24} EMD‾ {row.emd_bar:.4f} ± {row.emd_bar_std:.4f} ({verdict})")
    emd_bar = {name: [float(r["emd_bar_l1"]) for r in diagnosed.records() if r["method"] == name] for name in METHODS}
    emd_delta = bd.paired_mean_bootstrap(emd_bar["ppr-seed1"], emd_bar["ppr"], n_resamples=200)

    # one figure: EMD_k(b) against the burn-in b, per method
    figure, axes = plt.subplots(figsize=(4, 3))
    for row in rows:
        axes.plot(range(len(row.burn_in)), row.burn_in, marker="o", label=row.method)
    axes.set_xlabel("burn-in b")
    axes.set_ylabel("EMD_k(b)")
    axes.legend()
    figure.savefig(out / "emd_k_b.png")
    plt.close(figure)
    return {"delta_nll": nll.delta, "delta_emd": emd_delta.delta, "emd_ppr": rows[0].emd_bar}


if __name__ == "__main__":
    print(study(sys.argv[1], Path(sys.argv[2])))
