"""Evaluation metrics for multiple-choice predictions (paper Appendix "Evaluation Metrics", DESIGN §11).

A functional core: numpy in, floats out.  Every function takes

* ``probs``: the predicted distributions, either an array ``[N, K]`` whose rows are probability
  vectors over the K options, or a sequence of N one-dimensional arrays whose lengths may differ
  (questions with different numbers of options);
* ``targets``: integer array ``[N]``, the index of the correct option of each question.

Notation: ŷ_i = argmax_k p_i^(k) (ties go to the lowest index), c_i = max_k p_i^(k) (confidence),
t_i = 1{ŷ_i = y_i} (correctness).

Ragged input is handled by padding every row with zeros up to the largest K.  Zero-padding changes
none of the metrics: a padded option never wins the argmax (the real maximum of a probability vector
is > 0 and ties go to the lower index), never is a target, and adds (0 − 0)² = 0 to the Brier score.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from sklearn.metrics import roc_auc_score

__all__ = [
    "METRIC_NAMES",
    "SUM_TOLERANCE",
    "Interval",
    "MetricWarning",
    "NLLResult",
    "ReliabilityBins",
    "accuracy",
    "auroc",
    "bootstrap_ci",
    "brier",
    "ece",
    "nll",
    "reliability_bins",
    "summarize",
]

#: Names of the metrics as they appear in report tables, in table order.
METRIC_NAMES: tuple[str, ...] = ("ACC", "AUC", "ECE", "NLL", "BS")

#: A row of ``probs`` must sum to 1 within this absolute tolerance.
SUM_TOLERANCE = 1e-3


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

    @property
    def predictions(self) -> np.ndarray:
        # np.argmax returns the first maximal index: ties are broken toward the lowest index.
        return np.argmax(self.probs, axis=1)

    @property
    def confidences(self) -> np.ndarray:
        return np.max(self.probs, axis=1)

    @property
    def correct(self) -> np.ndarray:
        return self.predictions == self.targets

    @property
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
# metrics
# --------------------------------------------------------------------------------------------------


def accuracy(probs: Any, targets: Any) -> float:
    """Accuracy: ACC = (1/N) Σ_i 1{argmax_k p_i^(k) = y_i}.

    Ties in the argmax are broken toward the lowest option index (numpy's ``argmax`` convention), so a
    uniform row predicts option 0.
    """
    batch = _normalise(probs, targets)
    return float(np.mean(batch.correct))


def auroc(probs: Any, targets: Any) -> float:
    """AUROC of correctness detection: P(s⁺ > s⁻) + ½ P(s⁺ = s⁻), with score s_i = max_k p_i^(k)
    and label t_i = 1{ŷ_i = y_i} (s⁺ from correct, s⁻ from incorrect questions).

    Computed with :func:`sklearn.metrics.roc_auc_score` (which counts ties ½).  When all predictions
    are correct or all are wrong the metric is undefined: returns NaN and warns with
    :class:`MetricWarning`.
    """
    batch = _normalise(probs, targets)
    labels = batch.correct
    n_correct = int(labels.sum())
    if n_correct == 0 or n_correct == batch.n:
        warnings.warn(
            f"AUROC is undefined: all {batch.n} predictions are "
            f"{'correct' if n_correct else 'incorrect'} (only one class present); returning NaN",
            MetricWarning,
            stacklevel=2,
        )
        return math.nan
    return float(roc_auc_score(labels.astype(np.int64), batch.confidences))


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


def _bin_index(confidences: np.ndarray, n_bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Bin b (0-based) of each confidence under the right-closed convention ((b)/B, (b+1)/B].

    Edges are ``k / B`` computed by true division, so a confidence given as e.g. ``0.4`` (= 6/15
    rounded) sits exactly on its edge and goes to the lower bin.  Confidence 0 goes to the first bin,
    confidence 1 (or a hair above, within the row-sum tolerance) to the last.
    """
    edges = np.arange(n_bins + 1, dtype=np.float64) / n_bins
    # side="left": index i with edges[i-1] < c <= edges[i], i.e. the right-closed bin i-1.
    idx = np.searchsorted(edges, confidences, side="left") - 1
    return np.clip(idx, 0, n_bins - 1), edges


def reliability_bins(probs: Any, targets: Any, n_bins: int = 15) -> ReliabilityBins:
    """Reliability-diagram bins: B_b = {i : c_i ∈ ((b−1)/B, b/B]} (c = 0 in the first bin), with
    n_b = |B_b|, conf_b = mean_{B_b} c_i and acc_b = mean_{B_b} 1{ŷ_i = y_i}.
    """
    if isinstance(n_bins, bool) or not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer; got {n_bins!r}")
    n_bins = int(n_bins)
    batch = _normalise(probs, targets)
    conf = batch.confidences
    idx, edges = _bin_index(conf, n_bins)
    count = np.bincount(idx, minlength=n_bins)
    conf_sum = np.bincount(idx, weights=conf, minlength=n_bins)
    acc_sum = np.bincount(idx, weights=batch.correct.astype(np.float64), minlength=n_bins)
    nonempty = count > 0
    mean_conf = np.full(n_bins, np.nan)
    mean_acc = np.full(n_bins, np.nan)
    mean_conf[nonempty] = conf_sum[nonempty] / count[nonempty]
    mean_acc[nonempty] = acc_sum[nonempty] / count[nonempty]
    return ReliabilityBins(edges=edges, count=count, confidence=mean_conf, accuracy=mean_acc, n=batch.n)


def ece(probs: Any, targets: Any, n_bins: int = 15) -> float:
    """Expected calibration error: ECE = Σ_b (n_b/N) |acc_b − conf_b| over the equal-width bins
    ((b−1)/B, b/B] of :func:`reliability_bins` (empty bins contribute 0).
    """
    bins = reliability_bins(probs, targets, n_bins=n_bins)
    return float(np.sum(bins.count / bins.n * bins.gap))


@dataclass(frozen=True)
class NLLResult:
    """Mean negative log-likelihood and how many true-label probabilities were clipped up to ``eps``.

    ``float(result)`` gives ``result.value``, so :func:`nll` can be passed to :func:`bootstrap_ci`.
    """

    value: float
    clipped: int

    def __float__(self) -> float:
        return self.value


def nll(probs: Any, targets: Any, eps: float = 1e-6) -> NLLResult:
    """Negative log-likelihood: NLL = (1/N) Σ_i −log max(p_i^(y_i), ε).

    ``clipped`` counts the questions with p_i^(y_i) < ε (whose term is capped at −log ε).
    """
    if not (eps > 0 and math.isfinite(eps)):
        raise ValueError(f"eps must be a positive finite number; got {eps!r}")
    batch = _normalise(probs, targets)
    p = batch.p_true
    clipped = int(np.count_nonzero(p < eps))
    value = float(np.mean(-np.log(np.maximum(p, eps))))
    return NLLResult(value=value, clipped=clipped)


def brier(probs: Any, targets: Any) -> float:
    """Brier score: BS = (1/N) Σ_i Σ_k (p_i^(k) − 1{k = y_i})² (sum over classes, mean over questions)."""
    batch = _normalise(probs, targets)
    diff = batch.probs.copy()
    diff[np.arange(batch.n), batch.targets] -= 1.0
    return float(np.mean(np.sum(diff**2, axis=1)))


# --------------------------------------------------------------------------------------------------
# bootstrap and summary
# --------------------------------------------------------------------------------------------------


class Interval(NamedTuple):
    """A point estimate with a bootstrap confidence interval; unpacks as ``(point, low, high)``."""

    point: float
    low: float
    high: float


def _resample_indices(n: int, n_resamples: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, n, size=(n_resamples, n))


def bootstrap_ci(
    metric_fn: Callable[[np.ndarray, np.ndarray], Any],
    probs: Any,
    targets: Any,
    n_resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> Interval:
    """Percentile bootstrap over questions: resample N questions with replacement ``n_resamples``
    times (``numpy.random.default_rng(seed)``); [low, high] = the (1∓level)/2 percentiles of the
    resampled metric values.

    ``metric_fn(probs, targets)`` must return something ``float()`` accepts (``nll`` works).  It
    receives the resampled rows as a zero-padded ``[N, K_max]`` array (ragged input included).  NaN
    resamples (e.g. AUROC on a resample with one class) are ignored; their :class:`MetricWarning` is
    suppressed.  If every resample is NaN, low and high are NaN.  Note that for a biased statistic such
    as ECE the percentile interval need not contain the point estimate.
    """
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, (int, np.integer)) or n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive integer; got {n_resamples!r}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie strictly between 0 and 1; got {level!r}")
    batch = _normalise(probs, targets)
    point = float(metric_fn(batch.probs, batch.targets))
    stats = np.empty(int(n_resamples), dtype=np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MetricWarning)
        for r, idx in enumerate(_resample_indices(batch.n, int(n_resamples), seed)):
            stats[r] = float(metric_fn(batch.probs[idx], batch.targets[idx]))
    if np.all(np.isnan(stats)):
        return Interval(point, math.nan, math.nan)
    alpha = 100.0 * (1.0 - level) / 2.0
    low, high = np.nanpercentile(stats, [alpha, 100.0 - alpha])
    return Interval(point, float(low), float(high))


def summarize(
    probs: Any,
    targets: Any,
    *,
    n_bins: int = 15,
    eps: float = 1e-6,
    n_resamples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, Any]:
    """All metrics with bootstrap intervals, keyed by their report-table names.

    Returns ``{"ACC", "AUC", "ECE", "NLL", "BS"}`` → :class:`Interval` ``(point, low, high)``, plus
    ``"n"`` (number of questions), ``"nll_clipped"`` (true-label probabilities clipped to ``eps``),
    ``"level"`` and ``"n_resamples"``.  All metrics use the same resamples (same ``seed``).  AUROC's
    point is NaN, with a :class:`MetricWarning`, when only one class is present.
    """
    batch = _normalise(probs, targets)
    fns: dict[str, Callable[[np.ndarray, np.ndarray], Any]] = {
        "ACC": accuracy,
        "AUC": auroc,
        "ECE": lambda p, t: ece(p, t, n_bins=n_bins),
        "NLL": lambda p, t: nll(p, t, eps=eps),
        "BS": brier,
    }
    out: dict[str, Any] = {"n": batch.n, "nll_clipped": nll(batch.probs, batch.targets, eps=eps).clipped}
    for name in METRIC_NAMES:
        out[name] = bootstrap_ci(
            fns[name], batch.probs, batch.targets, n_resamples=n_resamples, level=level, seed=seed
        )
    out["level"] = level
    out["n_resamples"] = int(n_resamples)
    return out
