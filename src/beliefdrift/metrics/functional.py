"""Evaluation metrics for multiple-choice predictions (paper Appendix "Evaluation Metrics", DESIGN §11).

A functional core: numpy in, floats out.  Every metric (``accuracy``, ``auroc``, ``ece``, ``nll``, ``brier``,
``ce2``, ``ce2_squared``) returns a Python ``float``; an interval is an :class:`Interval` ``(point, low, high)`` of
floats, a paired comparison a :class:`PairedDelta`.  Every function takes

* ``probs``: the predicted distributions, either an array ``[N, K]`` whose rows are probability
  vectors over the K options, or a sequence of N one-dimensional arrays whose lengths may differ
  (questions with different numbers of options);
* ``targets``: integer array ``[N]``, the index of the correct option of each question.

Notation: ŷ_i = argmax_k p_i^(k) (ties go to the lowest index), c_i = max_k p_i^(k) (confidence),
t_i = 1{ŷ_i = y_i} (correctness).  Probabilities closer than ``TIE_TOLERANCE`` (1e-9) count as equal, in the
argmax, in AUROC's scores and at the calibration bin edges: q* is a mean of path frequencies, and float rounding
must not decide its ties.

Ragged input is handled by padding every row with zeros up to the largest K.  Zero-padding changes
none of the metrics: a padded option never wins the argmax (the real maximum of a probability vector
is > 0 and ties go to the lower index), never is a target, and adds (0 − 0)² = 0 to the Brier score.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from typing import Any, NamedTuple, TypeVar

import numpy as np
from scipy.stats import binomtest

__all__ = [
    "METRICS",
    "METRIC_NAMES",
    "MetricSpec",
    "NLL_EPS",
    "SUM_TOLERANCE",
    "Interval",
    "MetricWarning",
    "PairedDelta",
    "REPORT_METRICS",
    "ReliabilityBins",
    "accuracy",
    "auroc",
    "bootstrap_ci",
    "bounded_mean_p",
    "brier",
    "ce2",
    "ce2_squared",
    "ce2_interval",
    "ece",
    "interval_valid",
    "nll",
    "nll_bound",
    "nll_clipped",
    "paired_bootstrap",
    "paired_mean_bootstrap",
    "paired_summary",
    "predictions",
    "reliability_bins",
    "resample_indices",
    "sign_flip_p",
    "sign_test_p",
    "studentized_p",
    "summarize",
    "valid_only",
]

#: Equal-width confidence bins of the debiased calibration error CE₂ (fewer than ECE's 15: U_b needs n_b ≥ 2).
CE2_BINS = 10
#: Below this many questions `summarize` gives CE₂ without an interval: bench/calibration.py measured ≥ 95%
#: coverage from n = 20 up and 89.8% at n = 10 (docs/statistics.md).
CE2_MIN_N = 20

#: Sign patterns of `sign_flip_p`: all 2^n while 2^n ≤ this, else this many random ones.
SIGN_FLIPS = 9999

#: ε of NLL = mean −log max(p, ε): a true-label probability below it counts as ε (`nll_clipped` counts them).
NLL_EPS = 1e-6
#: A question's Brier score Σ_k (p_k − 1{k = y})² is at most 2 (all mass on a wrong option).
BRIER_BOUND = 2.0

#: `bounded_mean_p`: the largest share of its capital a bet stakes, and the level its plug-in bets are tuned for
#: (any value keeps the test valid; Waudby-Smith & Ramdas 2024 take ½ or ¾, and α).
BET_CAP = 0.9
BET_LEVEL = 0.05

#: A row of ``probs`` must sum to 1 within this absolute tolerance.
SUM_TOLERANCE = 1e-3
#: Confidences closer than this count as equal: a tied AUROC score, a confidence on a calibration bin edge (the
#: float noise of q*, a mean of path frequencies, is ~1e-15; no meaningful difference in confidence is this small).
TIE_TOLERANCE = 1e-9


def predictions(probs: np.ndarray) -> np.ndarray:
    """ŷ_i = the lowest k with p_i^(k) ≥ max_k p_i^(k) − `TIE_TOLERANCE` for probs [N, K]: ties, float noise
    included, go to the lowest index (np.argmax of a boolean row returns its first True)."""
    return np.argmax(probs >= np.max(probs, axis=1, keepdims=True) - TIE_TOLERANCE, axis=1)


class MetricWarning(UserWarning):
    """A metric is undefined on the given data (e.g. AUROC with only one class present)."""


# --------------------------------------------------------------------------------------------------
# input normalisation
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Batch:
    """Validated input: ``probs`` zero-padded to ``[N, K_max]``; ``targets`` and ``n_options`` ``[N]``."""

    probs: np.ndarray
    targets: np.ndarray
    n_options: np.ndarray

    @property
    def n(self) -> int:
        return int(self.targets.shape[0])

    @cached_property
    def predictions(self) -> np.ndarray:
        return predictions(self.probs)

    @cached_property
    def confidences(self) -> np.ndarray:
        return np.max(self.probs, axis=1)

    @cached_property
    def correct(self) -> np.ndarray:
        return self.predictions == self.targets

    @cached_property
    def p_true(self) -> np.ndarray:
        return self.probs[np.arange(self.n), self.targets]


def _as_rows(probs: Any) -> tuple[np.ndarray, np.ndarray]:
    """Return ``probs`` as a zero-padded float array ``[N, K_max]`` plus the true K of each row."""
    if isinstance(probs, np.ndarray) and probs.dtype != object:
        if probs.ndim != 2:
            raise ValueError(
                f"probs must be a 2-D array [N, K] or a sequence of 1-D arrays; got an array of shape "
                f"{probs.shape}"
            )
        arr = probs.astype(np.float64, copy=False)
        return arr, np.full(arr.shape[0], arr.shape[1], dtype=np.int64)
    if isinstance(probs, (str, bytes)) or not isinstance(probs, (Sequence, np.ndarray)):
        raise ValueError(
            f"probs must be a 2-D array [N, K] or a sequence of 1-D arrays; got {type(probs).__name__}"
        )
    rows = []
    for i, row in enumerate(probs):
        r = np.asarray(row, dtype=np.float64)
        if r.ndim != 1 or r.shape[0] == 0:
            raise ValueError(f"probs[{i}] must be a non-empty 1-D probability vector; got shape {r.shape}")
        rows.append(r)
    n_options = np.array([r.shape[0] for r in rows], dtype=np.int64)
    k_max = int(n_options.max()) if rows else 0
    arr = np.zeros((len(rows), k_max), dtype=np.float64)
    for i, r in enumerate(rows):
        arr[i, : r.shape[0]] = r
    return arr, n_options


def _normalise(probs: Any, targets: Any) -> _Batch:
    """Validate ``probs``/``targets`` and bring them to the padded :class:`_Batch` form."""
    arr, n_options = _as_rows(probs)
    tgt = np.asarray(targets)
    if tgt.ndim != 1:
        raise ValueError(f"targets must be a 1-D integer array [N]; got shape {tgt.shape}")
    if arr.shape[0] != tgt.shape[0]:
        raise ValueError(
            f"shape mismatch: probs has {arr.shape[0]} rows (questions) "
            f"but targets has {tgt.shape[0]} entries"
        )
    if arr.shape[0] == 0:
        raise ValueError("metrics need at least one question; got N = 0")
    if not (np.issubdtype(tgt.dtype, np.integer) and tgt.dtype != np.bool_):
        raise ValueError(f"targets must hold integer option indices; got dtype {tgt.dtype}")
    tgt = tgt.astype(np.int64, copy=False)
    bad = np.flatnonzero((tgt < 0) | (tgt >= n_options))
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"targets out of range: targets[{i}] = {int(tgt[i])} but question {i} has {int(n_options[i])} "
            f"options (valid indices 0..{int(n_options[i]) - 1}); {bad.size} such entries in total"
        )
    if not np.all(np.isfinite(arr)):
        i = int(np.flatnonzero(~np.all(np.isfinite(arr), axis=1))[0])
        raise ValueError(f"probs contains NaN or infinite values (first in row {i})")
    if np.any(arr < 0):
        i = int(np.flatnonzero(np.any(arr < 0, axis=1))[0])
        raise ValueError(f"probs contains negative values (first in row {i}: {arr[i].tolist()})")
    sums = arr.sum(axis=1)
    off = np.flatnonzero(np.abs(sums - 1.0) > SUM_TOLERANCE)
    if off.size:
        i = int(off[0])
        raise ValueError(
            f"rows of probs must be probability vectors summing to 1 (tolerance {SUM_TOLERANCE}); row {i} "
            f"sums to {sums[i]:.6g}; {off.size} such rows in total (pass probabilities, not logits)"
        )
    return _Batch(probs=arr, targets=tgt, n_options=n_options)


# --------------------------------------------------------------------------------------------------
# metrics: a vectorised core per metric, (batch, index [R, n]) -> R values, one per resample
# --------------------------------------------------------------------------------------------------

#: ``core(batch, index)``: the metric on each row of the index matrix ``[R, n]`` (row r lists the
#: questions of resample r), as an array ``[R]``.
_Core = Callable[[_Batch, np.ndarray], np.ndarray]


def _identity(n: int) -> np.ndarray:
    """The index matrix ``[1, n]`` of the sample itself."""
    return np.arange(n)[None, :]


def _offset_bincount(keys: np.ndarray, size: int, weights: np.ndarray | None = None) -> np.ndarray:
    """Per-resample histograms ``[R, size]`` of ``keys [R, n]`` (values in 0..size−1): resample r's keys are
    shifted by r·size so one flat ``np.bincount`` fills every row."""
    rows = keys.shape[0]
    flat = (keys + size * np.arange(rows)[:, None]).ravel()
    flat_weights = None if weights is None else weights.ravel()
    return np.bincount(flat, weights=flat_weights, minlength=rows * size).reshape(rows, size)


def _bin_index(confidences: np.ndarray, n_bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Bin b (0-based) of each confidence under the right-closed convention (b/B, (b+1)/B], a confidence within
    `TIE_TOLERANCE` of an edge counting as on it: b = the i − 1 with edges[i−1] < c − tol ≤ edges[i].

    Edges are ``k / B`` computed by true division.  The tolerance keeps float rounding from deciding a tie: q*
    (a mean of per-path answer frequencies) is often exactly an edge such as 9/15, yet one ulp above it in
    float64 for some summation orders.  Confidence 0 goes to the first bin, confidence 1 (or a hair above,
    within the row-sum tolerance) to the last.
    """
    edges = np.arange(n_bins + 1, dtype=np.float64) / n_bins
    # side="left": index i with edges[i-1] < c - tol <= edges[i], i.e. the right-closed bin i-1.
    idx = np.searchsorted(edges, confidences - TIE_TOLERANCE, side="left") - 1
    return np.clip(idx, 0, n_bins - 1), edges


def _tie_levels(scores: np.ndarray) -> np.ndarray:
    """0-based rank of each score among the distinct ones, a score within `TIE_TOLERANCE` of the next lower one
    sharing its rank: float noise (q* = 0.6 summed as 0.6000000000000001) must not break a tie."""
    order = np.argsort(scores, kind="stable")
    level = np.empty(scores.shape[0], dtype=np.int64)
    level[order] = np.concatenate(([0], np.cumsum(np.diff(scores[order]) > TIE_TOLERANCE)))
    return level


def _accuracy_core(batch: _Batch, index: np.ndarray) -> np.ndarray:
    """ACC = mean of t_i over the resample."""
    return batch.correct[index].mean(axis=1)


def _auroc_core(batch: _Batch, index: np.ndarray) -> np.ndarray:
    """With the distinct scores v_1 < … < v_U and a resample's correct (P_u) and wrong (N_u) counts at v_u:
    AUC = Σ_u P_u (Σ_{w<u} N_w + ½ N_u) / (P N), P = Σ P_u, N = Σ N_u (the midrank statistic), NaN when
    P = 0 or N = 0, scores within `TIE_TOLERANCE` tied (`_tie_levels`).  Twice the numerator is a sum of integers, so
    the division is the only rounding.
    """
    level = _tie_levels(batch.confidences)
    n_levels = int(level.max()) + 1
    counts = _offset_bincount((2 * level + batch.correct)[index], 2 * n_levels)
    wrong, right = counts[:, 0::2], counts[:, 1::2]  # [R, U]
    below = np.cumsum(wrong, axis=1) - wrong
    twice_pairs = np.sum(right * (2 * below + wrong), axis=1)
    denominator = 2 * right.sum(axis=1) * wrong.sum(axis=1)
    return np.divide(twice_pairs, denominator, out=np.full(index.shape[0], math.nan), where=denominator > 0)


def _bin_sums(batch: _Batch, index: np.ndarray, n_bins: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per resample and bin: n_b, Σ_{B_b} c_i and Σ_{B_b} t_i, each ``[R, n_bins]``."""
    bins, _ = _bin_index(batch.confidences, n_bins)
    keys = bins[index]
    count = _offset_bincount(keys, n_bins)
    conf_sum = _offset_bincount(keys, n_bins, batch.confidences[index])
    acc_sum = _offset_bincount(keys, n_bins, batch.correct[index].astype(np.float64))
    return count, conf_sum, acc_sum


def _ece_core(batch: _Batch, index: np.ndarray, n_bins: int = 15) -> np.ndarray:
    """ECE = Σ_b (n_b/n) |acc_b − conf_b| from each resample's bin sums (empty bins contribute 0)."""
    count, conf_sum, acc_sum = _bin_sums(batch, index, n_bins)
    nonempty = count > 0
    mean_conf = np.divide(conf_sum, count, out=np.zeros_like(conf_sum), where=nonempty)
    mean_acc = np.divide(acc_sum, count, out=np.zeros_like(acc_sum), where=nonempty)
    return np.sum(count / index.shape[1] * np.abs(mean_acc - mean_conf), axis=1)


def _ce2_core(batch: _Batch, index: np.ndarray, n_bins: int = CE2_BINS) -> np.ndarray:
    """Debiased squared calibration error CE₂² = Σ_b (n_b/n) U_b, U_b = (S_b² − Σ_{B_b} d_i²) / (n_b (n_b − 1)) with
    d_i = t_i − c_i and S_b = Σ_{B_b} d_i: the U-statistic of (E[t − c | b])², unbiased given n_b ≥ 2 (bins with
    fewer contribute 0); the debiasing of Kumar et al. (2019) with the within-bin variance of t − c."""
    bins, _ = _bin_index(batch.confidences, n_bins)
    keys, gap = bins[index], (batch.correct - batch.confidences)[index]
    count = _offset_bincount(keys, n_bins)
    total = _offset_bincount(keys, n_bins, gap)
    square = _offset_bincount(keys, n_bins, gap * gap)
    pairs = count * (count - 1.0)
    within = np.divide(total * total - square, pairs, out=np.zeros_like(total), where=count > 1)
    return np.sum(count / index.shape[1] * within, axis=1)


def _nll_core(batch: _Batch, index: np.ndarray, eps: float = NLL_EPS) -> np.ndarray:
    """NLL = mean of −log max(p_i^(y_i), ε) over the resample."""
    # 0 − log rather than −log: a certain right answer scores +0, and a mean of −0s would print as "-0.0000"
    return (0.0 - np.log(np.maximum(batch.p_true, eps)))[index].mean(axis=1)


def _brier_core(batch: _Batch, index: np.ndarray) -> np.ndarray:
    """BS = mean of Σ_k (p_i^(k) − 1{k = y_i})² over the resample."""
    diff = batch.probs.copy()
    diff[np.arange(batch.n), batch.targets] -= 1.0
    return np.sum(diff**2, axis=1)[index].mean(axis=1)


def accuracy(probs: Any, targets: Any) -> float:
    """Accuracy: ACC = (1/N) Σ_i 1{argmax_k p_i^(k) = y_i}.

    Ties in the argmax (within ``TIE_TOLERANCE``) are broken toward the lowest option index, so a uniform row
    predicts option 0.
    """
    batch = _normalise(probs, targets)
    return float(_accuracy_core(batch, _identity(batch.n))[0])


def auroc(probs: Any, targets: Any) -> float:
    """AUROC of correctness detection: P(s⁺ > s⁻) + ½ P(s⁺ = s⁻), with score s_i = max_k p_i^(k)
    and label t_i = 1{ŷ_i = y_i} (s⁺ from correct, s⁻ from incorrect questions; scores within `TIE_TOLERANCE` equal).

    When all predictions are correct or all are wrong the metric is undefined: returns NaN and warns with
    :class:`MetricWarning`.
    """
    batch = _normalise(probs, targets)
    n_correct = int(batch.correct.sum())
    if n_correct == 0 or n_correct == batch.n:
        warnings.warn(
            f"AUROC is undefined: all {batch.n} predictions are "
            f"{'correct' if n_correct else 'incorrect'} (only one class present); returning NaN",
            MetricWarning,
            stacklevel=2,
        )
        return math.nan
    return float(_auroc_core(batch, _identity(batch.n))[0])


@dataclass(frozen=True)
class ReliabilityBins:
    """Per-bin statistics of a reliability diagram with equal-width bins ((b−1)/B, b/B].

    ``edges`` has B+1 entries; ``count``, ``confidence`` and ``accuracy`` have B.  ``confidence`` and
    ``accuracy`` are NaN for empty bins.  ``n`` is the total number of questions.
    """

    edges: np.ndarray
    count: np.ndarray
    confidence: np.ndarray
    accuracy: np.ndarray
    n: int

    @property
    def n_bins(self) -> int:
        return int(self.count.shape[0])

    @property
    def gap(self) -> np.ndarray:
        """|acc_b − conf_b| per bin, 0 for empty bins."""
        return np.where(self.count > 0, np.abs(np.nan_to_num(self.accuracy - self.confidence)), 0.0)


def _check_n_bins(n_bins: Any) -> int:
    if isinstance(n_bins, bool) or not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer; got {n_bins!r}")
    return int(n_bins)


def reliability_bins(probs: Any, targets: Any, n_bins: int = 15) -> ReliabilityBins:
    """Reliability-diagram bins: B_b = {i : c_i ∈ ((b−1)/B, b/B]} (c = 0 in the first bin), with
    n_b = |B_b|, conf_b = mean_{B_b} c_i and acc_b = mean_{B_b} 1{ŷ_i = y_i}.
    """
    n_bins = _check_n_bins(n_bins)
    batch = _normalise(probs, targets)
    count, conf_sum, acc_sum = (sums[0] for sums in _bin_sums(batch, _identity(batch.n), n_bins))
    nonempty = count > 0
    mean_conf = np.divide(conf_sum, count, out=np.full(n_bins, np.nan), where=nonempty)
    mean_acc = np.divide(acc_sum, count, out=np.full(n_bins, np.nan), where=nonempty)
    _, edges = _bin_index(batch.confidences, n_bins)
    return ReliabilityBins(edges=edges, count=count, confidence=mean_conf, accuracy=mean_acc, n=batch.n)


def ce2_squared(probs: Any, targets: Any, n_bins: int = CE2_BINS) -> float:
    """The unbiased estimate CE₂² of the squared ℓ2 calibration error Σ_b P_b (E[t − c | b])² on `n_bins`
    equal-width bins (`_ce2_core`; may be negative)."""
    batch = _normalise(probs, targets)
    return float(_ce2_core(batch, _identity(batch.n), n_bins)[0])


def ce2(probs: Any, targets: Any, n_bins: int = CE2_BINS) -> float:
    """Debiased ℓ2 calibration error √max(0, CE₂²) (`ce2_squared`): the binned ECE's plug-in |acc_b − conf_b| is
    biased upward at small n; the estimate of its squared ℓ2 form is not."""
    return math.sqrt(max(0.0, ce2_squared(probs, targets, n_bins)))


def ce2_interval(batch: _Batch, index: np.ndarray, level: float, n_bins: int = CE2_BINS,
                 min_n: int = CE2_MIN_N) -> Interval:
    """CE₂ with a bias-centred percentile bootstrap interval: on a resample the U-statistic estimates the
    sample's plug-in (duplicates pair with themselves), so the percentiles of CE₂²* are shifted by
    mean(CE₂²*) − CE₂² before the root; NaN bounds below `min_n` questions (where the bench found none valid)."""
    point = float(_ce2_core(batch, _identity(batch.n), n_bins)[0])
    root = math.sqrt(max(0.0, point))
    if batch.n < min_n:
        return Interval(root, math.nan, math.nan)
    resampled = _ce2_core(batch, index, n_bins)
    alpha = 100.0 * (1.0 - level) / 2.0
    low, high = np.percentile(resampled - (resampled.mean() - point), [alpha, 100.0 - alpha])
    return Interval(root, math.sqrt(max(0.0, low)), math.sqrt(max(0.0, high)))


def ece(probs: Any, targets: Any, *, n_bins: int = 15) -> float:
    """Expected calibration error: ECE = Σ_b (n_b/N) |acc_b − conf_b| over the equal-width bins
    ((b−1)/B, b/B] of :func:`reliability_bins` (empty bins contribute 0).
    """
    n_bins = _check_n_bins(n_bins)
    batch = _normalise(probs, targets)
    return float(_ece_core(batch, _identity(batch.n), n_bins)[0])


def _check_eps(eps: float) -> None:
    if not (eps > 0 and math.isfinite(eps)):
        raise ValueError(f"eps must be a positive finite number; got {eps!r}")


def nll(probs: Any, targets: Any, *, eps: float = NLL_EPS) -> float:
    """Negative log-likelihood: NLL = (1/N) Σ_i −log max(p_i^(y_i), ε).

    :func:`nll_clipped` counts the questions with p_i^(y_i) < ε (whose term is capped at −log ε); `summarize`
    reports it as ``nll_clipped``.
    """
    _check_eps(eps)
    batch = _normalise(probs, targets)
    return float(_nll_core(batch, _identity(batch.n), eps)[0])


def nll_clipped(probs: Any, targets: Any, *, eps: float = NLL_EPS) -> int:
    """How many true-label probabilities :func:`nll` clips up to ``eps`` (p_i^(y_i) < ε)."""
    _check_eps(eps)
    batch = _normalise(probs, targets)
    return int(np.count_nonzero(batch.p_true < eps))


def nll_bound(eps: float = NLL_EPS) -> float:
    """The largest per-question NLL, −log ε: −log max(p, ε) ≤ −log ε."""
    return -math.log(eps)


def brier(probs: Any, targets: Any) -> float:
    """Brier score: BS = (1/N) Σ_i Σ_k (p_i^(k) − 1{k = y_i})² (sum over classes, mean over questions)."""
    batch = _normalise(probs, targets)
    return float(_brier_core(batch, _identity(batch.n))[0])


# --------------------------------------------------------------------------------------------------
# bootstrap and summary
# --------------------------------------------------------------------------------------------------


class Interval(NamedTuple):
    """A point estimate with a bootstrap confidence interval; unpacks as ``(point, low, high)``."""

    point: float
    low: float
    high: float


def resample_indices(n: int, n_resamples: int, generator: np.random.Generator) -> np.ndarray:
    """The bootstrap index matrix ``[n_resamples, n]``: row r lists the n items of resample r, drawn
    uniformly from 0..n−1 with replacement, in one call (``generator.integers(0, n, size=(n_resamples, n))``), so a
    seed keeps giving the same resamples."""
    return generator.integers(0, n, size=(n_resamples, n))


@dataclass(frozen=True)
class MetricSpec:
    """A metric of the report: its table name, function and vectorised core, which way is better, the report
    table it is in, whether it is shown in percent, the options of `summarize` it takes (`n_bins`, `eps`), from
    how many questions on its interval (and paired p-value) is valid (`interval_from`; `math.inf`: never),
    whether its interval is the percentile bootstrap of its core and `paired_summary` compares it
    (`percentile_bootstrap`; CE₂'s is bias-centred, `ce2_interval`, and has no paired test), and for a mean over
    questions whose paired p is `bounded_mean_p`, the largest per-question value from its options (`bound`: each
    question scores in [0, bound], so a paired difference lies in [−bound, bound])."""

    name: str
    function: Callable[..., Any]
    core: Callable[..., np.ndarray]
    higher_is_better: bool
    table: int
    percent: bool = False
    options: tuple[str, ...] = ()
    interval_from: float = 1
    percentile_bootstrap: bool = True
    bound: Callable[..., float] | None = None


def _ce2_root_core(batch: _Batch, index: np.ndarray) -> np.ndarray:
    """CE₂ = √max(0, CE₂²) of each resample (`_ce2_core`)."""
    return np.sqrt(np.maximum(0.0, _ce2_core(batch, index)))


#: Every metric the report shows, in column order: adding one is one entry here (and its test in test_metrics.py).
#: ECE has no valid interval or paired p at any n: its binned plug-in is biased upward by an amount that depends on
#: how the confidences spread over the bins (docs/statistics.md).
REPORT_METRICS: dict[str, MetricSpec] = {spec.name: spec for spec in (
    MetricSpec("ACC", accuracy, _accuracy_core, higher_is_better=True, table=1, percent=True),
    MetricSpec("AUC", auroc, _auroc_core, higher_is_better=True, table=1, percent=True),
    MetricSpec("ECE", ece, _ece_core, higher_is_better=False, table=2, options=("n_bins",), interval_from=math.inf),
    MetricSpec("CE2", ce2, _ce2_root_core, higher_is_better=False, table=2, interval_from=CE2_MIN_N,
               percentile_bootstrap=False),
    MetricSpec("NLL", nll, _nll_core, higher_is_better=False, table=2, options=("eps",), bound=nll_bound),
    MetricSpec("BS", brier, _brier_core, higher_is_better=False, table=2, bound=lambda: BRIER_BOUND),
)}
#: The metrics `summarize` bootstraps by percentiles and `paired_summary` compares, in table order (all but CE₂).
METRICS = {name: spec for name, spec in REPORT_METRICS.items() if spec.percentile_bootstrap}
#: Names of the metrics as they appear in report tables, in table order.
METRIC_NAMES: tuple[str, ...] = tuple(METRICS)


def interval_valid(metric: str, n: int) -> bool:
    """Whether `metric`'s interval and paired p-value over `n` questions are valid (`MetricSpec.interval_from` of
    `REPORT_METRICS`; a name outside it, e.g. EMD‾, is)."""
    spec = REPORT_METRICS.get(metric)
    return spec is None or n >= spec.interval_from


_R = TypeVar("_R", "Interval", "PairedDelta")


def valid_only(metric: str, result: _R, n: int) -> _R:
    """`result` (an `Interval` or `PairedDelta` of `metric` over `n` questions) with NaN bounds, and NaN p, where
    `interval_valid` says it has none: every surface (tables, CSV, `Run`, explorer) then shows none."""
    if interval_valid(metric, n):
        return result
    if isinstance(result, PairedDelta):
        return result._replace(low=math.nan, high=math.nan, p=math.nan)
    return result._replace(low=math.nan, high=math.nan)


#: The vectorised core of each metric of this module.
_CORES: dict[Callable[..., Any], Callable[..., np.ndarray]] = {spec.function: spec.core for spec in METRICS.values()}


def _core_of(metric_fn: Callable[..., Any]) -> _Core:
    """The core computing ``metric_fn`` on every resample at once: that of a metric of this module, or of a
    ``functools.partial`` of one with keyword options (``partial(ece, n_bins=10)``); for any other callable,
    a loop calling ``metric_fn`` on each resample's rows (MetricWarnings suppressed)."""
    func, options = metric_fn, {}
    if isinstance(metric_fn, partial) and not metric_fn.args:
        func, options = metric_fn.func, metric_fn.keywords
    core = _CORES.get(func)
    if core is not None:
        return partial(core, **options)

    def looped(batch: _Batch, index: np.ndarray) -> np.ndarray:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MetricWarning)
            return np.array([float(metric_fn(batch.probs[rows], batch.targets[rows])) for rows in index])

    return looped


def _check_bootstrap_args(n_resamples: Any, level: float) -> int:
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, (int, np.integer)) or n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive integer; got {n_resamples!r}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie strictly between 0 and 1; got {level!r}")
    return int(n_resamples)


def _interval(metric_fn: Callable[..., Any], batch: _Batch, index: np.ndarray, level: float) -> Interval:
    """Point estimate and the (1∓level)/2 percentiles of the metric over the resamples, NaN ones ignored."""
    point = float(metric_fn(batch.probs, batch.targets))
    stats = _core_of(metric_fn)(batch, index)
    if np.all(np.isnan(stats)):
        return Interval(point, math.nan, math.nan)
    alpha = 100.0 * (1.0 - level) / 2.0
    low, high = np.nanpercentile(stats, [alpha, 100.0 - alpha])
    return Interval(point, float(low), float(high))


def bootstrap_ci(
    metric_fn: Callable[[np.ndarray, np.ndarray], Any],
    probs: Any,
    targets: Any,
    *,
    n_resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> Interval:
    """Percentile bootstrap over questions: resample N questions with replacement ``n_resamples``
    times (:func:`resample_indices` with ``numpy.random.default_rng(seed)``); [low, high] = the
    (1∓level)/2 percentiles of the resampled metric values.

    ``metric_fn(probs, targets)`` must return something ``float()`` accepts (every metric here returns a
    float).  The metrics of this module (and ``functools.partial``s of them with keyword options) are computed on all
    resamples at once; any other callable is called per resample with the resampled rows as a
    zero-padded ``[N, K_max]`` array (ragged input included).  NaN resamples (e.g. AUROC on a resample
    with one class) are ignored; their :class:`MetricWarning` is suppressed.  If every resample is NaN,
    low and high are NaN.  Note that for a biased statistic such as ECE the percentile interval need not
    contain the point estimate.
    """
    n_resamples = _check_bootstrap_args(n_resamples, level)
    batch = _normalise(probs, targets)
    return _interval(metric_fn, batch, resample_indices(batch.n, n_resamples, np.random.default_rng(seed)), level)


def _metric_fns(n_bins: int, eps: float) -> dict[str, Callable[..., Any]]:
    """The metric of each report-table name, with the ECE bins and the NLL clip."""
    options = {"n_bins": n_bins, "eps": eps}
    return {name: partial(spec.function, **{o: options[o] for o in spec.options}) if spec.options else spec.function
            for name, spec in METRICS.items()}


def summarize(
    probs: Any,
    targets: Any,
    *,
    n_bins: int = 15,
    eps: float = NLL_EPS,
    n_resamples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, Any]:
    """All metrics with bootstrap intervals, keyed by their report-table names.

    Returns ``{"ACC", "AUC", "ECE", "NLL", "BS"}`` → :class:`Interval` ``(point, low, high)``, ``"CE2"`` (the
    debiased calibration error, :func:`ce2_interval`), plus
    ``"n"`` (number of questions), ``"nll_clipped"`` (true-label probabilities clipped to ``eps``),
    ``"level"`` and ``"n_resamples"``.  All metrics use the same resamples, those of
    :func:`bootstrap_ci` with ``seed``.  AUROC's point is NaN, with a :class:`MetricWarning`, when only
    one class is present.  Bounds are NaN where the metric has no valid interval (`valid_only`: ECE always, CE2
    below ``CE2_MIN_N`` questions).
    """
    n_resamples = _check_bootstrap_args(n_resamples, level)
    batch = _normalise(probs, targets)
    index = resample_indices(batch.n, n_resamples, np.random.default_rng(seed))
    fns = _metric_fns(n_bins, eps)
    out: dict[str, Any] = {"n": batch.n, "nll_clipped": nll_clipped(batch.probs, batch.targets, eps=eps)}
    for name in METRIC_NAMES:
        out[name] = valid_only(name, _interval(fns[name], batch, index, level), batch.n)
    out["CE2"] = valid_only("CE2", ce2_interval(batch, index, level), batch.n)
    out["level"] = level
    out["n_resamples"] = n_resamples
    return out


# --------------------------------------------------------------------------------------------------
# paired comparisons of two methods on the same questions
# --------------------------------------------------------------------------------------------------


class PairedDelta(NamedTuple):
    """Δ = metric(a) − metric(b) on the same questions, its paired bootstrap interval and two-sided p-value
    (`paired_bootstrap`); unpacks as ``(delta, low, high, p)``."""

    delta: float
    low: float
    high: float
    p: float


def _paired_delta(delta: float, resampled: np.ndarray, level: float) -> PairedDelta:
    """From the observed Δ and the resampled Δ*_1 … Δ*_R (NaN ones dropped, R' left): [low, high] = the
    (1∓level)/2 percentiles of Δ*, and the two-sided percentile bootstrap p-value

        p = min(1, 2 (1 + min(#{Δ* ≤ 0}, #{Δ* ≥ 0})) / (R' + 1)),

    twice the fraction of resamples on the far side of 0, with the +1 that keeps a Monte Carlo p-value
    above 0 (Davison & Hinkley 1997, §4.4; Phipson & Smyth 2010).  Δ* ≡ 0 (a method against itself) gives
    p = 1; NaN when no resample is finite.  `_paired` keeps this p only as one part of its own."""
    finite = resampled[~np.isnan(resampled)]
    if finite.size == 0:
        return PairedDelta(delta, math.nan, math.nan, math.nan)
    alpha = 100.0 * (1.0 - level) / 2.0
    low, high = np.percentile(finite, [alpha, 100.0 - alpha])
    far_side = min(np.count_nonzero(finite <= 0), np.count_nonzero(finite >= 0))
    p = min(1.0, 2.0 * (1 + int(far_side)) / (finite.size + 1))
    return PairedDelta(delta, float(low), float(high), p)


def _swap_patterns(n: int, count: int, seed: int) -> tuple[np.ndarray, bool]:
    """Which questions a permutation test swaps (or sign-flips), [P, n] booleans: all 2^n patterns while 2^n ≤
    `count` (exact), else `count` random ones from ``numpy.random.default_rng(seed)``; and whether exact."""
    if 2**n <= count:
        return (np.arange(2**n)[:, None] >> np.arange(n)) & 1 == 1, True
    return np.random.default_rng(seed).integers(0, 2, (count, n)) == 1, False


def _permutation_p(observed: float, null: np.ndarray, exact: bool) -> float:
    """Two-sided permutation p-value 2 min(#{T ≤ t}, #{T ≥ t}) / P over the null statistics T of P patterns
    (with the +1 in numerator and denominator when they are random; Phipson & Smyth 2010), capped at 1; T within
    10⁻¹² · |t| of t counts on both sides (ties that rounding splits), as in `scipy.stats.permutation_test`."""
    tie = 1e-12 * abs(observed)
    extra = 0 if exact else 1
    tail = min(np.count_nonzero(null <= observed + tie), np.count_nonzero(null >= observed - tie))
    return float(min(1.0, 2.0 * (tail + extra) / (len(null) + extra)))


def sign_flip_p(diff: np.ndarray) -> float:
    """Two-sided paired permutation p-value of mean(diff): the mean under every sign pattern of the per-question
    differences (all 2^n while 2^n ≤ `SIGN_FLIPS`, else that many random ones, seed 0; `_permutation_p`). Exact at
    any n when the difference is symmetric about 0 under the null (two exchangeable methods), and not otherwise: a
    skewed difference with mean 0 is rejected far above the level at small n (docs/statistics.md). Its smallest
    value is 2/2^n (1 at n = 1). Not part of the paired tables' rule (`bounded_mean_p` is)."""
    if diff.size < 2:
        return 1.0
    flips, exact = _swap_patterns(diff.size, SIGN_FLIPS, 0)
    return _permutation_p(float(diff.mean()), np.where(flips, -diff, diff).mean(1), exact)


def _spread_is_zero(values: np.ndarray, scale: np.ndarray | float) -> np.ndarray:
    """Standard deviations that are 0 up to float rounding (relative to the values' `scale`)."""
    return values <= 1e-12 * np.maximum(scale, 1e-300)


def studentized_p(diff: np.ndarray, index: np.ndarray) -> float:
    """Equal-tailed bootstrap-t p-value of mean(diff) = 0 over the resamples `index` [R, n] (Hall 1992): with
    t = d̄ / (s/√n) and t*_r = (d̄*_r − d̄) / (s*_r/√n), p = min(1, 2 min(1 + #{t* ≤ t}, 1 + #{t* ≥ t}) / (R + 1)).
    A resample with s* = 0 gives t* = ±∞ (0 where d̄* = d̄), and p = 1 when s = 0. Valid only as n grows: on a skewed
    difference whose rare large value is missing from the sample it rejects far above the level (docs/statistics.md),
    and no test that uses only the spread of the sample can do better for every distribution (Bahadur & Savage
    1956). Not part of the paired tables' rule (`bounded_mean_p` is)."""
    n = diff.size
    scale = float(np.abs(diff).max()) if n else 0.0
    if n < 2 or _spread_is_zero(np.std(diff, ddof=1), scale):
        return 1.0
    mean = diff.mean()
    t = mean / (diff.std(ddof=1) / math.sqrt(n))
    resampled = diff[index]
    centred = resampled.mean(1) - mean
    spread = resampled.std(1, ddof=1) / math.sqrt(n)
    flat = _spread_is_zero(spread, scale)
    t_star = np.where(flat, np.copysign(np.inf, centred), centred / np.where(flat, 1.0, spread))
    t_star[flat & (centred == 0)] = 0.0
    tail = min(np.count_nonzero(t_star <= t), np.count_nonzero(t_star >= t))
    return float(min(1.0, 2.0 * (1 + tail) / (len(index) + 1)))


def _swap_p(metric: _Core, a: _Batch, b: _Batch, observed: float, n_resamples: int, seed: int) -> float:
    """Two-sided within-question swap permutation p-value of Δ = metric(a) − metric(b) (`observed`) for any metric
    core: Δ with each question's two predictions swapped or not, over the patterns of `_swap_patterns` (`n_resamples`
    of them; `_permutation_p`). Exact for every metric when the two methods' predictions are exchangeable within each
    question. A pattern whose Δ is NaN (AUROC with one class) counts as being as extreme as `observed` on both sides."""
    if a.n < 2:
        return 1.0
    width = max(a.probs.shape[1], b.probs.shape[1])
    both = _Batch(probs=np.concatenate([np.pad(x.probs, ((0, 0), (0, width - x.probs.shape[1]))) for x in (a, b)]),
                  targets=np.concatenate([a.targets, b.targets]), n_options=np.concatenate([a.n_options, b.n_options]))
    swaps, exact = _swap_patterns(a.n, n_resamples, seed)
    rows = np.arange(a.n)
    null = metric(both, np.where(swaps, rows + a.n, rows)) - metric(both, np.where(swaps, rows, rows + a.n))
    return _permutation_p(observed, np.where(np.isnan(null), observed, null), exact)


def bounded_mean_p(diff: np.ndarray, bound: float) -> float:
    """Two-sided p of E[d] = 0 for per-question differences d_i ∈ [−bound, bound], valid at every n for every
    distribution: testing by betting (Waudby-Smith & Ramdas 2024, hedged capital with predictable plug-in bets).

    With x_i = d_i / bound ∈ [−1, 1] in the order given, K_t = ½ Π_{i≤t} (1 + λ_i x_i) + ½ Π_{i≤t} (1 − λ_i x_i),
    where λ_i = min(`BET_CAP`, √(2 log(2/α) / (σ̂²_{i−1} i log(1 + i)))) uses the earlier x only (σ̂²_t = (¼ + Σ_{j≤t}
    (x_j − x̄_{j−1})²) / (t + 1), x̄_t = Σ_{j≤t} x_j / (t + 1); α = `BET_LEVEL`). Under the null E[x_i | x_{<i}] = 0
    and each factor is ≥ 1 − λ_i > 0, so K is a nonnegative martingale of mean 1 and p = min(1, 1/max_t K_t) has
    P(p ≤ α) ≤ α by Ville's inequality (dependent d_i included). The bound is what makes it valid and what it
    costs: differences far smaller than the bound move K little, so at small n p stays near 1. The order of the
    questions enters only through the fitted bets. NaN for no differences; a difference beyond the bound (by more
    than float rounding) or not finite is an error."""
    x = np.asarray(diff, dtype=np.float64) / bound
    if x.size == 0:
        return math.nan
    if not np.all(np.abs(x) <= 1 + 1e-6):
        raise ValueError(f"paired differences reach {np.nanmax(np.abs(diff)):.6g} (or are not finite), beyond the "
                         f"bound {bound:g} their p assumes")
    x = np.clip(x, -1.0, 1.0)
    count = np.arange(1, x.size + 1)
    running = np.cumsum(x) / (count + 1)
    spread = (0.25 + np.cumsum((x - np.concatenate([[0.0], running[:-1]])) ** 2)) / (count + 1)
    earlier = np.concatenate([[0.25], spread[:-1]])
    bet = np.minimum(BET_CAP, np.sqrt(2 * math.log(2 / BET_LEVEL) / (earlier * count * np.log1p(count))))
    wealth = np.logaddexp(np.cumsum(np.log1p(bet * x)), np.cumsum(np.log1p(-bet * x))) - math.log(2)
    return float(min(1.0, math.exp(-max(0.0, float(wealth.max())))))


#: The metric of each vectorised core that `paired_summary` compares.
_SPECS = {spec.core: spec for spec in METRICS.values()}


def _paired(core: _Core, a: _Batch, b: _Batch, index: np.ndarray, level: float, seed: int) -> PairedDelta:
    """Δ on the sample and on every row of ``index`` (both methods scored on the same questions), the percentile
    interval, and the p-value of `paired_bootstrap`: ACC's `sign_test_p` and a bounded mean's `bounded_mean_p` from
    the per-question differences; for the others (AUC, ECE, any callable) max(`_swap_p`, percentile bootstrap p)."""
    delta = core(a, _identity(a.n)) - core(b, _identity(b.n))
    result = _paired_delta(float(delta[0]), core(a, index) - core(b, index), level)
    spec = _SPECS.get(getattr(core, "func", core))
    if spec is not None and (spec.core is _accuracy_core or spec.bound is not None):
        single = np.arange(a.n)[:, None]  # each question a "resample" of its own: the per-question values
        diff = core(a, single) - core(b, single)
        if spec.bound is None:  # ACC: differences in {−1, 0, 1}, symmetric once the means are equal
            return result._replace(p=sign_test_p(diff))
        return result._replace(p=bounded_mean_p(diff, spec.bound(**getattr(core, "keywords", {}))))
    if math.isnan(result.p) or math.isnan(result.delta):
        return result
    return result._replace(p=max(result.p, _swap_p(core, a, b, result.delta, len(index), seed)))


def sign_test_p(diff: np.ndarray) -> float:
    """Exact two-sided sign test of per-question differences in {−c, 0, c} (ACC's): under equal means the k
    positive among the m non-zero ones are Binomial(m, ½) (`scipy.stats.binomtest`); 1 when m = 0. The sign-flip
    test of their mean, computed exactly (McNemar's exact test)."""
    nonzero = int(np.count_nonzero(diff))
    return float(binomtest(int(np.count_nonzero(diff > 0)), nonzero).pvalue) if nonzero else 1.0


def _paired_batches(probs_a: Any, probs_b: Any, targets: Any) -> tuple[_Batch, _Batch]:
    return _normalise(probs_a, targets), _normalise(probs_b, targets)


def paired_bootstrap(
    metric_fn: Callable[[np.ndarray, np.ndarray], Any],
    probs_a: Any,
    probs_b: Any,
    targets: Any,
    *,
    n_resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> PairedDelta:
    """Paired bootstrap of Δ = metric(a) − metric(b), two methods' predictions ``probs_a``, ``probs_b`` on
    the same N questions (row i of both is question i, with target ``targets[i]``), with a two-sided p-value.

    One index matrix ``[R, N]`` (:func:`resample_indices` with ``numpy.random.default_rng(seed)``, the
    resamples of :func:`bootstrap_ci` with that seed) scores both methods on the same resampled
    questions: Δ*_r = metric(a[rows_r]) − metric(b[rows_r]); the interval is the percentile interval of Δ*.
    The p-value tests equal expected metrics by one rule at every N (no switch-over):

    * ACC (per-question differences in {−1, 0, 1}, symmetric once the means are equal): `sign_test_p`, exact;
    * NLL, BS (means of per-question differences of any shape, within the metric's bound: −log ε, 2):
      `bounded_mean_p` in question order, valid at every N for every distribution;
    * AUC, ECE and any other callable: max(`_swap_p`, the percentile bootstrap p of :func:`_paired_delta`), exact
      for exchangeable methods.

    It need not agree with the interval, which is the percentile bootstrap's.  Resamples on which the metric is
    NaN (AUROC with one class) are dropped.  ``metric_fn`` is taken as by :func:`bootstrap_ci`.
    """
    n_resamples = _check_bootstrap_args(n_resamples, level)
    a, b = _paired_batches(probs_a, probs_b, targets)
    index = resample_indices(a.n, n_resamples, np.random.default_rng(seed))
    return _paired(_core_of(metric_fn), a, b, index, level, seed)


def paired_summary(
    probs_a: Any,
    probs_b: Any,
    targets: Any,
    *,
    n_bins: int = 15,
    eps: float = NLL_EPS,
    n_resamples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, PairedDelta]:
    """:func:`paired_bootstrap` of every metric, keyed by its report-table name (:data:`METRIC_NAMES`), all on
    the same resamples (those of :func:`summarize` with ``seed``); interval and p NaN where the metric has none
    (`valid_only`: ΔECE)."""
    n_resamples = _check_bootstrap_args(n_resamples, level)
    a, b = _paired_batches(probs_a, probs_b, targets)
    index = resample_indices(a.n, n_resamples, np.random.default_rng(seed))
    return {name: valid_only(name, _paired(_core_of(fn), a, b, index, level, seed), a.n)
            for name, fn in _metric_fns(n_bins, eps).items()}


def paired_mean_bootstrap(
    values_a: Any, values_b: Any, *, bound: float | None = None, n_resamples: int = 1000, level: float = 0.95,
    seed: int = 0,
) -> PairedDelta:
    """Paired bootstrap of Δ = mean_i (x_i − y_i) for per-item values ``values_a`` = x, ``values_b`` = y of two
    methods on the same N items (e.g. each question's EMD‾): Δ*_r is the mean of x_i − y_i over resample r
    of :func:`resample_indices`; the percentile interval, and the p-value of a bounded mean metric in
    :func:`paired_bootstrap`, `bounded_mean_p` in item order, where every value lies in [0, ``bound``] (EMD‾: 2
    for L1, 1 for TV). Without a bound p is NaN: no test of a mean holds its level for every distribution."""
    n_resamples = _check_bootstrap_args(n_resamples, level)
    x, y = np.asarray(values_a, dtype=np.float64), np.asarray(values_b, dtype=np.float64)
    if x.ndim != 1 or x.shape != y.shape or x.size == 0:
        raise ValueError(f"paired values must be two non-empty 1-D arrays of one length; got shapes {x.shape}, "
                         f"{y.shape}")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise ValueError("paired values contain NaN or infinite entries")
    diff = x - y
    p = math.nan if bound is None else bounded_mean_p(diff, bound)
    index = resample_indices(diff.size, n_resamples, np.random.default_rng(seed))
    return _paired_delta(float(diff.mean()), diff[index].mean(axis=1), level)._replace(p=p)
