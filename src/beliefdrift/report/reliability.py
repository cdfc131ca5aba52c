"""Reliability diagrams: per confidence bin ((b−1)/B, b/B], accuracy acc_b against mean confidence conf_b.

A calibrated method's bars follow the diagonal; ECE = Σ_b (n_b/N) |acc_b − conf_b| is the count-weighted gap.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt

from beliefdrift.metrics import ece, reliability_bins
from beliefdrift.report.plots import save_figure
from beliefdrift.report.tables import RunScores
from beliefdrift.scoring import MethodScore


def plot_reliability(score: MethodScore, path: Path, title: str = "", n_bins: int = 15) -> list[Path]:
    """Accuracy per confidence bin (bars), the gap to each bin's mean confidence, and bin counts below."""
    bins = reliability_bins(score.probs, score.targets, n_bins=n_bins)
    centers = (bins.edges[:-1] + bins.edges[1:]) / 2
    width = 1.0 / bins.n_bins
    filled = bins.count > 0
    fig, (ax, counts) = plt.subplots(2, 1, figsize=(4.2, 4.8), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    ax.bar(centers[filled], bins.accuracy[filled], width=width, edgecolor="black", lw=0.6, label="accuracy")
    ax.bar(centers[filled], bins.confidence[filled] - bins.accuracy[filled], bottom=bins.accuracy[filled],
           width=width, color="tab:red", alpha=0.3, edgecolor="tab:red", lw=0.6, label="gap to confidence")
    ax.plot([0, 1], [0, 1], "k--", lw=1)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_ylabel("accuracy")
    ax.set_title(title or score.title, fontsize=10)
    error = ece(score.probs, score.targets, n_bins=n_bins)
    ax.legend(loc="upper left", fontsize=8, title=f"ECE {error:.4f}, n = {bins.n}", title_fontsize=8)
    counts.bar(centers, bins.count, width=width, color="gray", edgecolor="black", lw=0.6)
    counts.set_xlabel("confidence (max probability)")
    counts.set_ylabel("questions")
    return save_figure(fig, path)


def reliability_figures(runs: Sequence[RunScores], out: Path) -> list[Path]:
    """One diagram per run and method with scored questions: `<out>/reliability-<run label>-<method>.png`."""
    written = []
    for run in runs:
        slug = "".join(c if c.isalnum() or c in "-_" else "-" for c in run.label.lower())
        for score in run.main().values():
            if score.n > 0:
                path = out / f"reliability-{slug}-{score.method.name}.png"
                written += plot_reliability(score, path, title=f"{run.label}: {score.title}")
    return written
