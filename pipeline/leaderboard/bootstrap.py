"""The bootstrap's draws: seeded resamples of a task's test items as draw counts, and the percentile interval (each
statistic over many resamples at once is pipeline.evaluate.resampled's, which a kind declares). Resamples keep every stratum's size (the STS12-16 subsets, the cross-validation folds), drawing within each.

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


def interval(replicates: np.ndarray, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """The percentile interval of each row's replicates (the last axis)."""
    tail = (1 - level) / 2 * 100
    lo, hi = np.nanpercentile(replicates, [tail, 100 - tail], axis=-1)
    return lo, hi
