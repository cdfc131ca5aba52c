"""Figures of the martingale diagnostics (paper Figure 3): EMD‾ bars and EMD_k(b) burn-in curves.

The marginal-drift figure is `beliefdrift.report.plots.plot_marginal_drift`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from beliefdrift.diagnostics.emd import EMDRow
from beliefdrift.report.plots import plt, save_figure

DISTANCE_LABELS = {"l1": "L1", "kl": "KL", "tv": "TV"}


def plot_emd_bars(groups: Mapping[str, Sequence[EMDRow]], path: Path, title: str = "") -> list[Path]:
    """Grouped bars: one group per dataset (key), one bar per method, height EMD‾ with ±1 std over questions."""
    methods = list(dict.fromkeys(row.method for rows in groups.values() for row in rows))
    distance = next(row.distance for rows in groups.values() for row in rows)
    width = 0.8 / len(methods)
    fig, ax = plt.subplots(figsize=(1.2 + 1.4 * len(groups) + 0.3 * len(methods), 3.4))
    for i, method in enumerate(methods):
        x, height, err = [], [], []
        for g, rows in enumerate(groups.values()):
            row = next((r for r in rows if r.method == method), None)
            if row is not None:
                x.append(g - 0.4 + (i + 0.5) * width)
                height.append(row.emd_bar)
                err.append(row.emd_bar_std)
        ax.bar(x, height, width, yerr=err, capsize=3, label=method)
    ax.set_xticks(range(len(groups)), list(groups))
    ax.set_ylabel(rf"$\overline{{\mathrm{{EMD}}}}$ ({DISTANCE_LABELS.get(distance, distance)})")
    ax.set_ylim(bottom=0)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    return save_figure(fig, path)


def plot_curves(
    curves: Sequence[tuple[str, Sequence[float], Sequence[float]]],
    xlabel: str,
    ylabel: str,
    path: Path,
    title: str = "",
) -> list[Path]:
    """(name, mean, std) curves against their index, each shaded ±1 std (clipped at 0: the curves are distances)."""
    fig, ax = plt.subplots(figsize=(4.6, 3.4))
    for name, mean, std in curves:
        mean, std = np.asarray(mean), np.asarray(std)
        steps = np.arange(len(mean))
        ax.plot(steps, mean, marker="o", ms=3, lw=1.6, label=name)
        ax.fill_between(steps, np.clip(mean - std, 0, None), mean + std, alpha=0.15)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    return save_figure(fig, path)


def plot_emd_burn_in(rows: Sequence[EMDRow], k: int, path: Path, title: str = "") -> list[Path]:
    """EMD_k(b) against the burn-in b, one curve per method, shaded ±1 std over questions."""
    distance = DISTANCE_LABELS.get(rows[0].distance, rows[0].distance)
    return plot_curves(
        [(row.method, row.burn_in, row.burn_in_std) for row in rows],
        "burn-in b (answers sampled before measuring)",
        rf"$\mathrm{{EMD}}_{{{k}}}(b)$ ({distance})",
        path,
        title,
    )
