"""Tests for beliefdrift.metrics.functional (paper Appendix "Evaluation Metrics", DESIGN §11)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import pytest
import torch
from scipy import stats
from sklearn.metrics import roc_auc_score

from beliefdrift.metrics.functional import (
    CE2_BINS,
    CE2_MIN_N,
    METRIC_NAMES,
    METRICS,
    Interval,
    MetricWarning,
    _accuracy_core,
    _auroc_core,
    _bin_index,
    _brier_core,
    _ece_core,
    _identity,
    _nll_core,
    _normalise,
    accuracy,
    auroc,
    bootstrap_ci,
    brier,
    ce2,
    ce2_squared,
    ece,
    nll,
    nll_clipped,
    reliability_bins,
    resample_indices,
    summarize,
)


def _random_problem(seed: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Probabilities with a spread of confidences; targets drawn from a tempered version of them."""
    rng = np.random.default_rng(seed)
    alpha = rng.choice([0.3, 1.0, 3.0], size=n)
    probs = np.stack([rng.dirichlet(np.full(k, a)) for a in alpha])
    sharp = probs**1.5 / np.sum(probs**1.5, axis=1, keepdims=True)
    targets = np.array([rng.choice(k, p=row) for row in sharp])
    return probs, targets


# ------------------------------------------------------------------------------------------------- ECE


@pytest.mark.parametrize("k", [4, 5])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_ece_matches_torchmetrics_on_random_inputs(seed: int, k: int) -> None:
    # torchmetrics bins with torch.bucketize(right=True) on float32 linspace edges, i.e. left-closed
    # bins [(b-1)/B, b/B) plus an extra bin holding exactly 1.0; we use ((b-1)/B, b/B] with 1.0 in
    # the last bin.  The conventions agree whenever no confidence lies on (or within float32 noise of)
    # an edge and none equals 1.0, which holds for these continuous inputs (checked below).  The edge
    # cases are tested by hand further down.
    from torchmetrics.functional.classification import multiclass_calibration_error

    probs, targets = _random_problem(seed, n=600, k=k)
    conf = probs.max(axis=1)
    assert np.all(conf < 1.0)
    scaled = conf * 15
    assert np.min(np.abs(scaled - np.round(scaled))) > 1e-4, "a confidence sits near a bin edge"

    expected = multiclass_calibration_error(
        torch.tensor(probs, dtype=torch.float64),
        torch.tensor(targets),
        num_classes=k,
        n_bins=15,
        norm="l1",
    ).item()
    got = ece(probs, targets, n_bins=15)
    assert expected > 0.01  # a non-trivial value, so agreement means something
    assert got == pytest.approx(expected, abs=1e-6)


def test_ece_default_uses_15_bins() -> None:
    probs, targets = _random_problem(7, n=300, k=4)
    assert ece(probs, targets) == ece(probs, targets, n_bins=15)
    assert ece(probs, targets) != ece(probs, targets, n_bins=10)


def test_confidence_one_goes_to_last_bin() -> None:
    probs = np.array([[1.0, 0.0, 0.0], [0.95, 0.05, 0.0]])
    targets = np.array([1, 0])  # the confidence-1.0 prediction is wrong, the 0.95 one right
    bins = reliability_bins(probs, targets, n_bins=15)
    assert bins.count.tolist() == [0] * 14 + [2]
    # Both share the last bin (14/15, 1]: acc 0.5, conf 0.975 -> ECE 0.475.
    # (A separate bin for 1.0, as torchmetrics uses, would give 0.5*1 + 0.5*0.05 = 0.525.)
    assert ece(probs, targets, n_bins=15) == pytest.approx(0.475, abs=1e-12)


def test_confidence_on_edge_goes_to_lower_bin() -> None:
    # 0.4 = 6/15 is the upper edge of bin (5/15, 6/15] (0-based index 5), 0.6 = 9/15 of index 8.
    # One ulp above 0.4 is float noise on the edge (lower bin); 2e-9 above is past it.
    idx, edges = _bin_index(np.array([0.4, 0.6, 1 / 3, 2 / 3, np.nextafter(0.4, 1.0), 0.4 + 2e-9]), 15)
    assert idx.tolist() == [5, 8, 4, 9, 5, 6]
    assert edges[6] == 0.4 and edges[9] == 0.6
    # and with 10 bins, 0.3 is the top of (0.2, 0.3]
    assert _bin_index(np.array([0.3, 0.7]), 10)[0].tolist() == [2, 6]
    # edges are k/B by true division (np.linspace(0, 1, 8)[5] is one ulp below 5/7)
    assert _bin_index(np.array([5 / 7, 2 / 7]), 7)[0].tolist() == [4, 1]
    # Through the public API: 0.6 (correct) and 0.62 (wrong) fall into different bins.
    probs = np.array([[0.6, 0.4, 0.0], [0.62, 0.38, 0.0]])
    targets = np.array([0, 1])
    bins = reliability_bins(probs, targets, n_bins=15)
    assert bins.count[8] == 1 and bins.count[9] == 1
    # separate bins: 0.5*|1-0.6| + 0.5*|0-0.62| = 0.51  (one shared bin would give |0.5-0.61| = 0.11)
    assert ece(probs, targets, n_bins=15) == pytest.approx(0.51, abs=1e-12)


def test_edge_confidence_from_a_mean_over_paths_goes_to_the_lower_bin() -> None:
    # q* is a mean of per-path answer frequencies: 0.1 + 0.2 + 0.3 is 9/15 in exact arithmetic but one ulp above
    # 0.6 in float64 (another summation order gives 0.6 exactly); the paper's bin ((b−1)/B, b/B] must not depend on
    # that rounding, so both land in (8/15, 9/15], as do values a few ulps below an edge.
    fractions = np.array([0.1, 0.2, 0.3])
    on_edge = [fractions.sum(), fractions[::-1].sum(), np.nextafter(0.4, 0.0)]
    assert on_edge[0] > 0.6 == on_edge[1]
    assert _bin_index(np.array(on_edge), 15)[0].tolist() == [8, 8, 5]
    # beside a wrong 0.58 in the same bin: ECE = |0.5 − 0.59| = 0.09 whichever way q* was summed (not 0.49)
    for c in on_edge[:2]:
        probs = np.array([[c, 1.0 - c], [0.58, 0.42]])
        assert reliability_bins(probs, np.array([0, 1]), n_bins=15).count[8] == 2
        assert ece(probs, np.array([0, 1])) == pytest.approx(0.09, abs=1e-12)


def test_confidence_a_hair_above_one_goes_to_last_bin() -> None:
    # rows may sum to 1 within SUM_TOLERANCE, so the confidence can exceed 1 slightly
    probs = np.array([[1.0 + 5e-5, 0.0], [0.5, 0.5]])
    bins = reliability_bins(probs, np.array([0, 0]), n_bins=15)
    assert bins.count.shape == (15,) and bins.count[-1] == 1


def test_confidence_zero_goes_to_first_bin() -> None:
    # Unreachable from a probability vector (max >= 1/K), but the binning rule covers it.
    assert _bin_index(np.array([0.0, 1e-12, 1.0]), 15)[0].tolist() == [0, 0, 14]


def test_ece_hand_computed_with_empty_bins() -> None:
    # 5 bins: (0,.2] (.2,.4] (.4,.6] (.6,.8] (.8,1]
    probs = np.array([[0.9, 0.1], [0.3, 0.7], [0.8, 0.2], [0.55, 0.45]])
    targets = np.array([0, 0, 0, 0])
    # conf .9 correct -> bin 4; conf .7 (pred 1) wrong -> bin 3; .8 correct -> bin 3; .55 correct -> bin 2
    bins = reliability_bins(probs, targets, n_bins=5)
    assert bins.count.tolist() == [0, 0, 1, 2, 1]
    assert np.isnan(bins.confidence[:2]).all() and np.isnan(bins.accuracy[:2]).all()
    np.testing.assert_allclose(bins.confidence[2:], [0.55, 0.75, 0.9])
    np.testing.assert_allclose(bins.accuracy[2:], [1.0, 0.5, 1.0])
    np.testing.assert_allclose(bins.edges, [0, 0.2, 0.4, 0.6, 0.8, 1.0])
    assert bins.n == 4 and bins.n_bins == 5
    expected = 0.25 * 0.45 + 0.5 * 0.25 + 0.25 * 0.1  # = 0.2625
    assert ece(probs, targets, n_bins=5) == pytest.approx(expected, abs=1e-12)


def test_ece_perfectly_calibrated_is_zero() -> None:
    # conf 0.75 in one bin, 3 of 4 correct.
    probs = np.tile([0.75, 0.25], (4, 1))
    targets = np.array([0, 0, 0, 1])
    assert ece(probs, targets) == pytest.approx(0.0, abs=1e-12)


def test_reliability_bins_rejects_bad_n_bins() -> None:
    probs, targets = _random_problem(0, 10, 3)
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="n_bins"):
            reliability_bins(probs, targets, n_bins=bad)


# ----------------------------------------------------------------------------------------------- AUROC


def _brute_auroc(scores: np.ndarray, labels: np.ndarray) -> float:
    pos, neg = scores[labels], scores[~labels]
    greater = (pos[:, None] > neg[None, :]).sum()
    equal = (pos[:, None] == neg[None, :]).sum()
    return float((greater + 0.5 * equal) / (pos.size * neg.size))


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_auroc_matches_pairwise_count_with_ties(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, k = 200, 3
    conf = rng.choice([0.4, 0.5, 0.6, 0.7, 0.9], size=n)  # few distinct scores -> many ties
    probs = np.empty((n, k))
    for i, c in enumerate(conf):
        row = np.array([c, (1 - c) / 2, (1 - c) / 2])
        probs[i] = row[rng.permutation(k)]
    targets = rng.integers(0, k, size=n)
    labels = probs.argmax(axis=1) == targets
    assert 0 < labels.sum() < n
    assert len(np.unique(probs.max(axis=1))) == 5
    assert auroc(probs, targets) == pytest.approx(_brute_auroc(probs.max(axis=1), labels), abs=1e-12)


def test_auroc_all_ties_is_one_half() -> None:
    probs = np.tile([0.6, 0.4], (4, 1))
    targets = np.array([0, 1, 0, 1])
    assert auroc(probs, targets) == pytest.approx(0.5)


def test_auroc_ties_survive_float_noise() -> None:
    # Two q* of exactly 0.6, one summed as 0.1 + 0.2 + 0.3 (one ulp above): a tie, AUROC ½ (not 1), as in the
    # bootstrap's vectorised core; 2e-9 apart they are distinct scores.
    for above, expected in ((np.array([0.1, 0.2, 0.3]).sum(), 0.5), (0.6 + 2e-9, 1.0)):
        probs = np.array([[above, 1.0 - above], [0.6, 0.4]])
        assert auroc(probs, np.array([0, 1])) == expected
    probs = np.array([[0.1 + 0.2 + 0.3, 0.4], [0.6, 0.4], [0.9, 0.1], [0.7, 0.3]])
    assert _auroc_core(_normalise(probs, np.array([0, 1, 0, 1])), _identity(4))[0] == 0.625


@pytest.mark.parametrize("targets", [[0, 0, 1], [1, 1, 0]], ids=["all-correct", "all-wrong"])
def test_auroc_one_class_is_nan_with_warning(targets: list[int]) -> None:
    probs = np.array([[0.9, 0.1], [0.6, 0.4], [0.3, 0.7]])
    with pytest.warns(MetricWarning, match="only one class") as record:
        value = auroc(probs, np.array(targets))
    assert math.isnan(value)
    assert record[0].filename == __file__  # attributed to the caller's line, not to metrics.py


# ------------------------------------------------------------------------------ NLL, Brier, accuracy


def test_nll_zero_probability_on_true_label_is_clipped() -> None:
    probs, targets = np.array([[0.0, 1.0]]), np.array([0])
    assert type(nll(probs, targets)) is float
    assert nll_clipped(probs, targets) == 1
    assert nll(probs, targets) == pytest.approx(-math.log(1e-6))

    probs, targets = np.array([[0.0, 1.0], [0.5, 0.5], [0.2, 0.8]]), np.array([0, 0, 1])
    assert nll_clipped(probs, targets, eps=1e-3) == 1
    assert nll(probs, targets, eps=1e-3) == pytest.approx((-math.log(1e-3) - math.log(0.5) - math.log(0.8)) / 3)


def test_nll_probability_equal_to_eps_is_not_clipped() -> None:
    probs, targets = np.array([[0.25, 0.75]]), np.array([0])
    assert nll_clipped(probs, targets, eps=0.25) == 0
    assert nll(probs, targets, eps=0.25) == pytest.approx(-math.log(0.25))


def test_nll_without_clipping() -> None:
    probs, targets = np.array([[0.25, 0.75], [0.5, 0.5]]), np.array([1, 0])
    assert nll_clipped(probs, targets) == 0
    assert nll(probs, targets) == pytest.approx((-math.log(0.75) - math.log(0.5)) / 2)
    with pytest.raises(ValueError, match="eps"):
        nll(np.array([[0.5, 0.5]]), np.array([0]), eps=0.0)
    with pytest.raises(ValueError, match="eps"):
        nll_clipped(np.array([[0.5, 0.5]]), np.array([0]), eps=0.0)


def test_every_metric_returns_a_float() -> None:
    """One documented type: a Python float from every metric of METRICS (and CE₂), whatever the input."""
    probs, targets = _random_problem(3, n=20, k=4)
    for fn in (*(spec.function for spec in METRICS.values()), ce2, ce2_squared):
        assert type(fn(probs, targets)) is float, fn.__name__
        assert type(fn(list(probs), list(targets))) is float, fn.__name__


def test_metric_options_are_keyword_only() -> None:
    probs, targets = _random_problem(4, n=20, k=4)
    with pytest.raises(TypeError, match="positional"):
        ece(probs, targets, 10)
    with pytest.raises(TypeError, match="positional"):
        bootstrap_ci(brier, probs, targets, 50, 0.9, 1)


def test_nll_of_certain_right_answers_is_plus_zero() -> None:
    # -0.0 would print as "-0.0000" in the report tables
    probs, targets = np.eye(3)[[0, 2, 1, 1]], np.array([0, 2, 1, 1])
    interval = bootstrap_ci(nll, probs, targets, n_resamples=20)
    assert all(value == 0.0 and math.copysign(1.0, value) == 1.0 for value in (nll(probs, targets), *interval))


def test_brier_hand_computed() -> None:
    probs = np.array([[0.7, 0.2, 0.1], [0.5, 0.5, 0.0]])
    targets = np.array([0, 1])
    # (0.09 + 0.04 + 0.01) = 0.14 and (0.25 + 0.25 + 0) = 0.5 -> mean 0.32
    assert brier(probs, targets) == pytest.approx(0.32, abs=1e-12)
    # perfect one-hot prediction scores 0, confidently wrong scores 2
    assert brier(np.array([[0.0, 1.0]]), np.array([1])) == 0.0
    assert brier(np.array([[0.0, 1.0]]), np.array([0])) == pytest.approx(2.0)


def test_accuracy_ties_go_to_lowest_index() -> None:
    probs = [
        [0.5, 0.5],  # predicts 0
        [0.5, 0.5],  # predicts 0
        [0.2, 0.4, 0.4],  # predicts 1
        [0.2, 0.4, 0.4],  # predicts 1
        [0.25, 0.25, 0.25, 0.25],  # predicts 0
    ]
    targets = np.array([0, 1, 1, 2, 3])
    assert accuracy(probs, targets) == pytest.approx(2 / 5)
    assert accuracy(np.array([[0.5, 0.5]] * 2), np.array([0, 1])) == 0.5
    # a tie broken only by float noise (q* = 0.3, 0.3 with the second summed as 0.1 + 0.2) is still a tie
    noisy = np.array([[0.3, 0.1 + 0.2, 0.2, 0.2]])
    assert noisy[0, 1] > noisy[0, 0] and accuracy(noisy, np.array([0])) == 1.0


def test_ties_in_argmax_affect_ece_and_auroc_consistently() -> None:
    # The tie rule defines correctness for every metric, not only accuracy.
    probs = np.array([[0.5, 0.5], [0.5, 0.5], [0.9, 0.1]])
    targets = np.array([1, 1, 0])  # the two tied rows predict 0 -> wrong
    bins = reliability_bins(probs, targets, n_bins=10)
    assert bins.accuracy[4] == 0.0 and bins.accuracy[8] == 1.0
    assert auroc(probs, targets) == 1.0


# ---------------------------------------------------------------------------------------------- ragged


def _ragged_problem(seed: int, n: int) -> tuple[list[np.ndarray], np.ndarray]:
    rng = np.random.default_rng(seed)
    ks = rng.integers(2, 7, size=n)
    rows = [rng.dirichlet(np.full(k, rng.choice([0.3, 1.0, 3.0]))) for k in ks]
    targets = np.array([rng.integers(0, k) for k in ks])
    return rows, targets


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ragged_matches_per_question_computation(seed: int) -> None:
    rows, targets = _ragged_problem(seed, n=150)
    assert len({r.size for r in rows}) > 1
    conf = np.array([r.max() for r in rows])
    correct = np.array([int(np.argmax(r)) == t for r, t in zip(rows, targets, strict=True)])

    # mean-type metrics: the mean of the same metric on each question alone
    per_q_acc = [accuracy([r], [t]) for r, t in zip(rows, targets, strict=True)]
    per_q_bs = [brier([r], [t]) for r, t in zip(rows, targets, strict=True)]
    per_q_nll = [nll([r], [t]) for r, t in zip(rows, targets, strict=True)]
    assert accuracy(rows, targets) == pytest.approx(np.mean(per_q_acc))
    assert brier(rows, targets) == pytest.approx(np.mean(per_q_bs))
    assert nll(rows, targets) == pytest.approx(np.mean(per_q_nll))
    # and from first principles
    assert brier(rows, targets) == pytest.approx(
        np.mean([np.sum((r - np.eye(r.size)[t]) ** 2) for r, t in zip(rows, targets, strict=True)])
    )

    # AUROC / ECE from the per-question (confidence, correctness) pairs
    assert auroc(rows, targets) == pytest.approx(_brute_auroc(conf, correct))
    b = np.clip(np.ceil(conf * 15).astype(int) - 1, 0, 14)
    manual_ece = sum(
        (b == j).sum() / len(rows) * abs(correct[b == j].mean() - conf[b == j].mean())
        for j in range(15)
        if (b == j).any()
    )
    assert ece(rows, targets) == pytest.approx(manual_ece)


def test_ragged_list_with_equal_lengths_equals_array() -> None:
    probs, targets = _random_problem(3, n=80, k=4)
    as_list = [row for row in probs]
    for fn in (accuracy, auroc, ece, brier):
        assert fn(as_list, targets.tolist()) == fn(probs, targets)
    assert nll(as_list, targets) == nll(probs, targets)


def test_ragged_target_out_of_range_for_its_row() -> None:
    with pytest.raises(ValueError, match=r"targets\[1\] = 2 .* 2 options"):
        accuracy([np.array([0.2, 0.3, 0.5]), np.array([0.5, 0.5])], [2, 2])


# ------------------------------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    ("probs", "targets", "match"),
    [
        (np.full((3, 2), 0.5), np.array([0, 1]), "shape mismatch"),
        (np.full((2, 2), 0.5), np.array([0, 2]), "out of range"),
        (np.full((2, 2), 0.5), np.array([0, -1]), "out of range"),
        (np.array([[0.5, 0.4], [0.5, 0.5]]), np.array([0, 1]), "sums to 0.9"),
        (np.array([[2.0, -1.0]]), np.array([0]), "negative"),
        (np.array([[np.nan, 1.0]]), np.array([0]), "NaN"),
        (np.array([[3.1, 0.2, -1.4]]), np.array([0]), "negative"),
        (np.array([[1.5, 2.0]]), np.array([0]), "sums to"),
        (np.full((2, 2, 2), 0.5), np.array([0, 1]), "2-D"),
        (np.full((2, 2), 0.5), np.array([0.0, 1.0]), "integer"),
        (np.full((2, 2), 0.5), np.array([[0, 1]]), "1-D"),
        (np.zeros((0, 3)), np.array([], dtype=int), "at least one"),
        ([np.array([0.5, 0.5]), np.array([])], np.array([0, 0]), "non-empty"),
        ("abc", np.array([0]), "2-D array"),
    ],
)
def test_invalid_inputs_raise(probs: object, targets: object, match: str) -> None:
    for fn in (accuracy, auroc, ece, brier, nll, reliability_bins):
        with pytest.raises(ValueError, match=match):
            fn(probs, targets)


def test_small_rounding_in_row_sums_is_accepted() -> None:
    probs = np.array([[0.6, 0.4 + 5e-5], [0.3, 0.7 - 5e-5]])
    assert accuracy(probs, np.array([0, 1])) == 1.0


# ------------------------------------------------------------------------------------------- bootstrap


def test_bootstrap_is_deterministic_in_seed() -> None:
    probs, targets = _random_problem(0, n=120, k=4)
    a = bootstrap_ci(brier, probs, targets, n_resamples=300, seed=11)
    b = bootstrap_ci(brier, probs, targets, n_resamples=300, seed=11)
    c = bootstrap_ci(brier, probs, targets, n_resamples=300, seed=12)
    assert isinstance(a, Interval)
    assert a == b
    assert a.point == c.point and (a.low, a.high) != (c.low, c.high)


@pytest.mark.parametrize("fn", [accuracy, auroc, ece, nll, brier], ids=lambda fn: fn.__name__)
def test_bootstrap_matches_scipy_percentile_bootstrap(fn: Callable[..., Any]) -> None:
    # scipy resamples the question indices with rng.integers(0, n, (B, n)) as bootstrap_ci does, so the same
    # seeded generator gives the same resamples and the percentile intervals agree up to rounding.
    probs, targets = _random_problem(5, n=50, k=3)

    def statistic(rows: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.apply_along_axis(lambda r: float(fn(probs[r], targets[r])), axis, rows)

    reference = stats.bootstrap((np.arange(50),), statistic, n_resamples=200, confidence_level=0.9,
                                method="percentile", rng=np.random.default_rng(3))
    point, low, high = bootstrap_ci(fn, probs, targets, n_resamples=200, level=0.9, seed=3)
    assert point == float(fn(probs, targets))
    assert (low, high) == pytest.approx(tuple(reference.confidence_interval), rel=0, abs=1e-12)


@pytest.mark.parametrize("name", ["ACC", "AUC", "NLL", "BS"])
def test_bootstrap_interval_contains_point(name: str) -> None:
    fn = {"ACC": accuracy, "AUC": auroc, "NLL": nll, "BS": brier}[name]
    for seed in range(3):
        probs, targets = _random_problem(seed, n=300, k=4)
        point, low, high = bootstrap_ci(fn, probs, targets, n_resamples=200, seed=seed)
        assert low < point < high


def test_bootstrap_width_shrinks_with_n() -> None:
    small_p, small_t = _random_problem(1, n=100, k=4)
    big_p, big_t = _random_problem(1, n=2500, k=4)
    for fn in (accuracy, brier, nll, lambda p, t: ece(p, t)):
        _, lo_s, hi_s = bootstrap_ci(fn, small_p, small_t, n_resamples=300)
        _, lo_b, hi_b = bootstrap_ci(fn, big_p, big_t, n_resamples=300)
        # width ~ 1/sqrt(N): expect about 5x narrower; demand at least 2.5x
        assert (hi_b - lo_b) < (hi_s - lo_s) / 2.5


def test_bootstrap_level_widens_interval() -> None:
    probs, targets = _random_problem(2, n=200, k=4)
    _, lo90, hi90 = bootstrap_ci(brier, probs, targets, n_resamples=500, level=0.9)
    _, lo99, hi99 = bootstrap_ci(brier, probs, targets, n_resamples=500, level=0.99)
    assert lo99 < lo90 and hi90 < hi99


def test_bootstrap_auroc_ignores_nan_resamples_quietly() -> None:
    # 6 questions, only one wrong: about a third of the resamples contain no wrong answer.
    probs = np.array([[0.9, 0.1], [0.8, 0.2], [0.7, 0.3], [0.6, 0.4], [0.95, 0.05], [0.55, 0.45]])
    targets = np.array([0, 0, 0, 0, 0, 1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no MetricWarning (nor numpy RuntimeWarning) may escape
        point, low, high = bootstrap_ci(auroc, probs, targets, n_resamples=500, seed=0)
    assert point == pytest.approx(1.0)
    assert math.isfinite(low) and math.isfinite(high)
    assert 0.0 <= low <= high <= 1.0


def test_bootstrap_all_nan_gives_nan_interval() -> None:
    probs = np.array([[0.9, 0.1], [0.8, 0.2]])
    targets = np.array([0, 0])  # all correct: AUROC undefined everywhere
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        point, low, high = bootstrap_ci(auroc, probs, targets, n_resamples=50)
    assert math.isnan(point) and math.isnan(low) and math.isnan(high)
    # one MetricWarning for the point estimate; no numpy "All-NaN slice" RuntimeWarning
    assert [w.category for w in record] == [MetricWarning]


def test_bootstrap_validates_arguments() -> None:
    probs, targets = _random_problem(0, n=10, k=3)
    with pytest.raises(ValueError, match="n_resamples"):
        bootstrap_ci(accuracy, probs, targets, n_resamples=0)
    with pytest.raises(ValueError, match="level"):
        bootstrap_ci(accuracy, probs, targets, level=95)
    with pytest.raises(ValueError, match="shape mismatch"):
        bootstrap_ci(accuracy, probs, targets[:-1])


def test_bootstrap_ragged_input() -> None:
    rows, targets = _ragged_problem(4, n=60)
    point, low, high = bootstrap_ci(brier, rows, targets, n_resamples=200)
    assert point == brier(rows, targets)
    assert low < point < high


# ------------------------------------------------------------------------------------------- summarize


def test_summarize_reports_every_metric_with_interval() -> None:
    probs, targets = _random_problem(9, n=150, k=5)
    probs[0] = np.eye(5)[(targets[0] + 1) % 5]  # zero probability on the true label -> clipped once
    out = summarize(probs, targets, n_resamples=200, seed=4)
    assert set(METRIC_NAMES) == {"ACC", "AUC", "ECE", "NLL", "BS"}
    assert set(out) == {*METRIC_NAMES, "CE2", "n", "nll_clipped", "level", "n_resamples"}
    assert out["CE2"].point == pytest.approx(ce2(probs, targets)) and out["CE2"].low <= out["CE2"].high
    assert out["n"] == 150 and out["nll_clipped"] == 1
    assert out["level"] == 0.95 and out["n_resamples"] == 200
    singles = {
        "ACC": accuracy(probs, targets),
        "AUC": auroc(probs, targets),
        "ECE": ece(probs, targets),
        "NLL": nll(probs, targets),
        "BS": brier(probs, targets),
    }
    for name in METRIC_NAMES:
        assert isinstance(out[name], Interval)
        assert out[name].point == pytest.approx(singles[name])
        assert out[name].low <= out[name].high or name == "ECE"
    assert math.isnan(out["ECE"].low) and math.isnan(out["ECE"].high)  # no valid interval at any n (the registry)
    assert out["BS"] == bootstrap_ci(brier, probs, targets, n_resamples=200, seed=4)
    assert out["NLL"] == bootstrap_ci(nll, probs, targets, n_resamples=200, seed=4)


def test_ce2_is_the_within_bin_u_statistic() -> None:
    """CE₂² = Σ_b (n_b/n) Σ_{i≠j ∈ b} d_i d_j / (n_b (n_b − 1)), d = t − c, from a double loop; and below
    CE2_MIN_N questions `summarize` gives it no interval."""
    probs, targets = _random_problem(11, n=80, k=4)
    confidence = probs.max(1)
    gap = (probs.argmax(1) == targets) - confidence
    bins = np.clip(np.ceil(confidence * CE2_BINS).astype(int) - 1, 0, CE2_BINS - 1)
    total = 0.0
    for b in range(CE2_BINS):
        d = gap[bins == b]
        if len(d) > 1:
            total += len(d) / len(gap) * sum(d[i] * d[j] for i in range(len(d)) for j in range(len(d)) if i != j) \
                / (len(d) * (len(d) - 1))
    assert ce2_squared(probs, targets) == pytest.approx(total, rel=1e-9, abs=1e-12)
    assert ce2(probs, targets) == pytest.approx(math.sqrt(max(0.0, total)), rel=1e-9, abs=1e-12)
    small = summarize(probs[: CE2_MIN_N - 1], targets[: CE2_MIN_N - 1], n_resamples=20)["CE2"]
    assert math.isnan(small.low) and math.isnan(small.high)


def test_ce2_is_unbiased_where_ece_is_not() -> None:
    """Calibrated data (t ~ Bernoulli(c)): the squared CE₂ averages 0 over datasets of 30; the binned ECE does not."""
    rng = np.random.default_rng(0)
    squares, eces = [], []
    for _ in range(300):
        c = 0.25 + 0.75 * rng.random(30)
        probs = np.column_stack([c, *([(1 - c) / 3] * 3)])
        targets = np.where(rng.random(30) < c, 0, 1)
        squares.append(ce2_squared(probs, targets))
        eces.append(ece(probs, targets))
    assert np.mean(eces) > 0.1  # the plug-in's bias at n = 30
    assert abs(np.mean(squares)) < 3 * np.std(squares) / np.sqrt(len(squares))


def test_summarize_passes_options_through() -> None:
    probs, targets = _random_problem(10, n=100, k=4)
    out = summarize(probs, targets, n_bins=5, eps=0.2, n_resamples=50)
    assert out["ECE"].point == pytest.approx(ece(probs, targets, n_bins=5))
    assert out["NLL"].point == pytest.approx(nll(probs, targets, eps=0.2))
    assert out["nll_clipped"] == nll_clipped(probs, targets, eps=0.2) > 0


def test_summarize_one_class_warns_once_and_reports_nan_auc() -> None:
    probs = np.array([[0.9, 0.1], [0.7, 0.3], [0.2, 0.8]])
    targets = np.array([0, 0, 1])
    with pytest.warns(MetricWarning) as record:
        out = summarize(probs, targets, n_resamples=30)
    assert len([w for w in record if issubclass(w.category, MetricWarning)]) == 1
    assert math.isnan(out["AUC"].point)
    assert out["ACC"].point == 1.0


# ------------------------------------------------------------------------------ vectorised bootstrap


def _rows_with_confidence(conf: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Rows [c, (1−c)/(k−1), …] with the maximum c at a random position (c > 1/k)."""
    rows = np.tile((1 - conf[:, None]) / (k - 1), (1, k))
    rows[np.arange(conf.size), rng.integers(0, k, conf.size)] = conf
    return rows


def _catalogue() -> dict[str, tuple[object, np.ndarray]]:
    """Inputs whose resamples hit the hard cases: tied scores, confidences on bin edges and equal to 1,
    argmax ties, ragged rows, and resamples with one class."""
    rng = np.random.default_rng(123)
    ties = _rows_with_confidence(rng.choice([0.4, 0.5, 0.6, 0.7, 0.9], size=60), 3, rng)
    edges = _rows_with_confidence(rng.integers(6, 16, size=60) / 15, 3, rng)  # j/15, 1.0 included
    one_hot = np.eye(3)[rng.integers(0, 3, size=30)]
    uniform = np.vstack([np.full((20, 4), 0.25), _random_problem(5, 20, 4)[0]])
    nearly_right, _ = _random_problem(6, 8, 3)
    return {
        "continuous": _random_problem(0, 50, 4),
        "ties": (ties, rng.integers(0, 3, size=60)),
        "bin edges": (edges, rng.integers(0, 3, size=60)),
        "confidence one": (np.vstack([one_hot, edges[:30]]), rng.integers(0, 3, size=60)),
        "argmax ties": (uniform, rng.integers(0, 4, size=40)),
        "ragged": _ragged_problem(7, 40),
        "one wrong in eight": (nearly_right, np.r_[(nearly_right[0].argmax() + 1) % 3, nearly_right[1:].argmax(1)]),
    }


CATALOGUE = _catalogue()


def _resamples(n: int, seed: int = 0) -> np.ndarray:
    return resample_indices(n, 300, np.random.default_rng(seed))


def test_catalogue_covers_the_hard_cases() -> None:
    conf = {name: _normalise(*problem).confidences for name, problem in CATALOGUE.items()}
    assert len(np.unique(conf["ties"])) == 5
    assert np.isin(np.arange(6, 15) / 15, conf["bin edges"]).all() and (conf["bin edges"] == 1.0).any()
    assert (conf["confidence one"] == 1.0).sum() >= 30
    batch = _normalise(*CATALOGUE["one wrong in eight"])
    assert batch.correct.sum() == 7


@pytest.mark.parametrize("name", list(CATALOGUE))
def test_vectorised_auroc_matches_sklearn_per_resample(name: str) -> None:
    batch = _normalise(*CATALOGUE[name])
    index = _resamples(batch.n)
    got = _auroc_core(batch, index)
    assert got.shape == (index.shape[0],)
    single_class = 0
    for value, rows in zip(got, index, strict=True):
        labels = batch.correct[rows]
        if labels.all() or not labels.any():
            assert math.isnan(value)
            single_class += 1
        else:
            assert value == pytest.approx(roc_auc_score(labels, batch.confidences[rows]), abs=1e-12)
    if name == "one wrong in eight":
        assert 0 < single_class < index.shape[0]  # (7/8)^8 ≈ 34% of resamples miss the wrong answer


def _reference_ece(conf: np.ndarray, correct: np.ndarray, n_bins: int) -> float:
    """ECE with each bin's members found by comparing with the edges k/B one bin at a time."""
    total = 0.0
    for b in range(n_bins):
        low, high = b / n_bins, (b + 1) / n_bins
        members = ((conf > low) | (b == 0)) & ((conf <= high) | (b == n_bins - 1))
        if members.any():
            total += members.sum() / conf.size * abs(correct[members].mean() - conf[members].mean())
    return total


@pytest.mark.parametrize("n_bins", [5, 10, 15])
@pytest.mark.parametrize("name", list(CATALOGUE))
def test_vectorised_ece_matches_scalar_per_resample(name: str, n_bins: int) -> None:
    probs, targets = CATALOGUE[name]
    batch = _normalise(probs, targets)
    index = _resamples(batch.n, seed=n_bins)
    got = _ece_core(batch, index, n_bins)
    for value, rows in zip(got, index, strict=True):
        assert value == pytest.approx(ece(batch.probs[rows], batch.targets[rows], n_bins=n_bins), abs=1e-12)
        assert value == pytest.approx(_reference_ece(batch.confidences[rows], batch.correct[rows], n_bins), abs=1e-12)


@pytest.mark.parametrize("name", list(CATALOGUE))
def test_vectorised_means_match_scalar_per_resample(name: str) -> None:
    batch = _normalise(*CATALOGUE[name])
    index = _resamples(batch.n)
    cores = ((_accuracy_core, accuracy), (_brier_core, brier), (partial(_nll_core, eps=0.2), partial(nll, eps=0.2)))
    for core, scalar in cores:
        expected = [float(scalar(batch.probs[rows], batch.targets[rows])) for rows in index]
        np.testing.assert_allclose(core(batch, index), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", list(CATALOGUE))
def test_bootstrap_vectorised_equals_per_resample_loop(name: str) -> None:
    # A lambda is not one of the module's metrics, so bootstrap_ci scores it one resample at a time.
    probs, targets = CATALOGUE[name]
    metrics = (accuracy, auroc, brier, nll, ece, partial(ece, n_bins=10), partial(nll, eps=0.2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MetricWarning)
        for fn in metrics:
            for level in (0.95, 0.5):
                fast = bootstrap_ci(fn, probs, targets, n_resamples=200, level=level, seed=3)
                slow = bootstrap_ci(lambda p, t, fn=fn: fn(p, t), probs, targets, n_resamples=200, level=level, seed=3)
                np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-12)


def test_resample_indices_draws_as_numpy_does() -> None:
    index = resample_indices(7, 50, np.random.default_rng(4))
    assert index.shape == (50, 7)
    np.testing.assert_array_equal(index, np.random.default_rng(4).integers(0, 7, size=(50, 7)))


def test_the_metrics_package_offers_every_public_name_of_its_modules() -> None:
    import beliefdrift.metrics as package
    from beliefdrift.metrics import functional, stats

    assert set(package.__all__) == {*functional.__all__, "mean_std"}
    defined = {name for name, value in vars(functional).items() if not name.startswith("_")
               and callable(value) and getattr(value, "__module__", None) == functional.__name__}
    assert defined <= set(functional.__all__)  # e.g. metrics.sign_flip_p, which docs/statistics.md names
    assert package.accuracy is functional.accuracy and package.mean_std is stats.mean_std



def test_the_predicted_counts_break_ties_as_the_metrics_do():
    """`metrics.csv`'s predicted counts use the metrics' argmax: float noise of q* does not split a tie."""
    from beliefdrift.engine.methods import parse_method
    from beliefdrift.runs.scoring import MethodScore

    noisy = np.array([0.3, 0.1 + 0.2, 0.2, 0.2])  # option B holds 0.30000000000000004: a tie with A
    assert np.argmax(noisy) == 1 and accuracy([noisy], [0]) == 1.0
    score = MethodScore(parse_method("ppr"), None, None, total=2, excluded=0, probs=[noisy, np.array([0.1, 0.9])])
    assert score.predicted == "A:1 B:1"
