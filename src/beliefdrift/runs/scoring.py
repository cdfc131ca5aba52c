"""Scoring: each method's estimates over a run's questions → calibration metrics, with quality control.

Per method, questions where more than `max_fraction` of the paths have mean label mass below `path_mass` are
dropped and counted (the paper's "> 50% of paths off-format" rule); the others are scored by
`metrics.summarize` with bootstrap intervals over questions. Rows come in the paper's table order. Which
(question, method) quality control drops is `excluded_units`, the one answer every surface reads (tables, paired
tests, the explorer); `quality_report` counts them per method and words the run's warnings.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from beliefdrift.config.options import QualityControl
from beliefdrift.data.question import MCQuestion
from beliefdrift.engine.methods import Method, MethodResult
from beliefdrift.metrics.functional import METRIC_NAMES, Interval, MetricWarning, predictions, summarize
from beliefdrift.registry import canonical_methods, parse_method
from beliefdrift.runs.store import ResultRow, StoreError

log = logging.getLogger(__name__)

#: How an alternative estimator is named in a row title, e.g. "PPR + NoSEED (RB)".
ESTIMATOR_TITLES = {"q_star_rb": "RB", "theta_1": "θ̂_1"}
#: The metrics a method is scored on: the report's (`metrics.REPORT_METRICS`) and the debiased CE₂.
SCORE_METRICS = (*METRIC_NAMES, "CE2")


def result_row(position: int, question: MCQuestion, result: MethodResult, seconds: float) -> ResultRow:
    """A method's result on a question in storable form (direct query: valid_mass as a [1, 1] array)."""
    traj = result.trajectories

    def array(tensor: torch.Tensor) -> np.ndarray:
        return tensor.detach().cpu().numpy()

    return ResultRow(
        question_id=question.id,
        method=result.method.name,
        position=position,
        target=question.answer_index,
        num_labels=question.num_choices,
        probs=array(result.probs.double()),
        valid_mass=array(traj.valid_mass) if traj is not None else np.array([[result.valid_mass]]),
        answers=array(traj.answers) if traj is not None else None,
        seeds=array(traj.seeds) if traj is not None else None,
        thetas=array(traj.thetas) if traj is not None else None,
        seconds=seconds,
        alternatives={name: array(probs.double()) for name, probs in result.alternatives.items()},
    )


@dataclass(frozen=True)
class MethodScore:
    """Metrics of one method (or one of its alternative estimators) over the questions passing QC.

    `summary` is `metrics.summarize` on the kept questions (None when QC excluded all of them); `label_mass` is
    the mean `valid_mass` over all of the method's questions, excluded ones included.
    """

    method: Method
    estimator: str | None  # None: the method's own estimate; else an alternative's name (e.g. "q_star_rb")
    summary: dict[str, Any] | None
    total: int
    excluded: int
    probs: list[np.ndarray] = field(repr=False, default_factory=list)
    targets: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, dtype=np.int64))
    label_mass: float = math.nan

    @property
    def title(self) -> str:
        return self.method.title + (f" ({ESTIMATOR_TITLES.get(self.estimator, self.estimator)})"
                                    if self.estimator else "")

    @property
    def estimator_name(self) -> str:
        return self.estimator or self.method.spec.estimator

    @property
    def n(self) -> int:
        return self.total - self.excluded

    @property
    def confidence(self) -> float:
        """Mean max_a q(a) over the kept questions (NaN when there are none)."""
        return float(np.mean([p.max() for p in self.probs])) if self.probs else math.nan

    @property
    def predicted(self) -> str:
        """How often each option is the argmax over the kept questions, e.g. `C:2 E:98` (options A, B, …)."""
        counts = np.bincount([int(predictions(np.asarray(p)[None])[0]) for p in self.probs], minlength=1)
        return " ".join(f"{chr(ord('A') + i)}:{c}" for i, c in enumerate(counts) if c)

    def row(self) -> ScoreRow:
        """These scores as plain values (`ScoreRow`, a row of metrics.csv)."""
        metrics = {} if self.summary is None else {
            name: Interval(*(float(value) for value in self.summary[name])) for name in SCORE_METRICS}
        return ScoreRow(self.method.name, self.estimator_name, self.title, self.n, self.excluded, self.total, metrics,
                        None if self.summary is None else int(self.summary["nll_clipped"]), self.label_mass,
                        self.confidence, self.predicted)


@dataclass(frozen=True)
class ScoreRow:
    """One method's scores (or one of its alternative estimators'), as `Run.scores()` gives them and metrics.csv
    writes them.

    - `method`: its name (`ppr-seed5`); `estimator`: whose estimate is scored (`q_star`, the alternatives `q_star_rb`
      and `theta_1`, or the direct query's `theta`); `title`: the tables' row title (`PPR + SEED_5 (RB)`);
    - `n` questions scored of the method's `total`, after quality control `excluded` the others;
    - `metrics`: ACC, AUC, ECE, NLL, BS and CE2 (fractions, `SCORE_METRICS`) → `Interval(point, low, high)`, the
      95% bootstrap interval over questions (`metrics.summarize`: percentile; CE2's bias-centred); the bounds are NaN
      where the metric has no valid interval (`metrics.valid_only`: ECE always, CE2 below
      `metrics.functional.CE2_MIN_N` questions), the point NaN where the metric is undefined (AUC when one class is
      present); empty when quality control kept no question;
    - `nll_clipped`: kept questions whose true-label probability NLL clips (None when none was kept);
    - `label_mass`: the mean valid mass over all the method's questions; `confidence`: the mean max probability over
      the kept ones; `predicted`: how often each option is the argmax there (`C:2 E:98`).
    """

    method: str
    estimator: str
    title: str
    n: int
    excluded: int
    total: int
    metrics: dict[str, Interval]
    nll_clipped: int | None
    label_mass: float
    confidence: float
    predicted: str


def excluded_units(rows: Sequence[ResultRow], qc: QualityControl | None = None) -> set[tuple[str, str]]:
    """(question id, method) of each stored result that quality control `qc` drops from its method's scores: those
    its rule excludes (`QualityControl.excludes`) and, with `qc.common`, every method's result on a question that
    the rule excludes for any method."""
    qc = qc or QualityControl()
    own = {(row.question_id, row.method) for row in rows if qc.excludes(row)}
    if not qc.common:
        return own
    dropped = {question_id for question_id, _ in own}
    return {(row.question_id, row.method) for row in rows if row.question_id in dropped}


@dataclass(frozen=True)
class MethodExclusions:
    """What quality control did to one method's results: its questions, the ones it dropped and the method's mean
    label mass (over all its questions and paths, dropped ones included)."""

    method: str
    total: int
    excluded: tuple[str, ...]
    label_mass: float

    @property
    def title(self) -> str:
        return parse_method(self.method).title


@dataclass(frozen=True)
class QualityReport:
    """Quality control over a run (`quality_report`): per method in table order, what it dropped; `all_excluded` is
    the methods it left without a question (their rows in the tables are empty, `–`)."""

    qc: QualityControl
    methods: tuple[MethodExclusions, ...]

    @property
    def all_excluded(self) -> list[str]:
        return [m.method for m in self.methods if m.total and len(m.excluded) == m.total]

    def warnings(self) -> list[str]:
        """One line per method that lost questions; a louder one for a method that lost them all."""
        rule = self.qc.describe()
        lines = []
        for m in self.methods:
            if len(m.excluded) == m.total and m.total:
                lines.append(f"QUALITY CONTROL EXCLUDED ALL {m.total} QUESTIONS OF {m.title}: its rows in the tables "
                             f"are empty (–). On each, {rule}; its mean label mass is {m.label_mass:.2f}. A small "
                             "model puts little probability on the labels at the first answers: more answers (-N), "
                             "--template-ending paper, or a lower --qc-path-mass (docs/reading.md)")
            elif m.excluded:
                lines.append(f"quality control excluded {len(m.excluded)} of {m.total} questions of {m.title} "
                             f"({rule}): {', '.join(m.excluded)}")
        return lines

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: the thresholds, per method its counts and excluded question ids, and `all_excluded`."""
        return {"path_mass": self.qc.path_mass, "max_fraction": self.qc.max_fraction, "common": self.qc.common,
                "methods": {m.method: {"total": m.total, "excluded": len(m.excluded),
                                       "excluded_questions": list(m.excluded), "label_mass": m.label_mass}
                            for m in self.methods},
                "all_excluded": self.all_excluded}


def quality_report(rows: Sequence[ResultRow], qc: QualityControl | None = None) -> QualityReport:
    """What quality control `qc` drops from each method of `rows` (`excluded_units`), in table order."""
    qc = qc or QualityControl()
    excluded = excluded_units(rows, qc)
    by_method = _by_method(rows)
    return QualityReport(qc, tuple(
        MethodExclusions(name, len(group), tuple(r.question_id for r in group if (r.question_id, name) in excluded),
                         float(np.mean([r.valid_mass_mean for r in group])))
        for name, group in by_method.items()))


def warn_quality(rows: Sequence[ResultRow], qc: QualityControl | None = None) -> QualityReport:
    """Log `quality_report`'s warnings (one line per method that lost questions) and return the report."""
    report = quality_report(rows, qc)
    for line in report.warnings():
        log.warning(line)
    return report


def _by_method(rows: Sequence[ResultRow]) -> dict[str, list[ResultRow]]:
    """`rows` grouped by method, the methods in table order, each method's rows in question order (the store's
    order already: the sort is stable)."""
    groups: dict[str, list[ResultRow]] = {}
    for row in sorted(rows, key=lambda row: row.position):
        groups.setdefault(row.method, []).append(row)
    return {name: groups[name] for name in canonical_methods(list(groups))} if groups else {}


def score_rows(
    rows: Sequence[ResultRow], qc: QualityControl | None = None, n_resamples: int = 1000, seed: int = 0
) -> list[MethodScore]:
    """Per method in table order: its estimate, then its alternatives, scored on the questions that pass
    `qc` (`excluded_units`) with bootstrap intervals over questions. Undefined metrics (AUC with one class) are
    NaN."""
    excluded = excluded_units(rows, qc)
    scores = []
    for name, group in _by_method(rows).items():
        kept = [row for row in group if (row.question_id, row.method) not in excluded]
        label_mass = float(np.mean([row.valid_mass_mean for row in group]))
        estimators = sorted({alt for row in group for alt in row.alternatives})
        for estimator in [None, *estimators]:
            probs = [row.probs if estimator is None else row.alternatives[estimator] for row in kept]
            targets = np.array([row.target for row in kept], dtype=np.int64)
            summary = None
            if kept:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", MetricWarning)
                    try:
                        summary = summarize(probs, targets, n_resamples=n_resamples, seed=seed)
                    except ValueError as err:
                        raise corrupt_row(kept, probs, estimator, err) from err
            scores.append(MethodScore(parse_method(name), estimator, summary, len(group), len(group) - len(kept),
                                      probs, targets, label_mass))
    return scores


def corrupt_row(
    rows: Sequence[ResultRow], probs: Sequence[np.ndarray], estimator: str | None, err: ValueError
) -> StoreError:
    """A StoreError naming the first row whose estimate is not a probability vector over its options (`err`, what
    the metrics said, when each row is one on its own)."""
    def valid(row: ResultRow, p: np.ndarray) -> bool:
        try:
            summarize([p], [row.target], n_resamples=1)
        except ValueError:
            return False
        return True

    bad = next(((row, p) for row, p in zip(rows, probs, strict=True) if not valid(row, p)), None)
    if bad is None:
        return StoreError(f"the stored results of method {rows[0].method} cannot be scored: {err}")
    row, p = bad
    return StoreError(f"the stored {estimator or 'estimate'} of question {row.question_id!r}, method {row.method} is "
                      f"not a probability vector over its {row.num_labels} options (target {row.target}): {p.tolist()}")


def score_results(
    results: Mapping[str, Sequence[MethodResult]],
    questions: Sequence[MCQuestion],
    qc: QualityControl | None = None,
    n_resamples: int = 1000,
) -> list[MethodScore]:
    """`score_rows` for in-memory results: {method name: one MethodResult per question, in order}."""
    rows = [result_row(i, q, r, math.nan) for per_question in results.values()
            for i, (q, r) in enumerate(zip(questions, per_question, strict=True))]
    return score_rows(rows, qc, n_resamples)
