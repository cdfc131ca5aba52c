"""Paired comparisons: the vectorised paired bootstrap against a per-resample loop and hand-computed values, the
p-value of each kind of metric (exact sign test, betting test of a bounded mean, swap permutation test) against brute
force, its size on skewed, rare-value, heavy-tailed and near-certain nulls where the former rule rejected up to 82%,
its power where the bound leaves some, a method against itself (Δ = 0, p = 1), a clearly better method (p small),
which pairs are compared, and the paired tables written by `report` (after a tiny `evaluate` run) and printed by
`emd`."""

from __future__ import annotations

import csv
import itertools
import json
import math
import sys
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from beliefdrift.cli.main import main
from beliefdrift.engine.methods import parse_method
from beliefdrift.metrics.functional import (
    METRIC_NAMES,
    MetricWarning,
    PairedDelta,
    _paired_delta,
    accuracy,
    auroc,
    bounded_mean_p,
    brier,
    ece,
    nll,
    nll_bound,
    paired_bootstrap,
    paired_mean_bootstrap,
    paired_summary,
    resample_indices,
    sign_test_p,
    valid_only,
)
from beliefdrift.report.paired import (
    PairedComparison,
    comparisons,
    emd_comparisons,
    emd_markdown,
    metrics_markdown,
    paired_scores,
)
from beliefdrift.runs.scoring import QualityControl
from beliefdrift.runs.store import ResultRow, RunStore

sys.path.insert(0, str(Path(__file__).parents[1] / "bench"))
import paired as paired_bench  # noqa: E402

METRICS: dict[str, Callable[..., Any]] = {"ACC": accuracy, "AUC": auroc, "ECE": partial(ece, n_bins=15),
                                          "NLL": nll, "BS": brier}


def ragged_pair(seed: int, n: int) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
    """Two methods' distributions over 2–5 options per question, and targets."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 6, size=n)
    a = [rng.dirichlet(np.full(k, 0.7)) for k in sizes]
    b = [rng.dirichlet(np.full(k, 2.0)) for k in sizes]
    return a, b, np.array([rng.integers(k) for k in sizes])


def brute_force(metric: Callable[..., Any], a: list[np.ndarray], b: list[np.ndarray], targets: np.ndarray,
                n_resamples: int, seed: int) -> PairedDelta:
    """One resample at a time with the public metrics, the interval and p-value written out."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MetricWarning)
        delta = float(metric(a, targets)) - float(metric(b, targets))
        diffs = np.array([float(metric([a[i] for i in rows], targets[rows]))
                          - float(metric([b[i] for i in rows], targets[rows]))
                          for rows in resample_indices(len(a), n_resamples, np.random.default_rng(seed))])
    diffs = diffs[~np.isnan(diffs)]
    low, high = np.percentile(diffs, [2.5, 97.5])
    far = min(np.sum(diffs <= 0), np.sum(diffs >= 0))
    return PairedDelta(delta, float(low), float(high), min(1.0, 2 * (1 + far) / (len(diffs) + 1)))


def swap_brute_force(metric: Callable[..., Any], a: list[np.ndarray], b: list[np.ndarray],
                     targets: np.ndarray) -> float:
    """The exact swap permutation p: Δ for each of the 2^n ways to swap questions' predictions between a and b."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MetricWarning)
        observed = float(metric(a, targets)) - float(metric(b, targets))
        null = []
        for swaps in itertools.product((False, True), repeat=len(a)):
            x = [bi if swap else ai for ai, bi, swap in zip(a, b, swaps, strict=True)]
            y = [ai if swap else bi for ai, bi, swap in zip(a, b, swaps, strict=True)]
            delta = float(metric(x, targets)) - float(metric(y, targets))
            null.append(observed if math.isnan(delta) else delta)
    null_array = np.array(null)
    tie = 1e-12 * abs(observed)
    return min(1.0, 2 * min(np.sum(null_array <= observed + tie), np.sum(null_array >= observed - tie)) / len(null))


@pytest.mark.parametrize("name", METRIC_NAMES)
def test_paired_bootstrap_matches_a_per_resample_loop(name: str) -> None:
    a, b, targets = ragged_pair(0, 9)  # small enough that some resamples have one class (AUROC NaN, dropped)
    got = paired_bootstrap(METRICS[name], a, b, targets, n_resamples=600, seed=3)
    resampled = brute_force(METRICS[name], a, b, targets, 600, 3)
    assert got[:3] == pytest.approx(resampled[:3], abs=1e-12)
    per_question = np.array([float(METRICS[name]([a[i]], targets[[i]])) - float(METRICS[name]([b[i]], targets[[i]]))
                             for i in range(len(a))])
    # one rule at every n: the exact sign test (ACC); the betting test within the metric's bound (NLL: −log ε, BS:
    # 2); the larger of the swap test (here every one of the 2^9 ≤ 600 patterns) and the bootstrap p (AUC, ECE)
    if name == "ACC":
        expected = sign_test_p(per_question)
    elif name in ("NLL", "BS"):
        expected = bounded_mean_p(per_question, nll_bound() if name == "NLL" else 2.0)
    else:
        expected = max(resampled.p, swap_brute_force(METRICS[name], a, b, targets))
    assert got.p == pytest.approx(expected, abs=1e-12)
    expected_summary = valid_only(name, got, len(a))  # ΔECE: no interval or p (the registry's `interval_from`)
    assert paired_summary(a, b, targets, n_resamples=600, seed=3)[name] == pytest.approx(expected_summary, abs=1e-12,
                                                                                        nan_ok=True)


def test_paired_mean_bootstrap_matches_a_per_resample_loop() -> None:
    rng = np.random.default_rng(1)
    x, y = rng.normal(0.3, 1.0, 15), rng.normal(0.0, 1.0, 15)
    got = paired_mean_bootstrap(x, y, bound=10.0, n_resamples=200, seed=5)
    index = resample_indices(15, 200, np.random.default_rng(5))
    means = np.array([np.mean(x[rows] - y[rows]) for rows in index])
    expected = (np.mean(x - y), *np.percentile(means, [2.5, 97.5]))
    assert got[:3] == pytest.approx(expected, abs=1e-12)
    assert got.p == bounded_mean_p(x - y, 10.0)
    assert math.isnan(paired_mean_bootstrap(x, y, n_resamples=20).p)  # no bound, no valid test of a mean


def betting_by_hand(diff: np.ndarray, bound: float) -> float:
    """`bounded_mean_p` one question at a time: the plug-in bet from the earlier questions, both sides' capital."""
    up, down, best, mean, spread = 1.0, 1.0, 1.0, 0.0, 0.25
    for i, d in enumerate(diff / bound, start=1):
        bet = min(0.9, math.sqrt(2 * math.log(2 / 0.05) / (spread * i * math.log(1 + i))))
        up, down = up * (1 + bet * d), down * (1 - bet * d)
        best = max(best, (up + down) / 2)
        spread = (spread * i + (d - mean) ** 2) / (i + 1)  # (¼ + Σ_j (x_j − x̄_{j−1})²) / (i + 1)
        mean = (mean * i + d) / (i + 1)
    return min(1.0, 1 / best)


def test_the_paired_p_values_by_hand() -> None:
    """The betting p against a loop; two questions with Δ = 2 and 3: the bootstrap said p ≈ 0.002 (issue 27), the
    betting test within a bound of 4 has no evidence yet, while 30 differences near the bound have. The sign test
    counts the discordant questions: 8 of 9 one way gives 2 · 10/512."""
    rng = np.random.default_rng(7)
    for diff, bound in ((rng.normal(0.2, 0.5, 40), 3.0), (rng.uniform(-1, 1, 25), 1.0), (np.full(30, 0.8), 1.0)):
        assert bounded_mean_p(diff, bound) == pytest.approx(betting_by_hand(diff, bound), rel=1e-12)
    assert paired_mean_bootstrap([3.0, 4.0], [1.0, 1.0], bound=4.0).p > 0.5
    assert bounded_mean_p(np.full(30, 0.8), 1.0) < 1e-6 and bounded_mean_p(np.array([0.9]), 1.0) == 1.0
    assert sign_test_p(np.array([1.0] * 8 + [-1.0] + [0.0] * 5)) == pytest.approx(2 * 10 / 512)
    assert sign_test_p(np.zeros(4)) == 1.0
    # a (hand-scored in test_report): ACC 3/4, AUC 2/3, ECE 0.4, NLL 0.5473141, BS 0.37. b = uniform: predicts
    # option 0, right on q0 and q3 → ACC 1/2; every confidence 0.5 ties → AUC 1/2; one bin with conf = acc = 0.5
    # → ECE 0; NLL = log 2 = 0.6931472; BS = 0.5.
    a = [[0.8, 0.2], [0.6, 0.4], [0.3, 0.7], [0.5, 0.5]]
    b = [[0.5, 0.5]] * 4
    deltas = paired_summary(a, b, [0, 1, 1, 0], n_resamples=50)
    expected = {"ACC": 0.25, "AUC": 2 / 3 - 0.5, "ECE": 0.4, "NLL": 0.5473141 - 0.6931472, "BS": 0.37 - 0.5}
    assert {name: d.delta for name, d in deltas.items()} == pytest.approx(expected, abs=1e-7)
    # One item: every resample is that item, Δ* ≡ 2 > 0, so the interval is [2, 2]; no test has evidence (p = 1).
    assert paired_mean_bootstrap([3.0], [1.0], bound=3.0, n_resamples=9) == (2.0, 2.0, 2.0, 1.0)
    # Δ* = −1, 1, 2, 3, 5, 6, 7, 8, 9 (and a NaN, dropped): 50% interval = the 25th and 75th percentiles [2, 7];
    # one Δ* ≤ 0, so p = 2 (1 + 1) / (9 + 1).
    resampled = np.array([1, 2, 3, -1, 5, np.nan, 6, 7, 8, 9], dtype=float)
    assert _paired_delta(4.0, resampled, level=0.5) == pytest.approx((4.0, 2.0, 7.0, 0.4))


@pytest.mark.parametrize("null", ["two-point", "rare", "lognormal"])
def test_paired_p_holds_its_level_on_bounded_equal_mean_nulls(null: str) -> None:
    """NLL differences (bound −log 10⁻⁶ = 13.8) with mean 0 on which the former rule, the larger of a sign flip and a
    studentized bootstrap p, rejected 32%, 81% and 8.8% of these samples of 10 (bench/paired.py draws them)."""
    draw = paired_bench.MEAN_NULLS[null]
    rng = np.random.default_rng(0)
    rejected = [paired_mean_bootstrap(draw(rng, 10), np.zeros(10), bound=nll_bound()).p <= 0.05 for _ in range(400)]
    assert np.mean(rejected) <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / 400), np.mean(rejected)


def test_nll_p_holds_its_level_for_a_near_certain_method_against_a_hedging_one() -> None:
    """Right with θ = 0.95 on 90% of questions and θ ≈ 0.0015 on the rest, against θ ≈ 0.5 everywhere, with equal
    expected NLL: the former rule rejected 36% of these samples of 10; the paired tables' NLL p holds 5%."""
    rng = np.random.default_rng(1)
    rejected = [paired_bootstrap(nll, *paired_bench.near_certain_hedging(rng, 10)).p <= 0.05 for _ in range(300)]
    assert np.mean(rejected) <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / 300), np.mean(rejected)


def test_a_bounded_difference_is_found_where_the_bound_leaves_power() -> None:
    """Brier differences N(0.1, 0.3) (bound 2): found in most samples of 200 questions, rarely in 30."""
    rng = np.random.default_rng(2)
    power = {n: np.mean([bounded_mean_p(np.clip(rng.normal(0.1, 0.3, n), -2, 2), 2.0) <= 0.05 for _ in range(100)])
             for n in (30, 200)}
    assert power[200] >= 0.8 and power[30] <= 0.1, power


def test_a_method_against_itself_has_no_difference() -> None:
    a, _, targets = ragged_pair(2, 20)
    for name, delta in paired_summary(a, a, targets, n_resamples=200).items():
        if name == "ECE":  # no interval or p (the registry's `interval_from`)
            assert delta.delta == 0.0 and all(math.isnan(v) for v in delta[1:])
            continue
        assert delta == (0.0, 0.0, 0.0, 1.0)
    assert paired_mean_bootstrap([0.1, 0.5, 0.2], [0.1, 0.5, 0.2], bound=2.0) == (0.0, 0.0, 0.0, 1.0)


def test_a_clearly_better_method_has_a_small_p() -> None:
    rng = np.random.default_rng(4)
    n = 80
    targets = np.zeros(n, dtype=np.int64)
    # a: right and confident on 60 questions, wrong and unsure on 20 (AUC 1, ECE ≈ 0.17); b: a coin flip for
    # correctness with a high confidence unrelated to it (AUC ≈ 1/2, ECE ≈ 0.4).
    a = np.where(np.arange(n)[:, None] < 60, [0.95, 0.05], [0.45, 0.55])
    conf = rng.uniform(0.8, 1.0, n)
    right = rng.random(n) < 0.5
    b = np.where(right[:, None], np.stack([conf, 1 - conf], 1), np.stack([1 - conf, conf], 1))
    deltas = paired_summary(a, b, targets, n_resamples=500)
    assert deltas["ECE"].delta < 0 and math.isnan(deltas.pop("ECE").p)  # ΔECE: no interval or p
    for name, delta in deltas.items():
        assert delta.p < 0.01, name
        higher_is_better = name in ("ACC", "AUC")
        assert (delta.low > 0) if higher_is_better else (delta.high < 0), name
    assert paired_mean_bootstrap(rng.normal(1.0, 0.1, 30), rng.normal(0.0, 0.1, 30), bound=2.0).p < 1e-3


def test_paired_inputs_must_match() -> None:
    with pytest.raises(ValueError, match="shape mismatch"):
        paired_bootstrap(accuracy, [[1.0, 0.0]] * 3, [[1.0, 0.0]] * 2, [0, 0, 0])
    with pytest.raises(ValueError, match="one length"):
        paired_mean_bootstrap([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="NaN"):
        paired_mean_bootstrap([1.0, np.nan], [1.0, 2.0])
    with pytest.raises(ValueError, match="reach 2.5 .*beyond the bound 2"):
        paired_mean_bootstrap([3.0, 0.0], [0.5, 0.0], bound=2.0)


def test_comparisons_are_against_ppr_and_am_ppr_against_ppr_seed5() -> None:
    names = ["am-ppr-seed5", "direct", "ppr-seed5", "ppr", "am-ppr", "ppr-seed1"]
    pairs = [(m.name, b.name) for m, b in comparisons(names)]
    assert pairs == [("ppr-seed1", "ppr"), ("ppr-seed5", "ppr"), ("am-ppr", "ppr"), ("am-ppr-seed5", "ppr"),
                     ("direct", "ppr"), ("am-ppr", "ppr-seed5"), ("am-ppr-seed5", "ppr-seed5")]
    assert [(m.name, b.name) for m, b in comparisons(["am-ppr", "ppr-seed5"])] == [("am-ppr", "ppr-seed5")]
    assert comparisons(["direct", "ppr-seed1"]) == [] and comparisons([]) == []


def row(qid: str, method: str, position: int, probs: list[float], off_format: bool = False) -> ResultRow:
    return ResultRow(qid, method, position, 0, 2, np.array(probs), np.full((2, 3), 0.1 if off_format else 0.9))


def test_paired_scores_use_the_questions_both_methods_keep() -> None:
    rows = [row(f"q{i}", "ppr", i, [0.6, 0.4]) for i in range(5)]
    rows += [row(f"q{i}", "direct", i, [0.9, 0.1], off_format=i == 1) for i in range(5)]  # q1 excluded
    rows += [row(f"q{i}", "ppr-seed1", i, [0.5, 0.5], off_format=True) for i in range(5)]  # all excluded
    seeded, direct = paired_scores(rows, QualityControl(), n_resamples=20)  # table order
    assert (direct.method.name, direct.baseline.name, direct.n) == ("direct", "ppr", 4)
    assert direct.deltas["BS"].delta == pytest.approx(2 * 0.1**2 - 2 * 0.4**2)
    assert (seeded.method.name, seeded.n, seeded.deltas) == ("ppr-seed1", 0, {})


def test_emd_comparisons_pair_the_questions() -> None:
    records = {"ppr": [{"emd_bar_l1": v, "emd_bar_kl": 2 * v} for v in (0.3, 0.5, 0.4)],
               "am-ppr": [{"emd_bar_l1": v, "emd_bar_kl": 2 * v} for v in (0.1, 0.2, 0.3)]}
    (pair,) = emd_comparisons(records, ["l1", "kl"], n_resamples=50)
    assert (pair.method.name, pair.baseline.name, pair.n) == ("am-ppr", "ppr", 3)
    assert pair.deltas["EMD‾ (L1)"] == paired_mean_bootstrap([0.1, 0.2, 0.3], [0.3, 0.5, 0.4], bound=2.0,
                                                             n_resamples=50)
    assert pair.deltas["EMD‾ (KL)"].delta == pytest.approx(-0.4)
    lines = emd_markdown([pair]).splitlines()  # wider than 100 columns together: one table per distance
    assert lines[2] == "| Method | vs | n | Δ EMD‾ (L1) | p |" and lines[6] == "| Method | vs | n | Δ EMD‾ (KL) | p |"
    assert lines[4].startswith("| AM-PPR + NoSEED | PPR + NoSEED | 3 | -0.2000 [")
    assert max(len(line) for line in lines if line.startswith("|")) <= 100
    assert emd_markdown(emd_comparisons({"ppr": records["ppr"]}, ["l1"])) == ""


def test_delta_ece_is_printed_without_interval_or_p() -> None:
    # Two calibrated methods (true ECE 0 for both) whose confidences spread differently: the binned plug-in's bias
    # differs, so Δ ECE's paired p falls below 5% far more often than 5% of the time. `paired_summary` gives Δ ECE
    # no interval and no p (NaN), and the table marks it †, as Table 2 prints ECE; the other metrics keep theirs.
    rng = np.random.default_rng(0)
    n, rejected = 100, 0
    for seed in range(40):
        conf_a, conf_b = 0.25 + 0.75 * rng.beta(2, 2, n), 0.25 + 0.75 * rng.beta(5, 1, n)
        right_a, right_b = rng.random(n) < conf_a, rng.random(n) < conf_b
        a = np.column_stack([conf_a, (1 - conf_a) / 3, (1 - conf_a) / 3, (1 - conf_a) / 3])
        b = np.column_stack([conf_b, (1 - conf_b) / 3, (1 - conf_b) / 3, (1 - conf_b) / 3])
        b[right_b != right_a] = b[right_b != right_a][:, [1, 0, 2, 3]]  # b right exactly where right_b
        targets = np.where(right_a, 0, 1)
        rejected += paired_bootstrap(partial(ece, n_bins=15), a, b, targets, n_resamples=200, seed=seed).p < 0.05
    assert rejected / 40 > 0.15
    pair = PairedComparison(parse_method("am-ppr"), parse_method("ppr"), n,
                            paired_summary(a, b, targets, n_resamples=200))
    assert all(math.isnan(v) for v in pair.deltas["ECE"][1:])
    cells = [cell for line in metrics_markdown("X", [pair]).splitlines() if line.startswith("| AM-PPR")
             for cell in line.rstrip(" |").split(" | ")[3:]]  # Δ and p per metric, over the split tables
    ece_at, bs_at = 2 * METRIC_NAMES.index("ECE"), 2 * METRIC_NAMES.index("BS")
    assert cells[ece_at : ece_at + 2] == [f"{pair.deltas['ECE'].delta:.4f} †", "–"]
    assert "[" in cells[bs_at] and cells[bs_at + 1] == f"{pair.deltas['BS'].p:.3f}"


def test_evaluate_then_report_writes_the_paired_tables(tiny_model_dir: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture) -> None:
    preset = tmp_path / "preset.yaml"
    preset.write_text("methods: [direct, ppr, ppr-seed1]\nqc_path_mass: 0.0\n")
    out = tmp_path / "run"
    assert main(["evaluate", "--config", str(preset), "--model", str(tiny_model_dir), "--dataset", "demo",
                 "-n", "4", "-J", "2", "-N", "2", "--bootstrap", "20", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["report", str(out), "--bootstrap", "30", "--qc-path-mass", "0"]) == 0
    markdown = (out / "paired.md").read_text()
    assert markdown.strip() in capsys.readouterr().out
    lines = markdown.splitlines()
    assert lines[0].startswith("**Paired differences, Demo.**")
    heads = [line for line in lines if line.startswith("| Method |")]  # split to fit 100 columns, Δ beside its p
    assert heads[0].startswith("| Method | vs | n | Δ ACC ↑ | p | Δ AUC ↑ | p |")
    assert " | ".join(heads).count("| p |") == len(METRIC_NAMES) and "Δ BS ↓ | p |" in heads[-1]
    assert [line.split(" | ")[:3] for line in lines[4:6]] == [["| PPR + SEED_1", "PPR + NoSEED", "4"],
                                                              ["| Direct-Query", "PPR + NoSEED", "4"]]
    assert max(len(line) for line in lines if line.startswith("|")) <= 100
    rows = list(csv.DictReader((out / "paired.csv").read_text().splitlines()))
    assert [(r["method"], r["baseline"], r["metric"]) for r in rows] == [
        (m, "ppr", metric) for m in ("ppr-seed1", "direct") for metric in METRIC_NAMES]
    with RunStore.open(out / "run.sqlite", read_only=True) as store:
        by_method = {}
        for stored in store.rows():
            by_method.setdefault(stored.method, []).append(stored)
    expected = paired_summary([r.probs for r in by_method["direct"]], [r.probs for r in by_method["ppr"]],
                              [r.target for r in by_method["ppr"]], n_resamples=30)
    for stored_row in rows[5:]:
        got = [float(stored_row[k]) for k in ("delta", "low", "high", "p")]
        assert got == pytest.approx(list(expected[stored_row["metric"]]), nan_ok=True)


def test_emd_summary_ends_with_the_paired_table(tiny_model_dir: Path, history_template: str, tmp_path: Path) -> None:
    out = tmp_path / "emd"
    assert main(["emd", "--model", str(tiny_model_dir), "--template", history_template, "--dataset", "demo",
                 "--n", "2", "-J", "2", "-N", "2", "--methods", "ppr", "ppr-seed1", "--horizon", "2",
                 "--prefix-lengths", "0", "--burn-in", "0", "--lookahead", "2", "--distance", "l1",
                 "--noise-floor-replicates", "0",
                 "--out", str(out)]) == 0
    summary = (out / "summary.md").read_text()
    assert "**Paired Δ EMD‾.**" in summary
    assert summary.rstrip().splitlines()[-1].startswith("| PPR + SEED_1 | PPR + NoSEED | 2 | ")
    assert set(json.loads((out / "summary.json").read_text())) == {"ppr", "ppr-seed1"}
