"""The leaderboard's picture: each model's score and interval per task, against the reference row."""

from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd

from pipeline.leaderboard.columns import DATA, data_sections, rows_over_seeds
from pipeline.leaderboard.intervals import DIFF_LO, HI, LO, SIGNIFICANT
from pipeline.readers.names import AVG_SIMCSE, STS_AVERAGES, is_pair_column

# The picture's geometry, in inches at DPI: one panel per task, PANELS_PER_ROW to a row of panels, each panel as tall
# as its models need; fonts in points, legible when the PNG is shown at its own size.
PANELS_PER_ROW, PANEL_WIDTH, ROW_HEIGHT, PANEL_MARGIN, DPI = 5, 2.2, 0.26, 0.9, 120
TICK_FONT, TITLE_FONT, CAPTION_FONT = 9, 9.5, 9


def plot(table: pd.DataFrame, title: str, path: str, compare_to: str | None = None) -> None:
    """The leaderboard's picture (figure()) as a PNG at `path`."""
    import matplotlib.pyplot as plt

    fig = figure(table, title, compare_to)
    fig.savefig(path, format="png", dpi=DPI, bbox_inches="tight", pad_inches=0.1)
    plt.close(fig)


def figure(table: pd.DataFrame, title: str, compare_to: str | None = None):
    """One panel per task of SimCSE's seven-task average (else per STS pair file), PANELS_PER_ROW to a row: each
    model's score as a dot with its interval as whiskers, in the table's order (best on top); the reference row's
    score as a dashed line, and the dots that differ significantly from it filled (higher) or hollow (lower). The
    figure grows with the tasks and the models, and its titles and caption wrap to its width, so that nothing is
    cut or overlaps from one task to thirty."""
    import matplotlib

    matplotlib.use("Agg")  # no display on servers and workers
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    columns = [c for c in STS_AVERAGES[AVG_SIMCSE] if c in table.columns] or [
        c for c in table.columns if is_pair_column(c)
    ]
    rows = table.iloc[::-1].reset_index(drop=True)
    panels = max(1, len(columns))
    down = -(-panels // PANELS_PER_ROW)
    across = -(-panels // down)  # rows of panels as even as they go: SimCSE's seven as 4 and 3, not 5 and 2
    labels = rows["model"].astype(str)
    if len(data_sections(rows)) > 1:  # a model scored on two data is on two rows
        labels += " (" + rows[DATA].astype(str).str[:8] + ")"
    label_width = 0.3 + 0.075 * max((len(s) for s in labels), default=0)  # about a character's width at TICK_FONT
    width = max(4.5, label_width + PANEL_WIDTH * across)
    height = 1.4 + down * (PANEL_MARGIN + ROW_HEIGHT * max(1, len(rows)))
    fig, axes = plt.subplots(
        down, across, sharey=True, squeeze=False, figsize=(width, height), dpi=DPI, layout="constrained"
    )
    for ax in axes.flat[panels:]:  # the last row's empty places
        fig.delaxes(ax)
    for ax, column in zip(axes.flat, columns):
        _panel(ax, rows, column, compare_to)
        ax.set_title(textwrap.fill(column, 26), fontsize=TITLE_FONT)
        ax.xaxis.set_major_locator(MaxNLocator(nbins=3))  # four numbers at most: they never touch in a panel
        ax.tick_params(labelsize=TICK_FONT)
        ax.grid(axis="x", alpha=0.3)
    axes[0][0].set_yticks(np.arange(len(rows)), labels)
    axes[0][0].set_ylim(-0.6, len(rows) - 0.4)
    note = (
        ""
        if compare_to is None
        else (f"; dashed: {compare_to}, green: significantly higher, hollow: significantly lower")
    )
    whiskers = (
        ""
        if not any(f"{c} {LO}" in rows.columns for c in columns)
        else ", 95% interval (t over seeds where a row has several, else bootstrap)"
        if rows_over_seeds(rows)
        else ", 95% bootstrap interval"
    )
    characters = int(width * 72 / (0.55 * CAPTION_FONT))  # a line's worth at the caption's size
    fig.supxlabel(
        textwrap.fill(f"Spearman x 100 of cosine similarity on test{whiskers}{note}", characters), fontsize=CAPTION_FONT
    )
    fig.suptitle(textwrap.fill(title, int(width * 72 / (0.6 * 12))), fontsize=12)
    return fig


def _panel(ax, rows: pd.DataFrame, column: str, compare_to: str | None) -> None:
    y, x = np.arange(len(rows)), rows[column].to_numpy(dtype=float)
    if f"{column} {LO}" in rows.columns:
        lo, hi = rows[f"{column} {LO}"].to_numpy(dtype=float), rows[f"{column} {HI}"].to_numpy(dtype=float)
        ax.errorbar(x, y, xerr=[x - lo, hi - x], fmt="none", ecolor="0.4", capsize=2, lw=1)
    ax.plot(x, y, "o", color="C0", ms=5)
    if compare_to is not None and compare_to in set(rows["model"]):
        _reference_lines(ax, rows, x, compare_to)
        flags = rows.get(f"{column} {SIGNIFICANT}")
        if flags is not None:
            marked = flags.fillna(False).astype(bool).to_numpy()
            lower = marked & (rows[f"{column} {DIFF_LO}"].to_numpy(dtype=float) < 0)
            ax.plot(x[marked & ~lower], y[marked & ~lower], "o", color="C2", ms=7)
            ax.plot(x[lower], y[lower], "o", mfc="white", mec="C3", ms=7)


def _reference_lines(ax, rows: pd.DataFrame, x: np.ndarray, compare_to: str) -> None:
    """The reference row's score as a dashed line, spanning only the rows scored on its data when the table has
    several: a row on other data is not compared with it."""
    sections = data_sections(rows)
    for index in sections:
        at = [i for i in index if rows["model"].iat[i] == compare_to]
        if at and len(sections) == 1:
            ax.axvline(x[at[0]], color="C3", ls="--", lw=1)
        elif at:
            ax.vlines(x[at[0]], index.min() - 0.5, index.max() + 0.5, color="C3", ls="--", lw=1)
