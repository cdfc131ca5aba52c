"""Reliability diagrams: per confidence bin ((b−1)/B, b/B], accuracy acc_b against mean confidence conf_b.

A calibrated method's bars follow the diagonal; ECE = Σ_b (n_b/N) |acc_b − conf_b| is the count-weighted gap.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
from matplotlib.collections import PolyCollection
from numpy.typing import ArrayLike

from beliefdrift.files import safe_name
from beliefdrift.metrics.functional import ece, reliability_bins
from beliefdrift.report.plots import figure_text, plt, save_figure
from beliefdrift.report.tables import RunScores
from beliefdrift.runs.scoring import MethodScore


def bars(centers: np.ndarray, width: float, heights: np.ndarray, bottoms: np.ndarray | float = 0.0,
         **style: Any) -> PolyCollection:
    """Bars as one collection (`style`: its matplotlib properties), their baseline sticky like `Axes.bar`'s (which
    adds a patch and updates the data limits per bar: most of a diagram's drawing time)."""
    left, right = centers - width / 2, centers + width / 2
    bottoms = np.broadcast_to(bottoms, np.shape(heights))
    tops = bottoms + heights
    corners = [(left, bottoms), (right, bottoms), (right, tops), (left, tops)]
    # one [bars, 4, 2] array, which `PolyCollection.set_verts` takes on its fast path (its stub says a sequence)
    polygons = cast(Sequence[ArrayLike], np.stack([np.stack(corner, axis=-1) for corner in corners], axis=1))
    collection = PolyCollection(polygons, **style)
    collection.sticky_edges.y.append(0.0)
    return collection


class ReliabilityFigure:
    """One figure for every diagram: the axes, the diagonal and the labels are built once, and each diagram adds
    its bars, title and legend, is saved, and removes them again (new axes and ticks per diagram cost about as much
    as drawing it)."""

    def __init__(self) -> None:
        self.fig = plt.figure(figsize=(4.2, 4.8))
        self.ax, self.counts = self.fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1]})
        self.ax.plot([0, 1], [0, 1], "k--", lw=1)
        self.ax.set_xlim(0, 1)
        self.ax.set_ylim(0, 1)
        self.ax.set_ylabel("accuracy")
        self.counts.set_xlabel("confidence (max probability)")
        self.counts.set_ylabel("questions")

    def save(
        self, score: MethodScore, path: Path, title: str = "", n_bins: int = 15, formats: Sequence[str] = ("png",)
    ) -> list[Path]:
        """Accuracy per confidence bin (bars), the gap to each bin's mean confidence, and bin counts below."""
        bins = reliability_bins(score.probs, score.targets, n_bins=n_bins)
        centers = (bins.edges[:-1] + bins.edges[1:]) / 2
        width = 1.0 / bins.n_bins
        filled = bins.count > 0
        accuracy, confidence = bins.accuracy[filled], bins.confidence[filled]
        drawn = [
            self.ax.add_collection(bars(centers[filled], width, accuracy, edgecolor="black", linewidths=0.6,
                                        label="accuracy"), autolim=False),
            self.ax.add_collection(bars(centers[filled], width, confidence - accuracy, accuracy, facecolor="tab:red",
                                        alpha=0.3, edgecolor="tab:red", linewidths=0.6, label="gap to confidence"),
                                   autolim=False),
            self.counts.add_collection(bars(centers, width, bins.count, facecolor="gray", edgecolor="black",
                                            linewidths=0.6)),
        ]
        self.counts.relim()
        self.counts.autoscale_view()
        self.ax.set_title(figure_text(title or score.title), fontsize=10)
        error = ece(score.probs, score.targets, n_bins=n_bins)
        drawn.append(self.ax.legend(loc="upper left", fontsize=8, title=f"ECE {error:.4f}, n = {bins.n}",
                                    title_fontsize=8))
        try:
            return save_figure(self.fig, path, close=False, formats=formats)
        finally:
            for artist in drawn:
                artist.remove()

    def close(self) -> None:
        plt.close(self.fig)


def reliability_figures(runs: Sequence[RunScores], out: Path, formats: Sequence[str] = ("png",)) -> list[Path]:
    """One diagram per run and method with scored questions: `<out>/reliability-<run label>-<method>.png` (and
    the other `formats`: a PDF adds nearly the time of its PNG); the label names a dataset, possibly a file path, so
    it is written lowercase through `safe_name` ("csqa", "ai2-arc-c-<hash>")."""
    figure, written = ReliabilityFigure(), []
    try:
        for run in runs:
            for score in run.main().values():
                if score.n > 0:
                    path = out / f"reliability-{safe_name(run.label.lower())}-{safe_name(score.method.name)}.png"
                    written += figure.save(score, path, title=f"{run.label}: {score.title}", formats=formats)
    finally:
        figure.close()
    return written
