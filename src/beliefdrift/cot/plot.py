"""The paper's Figure (Appendix F): cos(h̄_n, h̄_{n+τ}) against n, mean ± std over questions, with and
without reasoning seeding."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
from matplotlib.ticker import MaxNLocator

from beliefdrift.cot.drift import CurveStats
from beliefdrift.report.plots import LABEL_LENGTH, figure_text, plt, save_figure


def plot_centroid_drift(curves: Mapping[str, CurveStats], tau: int, path: Path, title: str = "") -> list[Path]:
    """One line per condition (label → stats over questions), shaded ±1 std; written as PNG and PDF (texts
    shortened: `figure_text`)."""
    fig, ax = plt.subplots(figsize=(5.6, 3.4))
    for label, stats in curves.items():
        mean, std = np.array(stats.mean, dtype=float), np.array(stats.std, dtype=float)
        steps = np.arange(1, len(mean) + 1)
        ax.plot(steps, mean, lw=1.8, marker="o", ms=3, label=figure_text(label, LABEL_LENGTH))
        ax.fill_between(steps, mean - std, mean + std, alpha=0.2)
    ax.set_xlabel("n (generated thought–answer pairs)")
    ax.set_ylabel(rf"$\cos(\bar h_n, \bar h_{{n+{tau}}})$")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    if title:
        ax.set_title(figure_text(title), fontsize=10)
    return save_figure(fig, path)
