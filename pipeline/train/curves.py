"""Training curves of a train run: TensorBoard event files and one PNG beside them.

`tensorboard --logdir <artifacts>/train` shows every run's curves, each run under its fingerprint;
`curves.png` shows the same quantities to whoever does not run TensorBoard.
"""

from __future__ import annotations

import math
import shutil
import sys
import time
from types import ModuleType

TENSORBOARD_DIR, PNG = "tensorboard", "curves.png"
# TensorBoard tag -> the train_step metrics key it plots; the tags' prefixes group the panels in TensorBoard.
TAGS = {
    "loss/total": "loss",
    "loss/contrastive": "contrastive_loss",
    "loss/mlm": "mlm_loss",
    "optim/lr": "lr",
    "optim/grad_norm": "grad_norm",
    "data/wait_seconds": "data_seconds",
    "dev/spearman": "dev_spearman",
    "dev/score": "dev_score",
    "heldout/loss": "heldout_loss",
    "heldout/alignment": "heldout_alignment",
    "heldout/uniformity": "heldout_uniformity",
}


def series(rows: list[dict]) -> dict[str, tuple[list[int], list[float]]]:
    """tag -> (steps, values) for every tag some row has a value for; a missing or null value (a step without
    evaluation, an objective without MLM) is left out, never drawn as zero."""
    out = {}
    for tag, key in TAGS.items():
        points = [(int(r["step"]), float(r[key])) for r in rows if r.get(key) is not None]
        if points:
            out[tag] = ([s for s, _ in points], [v for _, v in points])
    return out


def write_curves(rows: list[dict], out_dir: str) -> None:
    """Write `<out_dir>/tensorboard/` (one event file, replacing any earlier one) and `<out_dir>/curves.png`
    from train's per-step metrics rows; `out_dir` is local."""
    curves = series(rows)
    _events(rows, curves, f"{out_dir}/{TENSORBOARD_DIR}")
    _plot(curves, f"{out_dir}/{PNG}")


def _events(rows: list[dict], curves: dict, log_dir: str) -> None:
    # TensorBoard reads and writes through TensorFlow's file API when TensorFlow is importable (the `use` extra
    # installs it), and importing it costs seconds and puts TensorFlow's C++ start-up lines on the user's
    # terminal. A module named tensorboard.compat.notf is TensorBoard's own switch to its TF-free stub, which it
    # uses anyway wherever TensorFlow is absent; the event files are the same.
    sys.modules.setdefault("tensorboard.compat.notf", ModuleType("tensorboard.compat.notf"))
    from torch.utils.tensorboard import SummaryWriter  # imports tensorboard (slow): only when the curves are written

    shutil.rmtree(log_dir, ignore_errors=True)  # a second write must not add a second copy of every point
    # Wall times from the run's own clock ("seconds" since training started), so TensorBoard's relative
    # time axis shows training time, not when this file was written.
    elapsed = {int(r["step"]): r.get("seconds") for r in rows}
    start = time.time() - max((s for s in elapsed.values() if s is not None), default=0.0)
    with SummaryWriter(log_dir=log_dir) as writer:
        for tag, (steps, values) in curves.items():
            for step, value in zip(steps, values):
                seconds = elapsed.get(step)
                writer.add_scalar(tag, value, step, walltime=None if seconds is None else start + seconds)


def _plot(curves: dict, path: str) -> None:
    import matplotlib  # a heavy import: only when the curves are drawn

    matplotlib.use("Agg")  # no display on servers and workers
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    cols = 2
    nrows = max(1, math.ceil(len(curves) / cols))
    fig, axes = plt.subplots(nrows, cols, figsize=(10, 2.8 * nrows), squeeze=False)
    for ax, (tag, (steps, values)) in zip(axes.flat, curves.items()):
        # A dev score exists at a few steps only: markers, so that a single evaluation still shows.
        ax.plot(steps, values, marker="o" if len(steps) < 30 else None, markersize=3)
        ax.set_title(tag)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if tag == "optim/lr":
            ax.ticklabel_format(axis="y", style="sci", scilimits=(0, 0))
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(curves) :]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)
