"""leaderboard.png is legible from one task to thirty: the picture grows with its tasks within sane bounds, and no
text (titles, task names, model names, numbers, the caption) is cut at the figure's edge or lies on another."""

from __future__ import annotations

import itertools
import re
import struct

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from pipeline.leaderboard.figure import figure, plot
from pipeline.leaderboard.intervals import DIFF_LO, HI, LO, SIGNIFICANT

MODELS = ["simcse-sup (seed 1)", "declutr-small-from-roberta", "untrained", "untrained [cls]"]
TITLE = "Leaderboard: several objectives trained on the user's own corpus, scored on their pair files"


def board(columns: int) -> pd.DataFrame:
    """A hand-made table of STS pair file columns, one name in three long, with intervals and marks."""
    rng = np.random.default_rng(columns)
    data = {"model": MODELS}
    for i in range(columns):
        name = f"{'biomedical-sentence-similarity-benchmark' if i % 3 == 0 else 'pairs'}-{i} cosine"
        score = rng.uniform(20, 80, len(MODELS))
        data |= {
            name: score,
            f"{name} {LO}": score - 2.5,
            f"{name} {HI}": score + 2.5,
            f"{name} {SIGNIFICANT}": [True, False, False, True],
            f"{name} {DIFF_LO}": [1.0, -1.0, -1.0, -2.0],
        }
    return pd.DataFrame(data)


def png_size(path) -> tuple[int, int]:
    with open(path, "rb") as f:
        header = f.read(24)
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", header[16:24])


def texts(fig) -> list:
    """Every text the figure draws: its title and caption, each panel's title and the tick labels inside its view."""
    shown = [t for t in fig.texts if t.get_text()]
    for ax in fig.axes:
        shown += [ax.title]
        for labels, (lo, hi), at in (
            (ax.get_xticklabels(), ax.get_xlim(), 0),
            (ax.get_yticklabels(), ax.get_ylim(), 1),
        ):
            shown += [
                t
                for t in labels
                if t.get_visible() and t.get_text() and min(lo, hi) <= t.get_position()[at] <= max(lo, hi)
            ]
    return shown


@pytest.mark.parametrize("columns", [1, 5, 30])
def test_no_text_is_cut_or_overlaps_another(columns):
    fig = figure(board(columns), TITLE, compare_to="untrained")
    try:
        fig.canvas.draw()  # the constrained layout is made at drawing
        renderer = fig.canvas.get_renderer()
        shown = texts(fig)
        tasks = [c for c in board(columns).columns if c.endswith(" cosine")]
        assert sorted(re.sub(r"\s", "", ax.get_title()) for ax in fig.axes) == sorted(
            re.sub(r"\s", "", c) for c in tasks
        )  # a panel for each task, titled by its whole name
        extents = [(t.get_text(), t.get_window_extent(renderer)) for t in shown]
        bounds = fig.bbox
        for text, box in extents:
            assert bounds.x0 <= box.x0 and box.x1 <= bounds.x1 and bounds.y0 <= box.y0 and box.y1 <= bounds.y1, (
                f"{text!r} at {box.bounds} leaves the figure {bounds.bounds}"
            )
        for (a, box_a), (b, box_b) in itertools.combinations(extents, 2):
            assert not box_a.overlaps(box_b), f"{a!r} overlaps {b!r}"
        for ax in fig.axes:  # each panel's scale can be read
            assert sum(t in shown for t in ax.get_xticklabels()) >= 2
        model_labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
        assert set(MODELS) <= set(model_labels)
        assert min(t.get_fontsize() for t in shown) >= 8  # legible at the PNG's own size
    finally:
        plt.close(fig)


def test_the_picture_grows_with_its_tasks_within_bounds(tmp_path):
    sizes = {}
    for columns in (1, 5, 30):
        plot(board(columns), TITLE, str(tmp_path / f"{columns}.png"), compare_to="untrained")
        sizes[columns] = png_size(tmp_path / f"{columns}.png")
    (w1, h1), (w5, h5), (w30, h30) = sizes[1], sizes[5], sizes[30]
    assert w1 < w5 <= w30 and h1 <= h5 < h30, sizes  # five side by side, thirty in rows of them
    assert w1 >= 400 and h1 >= 300, sizes  # was 340 x 240, the caption cut
    assert all(w <= 2400 and h <= 2400 for w, h in sizes.values()), sizes
