"""The bootstrap's numerics: seeded resamples of a task's test items, and each statistic over many resamples at once.

A resample is held as draw counts (how often each item was drawn), so a statistic over B resamples is a few
B x n array operations, and exact: Spearman's correlation of a resample with repeated items gives tied values
their average rank, as scipy.stats.spearmanr on the resampled list would (an item drawn twice ties with itself).
Resamples keep every stratum's size (the STS12-16 subsets, the cross-validation folds), drawing within each.

Each task has its own random stream (SEED and the task's name), so adding a task, a column or a model changes
no other column's resamples, and every model scored on a task is resampled with the same indices (a paired
bootstrap for free). The resamples come in CHUNK-sized blocks to bound memory by CHUNK x n, not B x n.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import numpy as np

B = 1000
SEED = 0
CHUNK = 125
LEVEL = 0.95


def _rng(task: str, seed: int) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(task.encode())])


def chunks(task: str, sizes: list[int], b: int = B, seed: int = SEED) -> Iterator[list[np.ndarray]]:
    """The resamples of a task whose strata hold `sizes` items: blocks of index arrays, one (block, size) array
    per stratum, each row one resample's draws within that stratum."""
    rng = _rng(task, seed)
    for start in range(0, b, CHUNK):
        block = min(CHUNK, b - start)
        yield [rng.integers(0, n, size=(block, n)) for n in sizes]


def indices(task: str, sizes: list[int], b: int = B, seed: int = SEED) -> list[np.ndarray]:
    """All of a task's resamples at once, per stratum (b, size): what `chunks` yields, joined."""
    blocks = list(chunks(task, sizes, b, seed))
    return [np.concatenate([block[s] for block in blocks]) for s in range(len(sizes))]


def counts(idx: np.ndarray, n: int) -> np.ndarray:
    """(b, n) draw counts of (b, k) index arrays into n items."""
    rows = idx.shape[0]
    flat = (idx + n * np.arange(rows)[:, None]).ravel()
    return np.bincount(flat, minlength=rows * n).reshape(rows, n)


class Ranker:
    """Average ranks of one variable's values under draw counts: values sorted once, each resample's ranks from
    the running totals of its counts over the groups of equal values."""

    def __init__(self, values: np.ndarray):
        self.order = np.argsort(values, kind="stable")
        ordered = values[self.order]
        self.starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
        group = np.cumsum(np.r_[True, ordered[1:] != ordered[:-1]]) - 1
        self.group = np.empty(len(values), dtype=np.intp)
        self.group[self.order] = group  # each item's group of equal values

    def ranks(self, w: np.ndarray) -> np.ndarray:
        """(b, n) ranks: each item's average rank among the drawn items (1-based; any value for undrawn ones)."""
        totals = np.add.reduceat(w[:, self.order], self.starts, axis=1)
        before = np.cumsum(totals, axis=1) - totals
        return (before + (totals + 1) / 2)[:, self.group]


def spearman(x: Ranker, y: Ranker, w: np.ndarray) -> np.ndarray:
    """(b,) Spearman correlations of the resamples whose draw counts are the rows of `w`: the Pearson correlation
    of average ranks, each item weighted by its count. The ranks of N drawn items average (N + 1) / 2 exactly."""
    rx, ry = x.ranks(w), y.ranks(w)
    centre = (w.sum(axis=1, keepdims=True) + 1) / 2
    dx, dy = rx - centre, ry - centre
    cov = (w * dx * dy).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):  # a constant resample: nan, as scipy gives
        return cov / np.sqrt((w * dx * dx).sum(axis=1) * (w * dy * dy).sum(axis=1))


def accuracy(correct: np.ndarray, w: np.ndarray) -> np.ndarray:
    return (w @ correct.astype(np.float64)) / w.sum(axis=1)


def f1(prediction: np.ndarray, gold: np.ndarray, w: np.ndarray) -> np.ndarray:
    """F1 of class 1 (MRPC's paraphrase), as scikit-learn's f1_score: 0 where nothing is predicted or true."""
    tp = w @ ((prediction == 1) & (gold == 1)).astype(np.float64)
    wrong = w @ (prediction != gold).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.nan_to_num(2 * tp / (2 * tp + wrong))


def interval(replicates: np.ndarray, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """The percentile interval of each row's replicates (the last axis)."""
    tail = (1 - level) / 2 * 100
    lo, hi = np.nanpercentile(replicates, [tail, 100 - tail], axis=-1)
    return lo, hi
