"""Figures in the paper's style (matplotlib, written as PNG and PDF)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from beliefdrift.config.options import FIGURE_FORMATS  # noqa: E402
from beliefdrift.diagnostics.marginal import MarginalDrift  # noqa: E402
from beliefdrift.files import replacing  # noqa: E402

#: The most characters a figure's title (`TITLE_LENGTH`) or a panel title, legend entry or tick label
#: (`LABEL_LENGTH`) shows of text from data or settings (a question id, a dataset's path): matplotlib lays text out
#: in time that grows with its length (a title of 10^6 characters took minutes).
TITLE_LENGTH = 120
LABEL_LENGTH = 40


def figure_text(text: str, limit: int = TITLE_LENGTH) -> str:
    """`text` as a figure shows it: runs of whitespace and unprintable characters (NUL, controls) as one space, at most
    `limit` characters (cut with "…"), dollar signs literal (matplotlib reads text between two as math, and fails on
    what is not)."""
    shown = " ".join("".join(char if char.isprintable() else " " for char in text[: 4 * limit]).split())
    if len(shown) > limit or len(text) > 4 * limit:
        shown = shown[: limit - 1].rstrip() + "…"
    return shown.replace("$", r"\$")


def save_figure(
    fig: plt.Figure, path: Path, close: bool = True, formats: Sequence[str] = FIGURE_FORMATS
) -> list[Path]:
    """Write `path` in each of `formats` (default .png and .pdf), cropped to the drawn content; return the paths.
    The crop box is computed once for all files (`bbox_inches="tight"` lays the figure out again for each).
    `close=False` keeps `fig` open to be drawn on again. PDFs carry no creation date, so the same figure gives the
    same bytes. Each file is written atomically (`files.replacing`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    crop = fig.get_tightbbox().padded(plt.rcParams["savefig.pad_inches"])
    written = []
    for suffix in formats:
        target = path.with_suffix(f".{suffix}")
        with replacing(target) as temporary:  # atomically: a killed run never leaves half a figure
            fig.savefig(temporary, format=suffix, dpi=150, bbox_inches=crop,
                        metadata={"CreationDate": None} if suffix == "pdf" else None)
        written.append(target)
    if close:
        plt.close(fig)
    return written


def plot_marginal_drift(
    panels: Sequence[tuple[str, MarginalDrift]], labels: Sequence[str], path: Path, title: str = ""
) -> list[Path]:
    """One panel per prompt variant: mean θ_n per option against n, shaded ±1 std across paths (texts shortened:
    `figure_text`)."""
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), sharey=True, squeeze=False)
    for ax, (name, drift) in zip(axes[0], panels, strict=True):
        steps = range(drift.mean.shape[0])
        for k, label in enumerate(labels):
            mean, std = drift.mean[:, k].numpy(), drift.std[:, k].numpy()
            ax.plot(steps, mean, label=figure_text(label, LABEL_LENGTH), lw=1.6)
            ax.fill_between(steps, (mean - std).clip(0, 1), (mean + std).clip(0, 1), alpha=0.15)
        ax.set_title(figure_text(name, LABEL_LENGTH))
        ax.set_xlabel("n (answers generated)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(r"$\mathbb{E}[\theta_n]$")
    axes[0][-1].legend(title="option", fontsize=8, loc="upper right")
    if title:
        fig.suptitle(figure_text(title), fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.96 if title else 1))  # the suptitle above the panels' titles, never over them
    return save_figure(fig, path)
