"""Figures of the martingale diagnostics (paper Figure 3): EMD‾ bars and EMD_k(b) burn-in curves, each with its
noise floor (`diagnostics.noise_floor`) when the rows carry one. Titles and labels from data are shortened
(`plots.figure_text`).

The marginal-drift figure is `beliefdrift.report.plots.plot_marginal_drift`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.ticker import MaxNLocator

from beliefdrift.diagnostics.emd import EMDRow
from beliefdrift.report.plots import LABEL_LENGTH, figure_text, plt, save_figure

DISTANCE_LABELS = {"l1": "L1", "kl": "KL", "tv": "TV"}


def plot_emd_bars(groups: Mapping[str, Sequence[EMDRow]], path: Path, title: str = "") -> list[Path]:
    """Grouped bars: one group per dataset (key), one bar per method, height EMD‾ with ±1 std over questions; a
    black tick with its 95% interval marks each bar's noise floor."""
    methods = list(dict.fromkeys(row.method for rows in groups.values() for row in rows))
    distance = next(row.distance for rows in groups.values() for row in rows)
    width = 0.8 / len(methods)
    fig, ax = plt.subplots(figsize=(1.2 + 1.4 * len(groups) + 0.3 * len(methods), 3.4))
    for i, method in enumerate(methods):
        x, height, err, floors = [], [], [], []
        for g, rows in enumerate(groups.values()):
            row = next((r for r in rows if r.method == method), None)
            if row is not None:
                x.append(g - 0.4 + (i + 0.5) * width)
                height.append(row.emd_bar)
                err.append(row.emd_bar_std)
                band = row.floor_band
                if band is not None:
                    # The mean of skewed replicates can lie just outside their 95% interval: bars never go negative.
                    floor, low, high = band
                    floors.append((x[-1], floor, max(0.0, floor - low), max(0.0, high - floor)))
        ax.bar(x, height, width, yerr=err, capsize=3, label=figure_text(method, LABEL_LENGTH))
        if floors:
            fx, level, below, above = zip(*floors, strict=True)
            ax.errorbar(fx, level, yerr=[below, above], fmt="_", color="k", ms=12, mew=2, capsize=2,
                        label="noise floor" if i == 0 else None)
    ax.set_xticks(range(len(groups)), [figure_text(group, LABEL_LENGTH) for group in groups])
    ax.set_ylabel(rf"$\overline{{\mathrm{{EMD}}}}$ ({DISTANCE_LABELS.get(distance, distance)})")
    ax.set_ylim(bottom=0)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(figure_text(title), fontsize=10)
    return save_figure(fig, path)


def plot_curves(
    curves: Sequence[tuple[str, Sequence[float], Sequence[float]]],
    xlabel: str,
    ylabel: str,
    path: Path,
    title: str = "",
    floors: Sequence[tuple[Sequence[float], Sequence[float], Sequence[float]] | None] = (),
) -> list[Path]:
    """(name, mean, std) curves against their index (integer ticks), each shaded ±1 std (clipped at 0: the curves
    are distances); `floors[i]` = (floor, low, high) draws curve i's noise floor dashed over its hatched 95%
    interval."""
    fig, ax = plt.subplots(figsize=(4.6, 3.4))
    for i, (name, means, stds) in enumerate(curves):
        mean, std = np.asarray(means), np.asarray(stds)
        steps = np.arange(len(mean))
        (line,) = ax.plot(steps, mean, marker="o", ms=3, lw=1.6, label=figure_text(name, LABEL_LENGTH))
        ax.fill_between(steps, np.clip(mean - std, 0, None), mean + std, alpha=0.15)
        floor = floors[i] if i < len(floors) else None
        if floor is not None:
            level, low, high = floor
            ax.plot(steps, level, ls="--", lw=1, color=line.get_color(),
                    label=figure_text(f"{name}: noise floor", LABEL_LENGTH))
            ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.1, hatch="///", lw=0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # n and b are counts: no tick at b = 0.5
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(figure_text(title), fontsize=10)
    return save_figure(fig, path)


def plot_emd_burn_in(rows: Sequence[EMDRow], k: int, path: Path, title: str = "") -> list[Path]:
    """EMD_k(b) against the burn-in b, one curve per method, shaded ±1 std over questions, over its noise floor."""
    distance = DISTANCE_LABELS.get(rows[0].distance, rows[0].distance)
    return plot_curves(
        [(row.method, row.burn_in, row.burn_in_std) for row in rows],
        "burn-in b (answers sampled before measuring)",
        rf"$\mathrm{{EMD}}_{{{k}}}(b)$ ({distance})",
        path,
        title,
        [row.burn_in_floor_band for row in rows],
    )
