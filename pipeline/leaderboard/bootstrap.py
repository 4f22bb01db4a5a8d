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
        new = np.r_[True, ordered[1:] != ordered[:-1]]
        self.starts = np.flatnonzero(new)
        self.ties = len(self.starts) < len(values)
        self.group = np.empty(len(values), dtype=np.intp)
        self.group[self.order] = np.cumsum(new) - 1  # each item's group of equal values

    def centred(self, w: np.ndarray) -> np.ndarray:
        """(n, b): each item's average rank among the drawn items of each resample (a column of `w`, the (n, b)
        draw counts) less the mean rank, (N + 1) / 2 for N drawn; any value for an undrawn item, whose weight is
        0. A group of equal values whose running total of counts reaches T with G of its own holds the ranks
        T - G + 1 .. T, which average T - (G - 1) / 2."""
        totals = w[self.order]
        if self.ties:
            totals = np.add.reduceat(totals, self.starts, axis=0)
        ranks = np.cumsum(totals, axis=0)
        ranks -= (totals - 1) / 2 + (w.sum(axis=0) + 1) / 2
        return ranks[self.group]


class Resample:
    """A block of resamples' (b, n) draw counts, held as (n, b) floats: items by rows, so that reordering items
    moves whole rows and running totals add whole rows. And what one variable's ranks make of them, computed
    once however many rows of the table share the variable (the gold scores of a task)."""

    def __init__(self, w: np.ndarray):
        self.w = np.ascontiguousarray(w.T, dtype=np.float64)
        self._ranked: dict[int, tuple[Ranker, np.ndarray, np.ndarray, np.ndarray]] = {}

    def ranked(self, r: Ranker) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(centred ranks d, weighted w * d, weighted sum of squares) of `r`'s variable."""
        if id(r) not in self._ranked:
            d = r.centred(self.w)
            wd = self.w * d
            self._ranked[id(r)] = (r, d, wd, np.einsum("ij,ij->j", wd, d))  # r kept: its id stays its own
        return self._ranked[id(r)][1:]


def spearman(x: Ranker, y: Ranker, w: Resample) -> np.ndarray:
    """(b,) Spearman correlations of the resamples whose draw counts are `w`'s rows: the Pearson correlation of
    average ranks, each item weighted by its count."""
    dx, _, vx = w.ranked(x)
    _, wdy, vy = w.ranked(y)
    with np.errstate(invalid="ignore", divide="ignore"):  # a constant resample: nan, as scipy gives
        return np.einsum("ij,ij->j", wdy, dx) / np.sqrt(vx * vy)


def accuracy(correct: np.ndarray, w: Resample) -> np.ndarray:
    return (correct.astype(np.float64) @ w.w) / w.w.sum(axis=0)


def f1(prediction: np.ndarray, gold: np.ndarray, w: Resample) -> np.ndarray:
    """F1 of class 1 (MRPC's paraphrase), as scikit-learn's f1_score: 0 where nothing is predicted or true."""
    tp = ((prediction == 1) & (gold == 1)).astype(np.float64) @ w.w
    wrong = (prediction != gold).astype(np.float64) @ w.w
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.nan_to_num(2 * tp / (2 * tp + wrong))


def average_precision(score: np.ndarray, gold: np.ndarray, w: Resample) -> np.ndarray:
    """(b,) average precision of ranking by `score` for the positives (gold 1), as scikit-learn's
    average_precision_score on each resample: the precision at each distinct score, from the top, weighted by the
    recall it adds. Tied scores are one threshold, so their counts are summed before the running totals."""
    order = np.argsort(-score, kind="stable")
    ordered = score[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    drawn = np.add.reduceat(w.w[order], starts, axis=0)
    hits = np.add.reduceat(w.w[order] * (gold[order] == 1)[:, None], starts, axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        precision = np.nan_to_num(np.cumsum(hits, axis=0) / np.cumsum(drawn, axis=0))
        return (hits * precision).sum(axis=0) / hits.sum(axis=0)  # nan for a resample without a positive


def _entropy(counts: np.ndarray, total: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        p = counts / total
        return -np.nansum(np.where(counts > 0, p * np.log(p), 0.0), axis=0)


def v_measure(assignment: np.ndarray, gold: np.ndarray, w: Resample) -> np.ndarray:
    """(b,) V-measure (beta 1) of the clusters `assignment` against the classes `gold` (both integer codes), as
    scikit-learn's v_measure_score on each resample: from the resample's contingency table of counts, homogeneity
    1 - H(C|K)/H(C), completeness 1 - H(K|C)/H(K) (1 where the entropy is 0), and their harmonic mean."""
    classes, clusters = int(gold.max()) + 1, int(assignment.max()) + 1
    cell = gold.astype(np.intp) * clusters + assignment.astype(np.intp)
    table = np.zeros((classes * clusters, w.w.shape[1]))
    np.add.at(table, cell, w.w)
    table = table.reshape(classes, clusters, -1)
    total = table.sum(axis=(0, 1))
    per_class, per_cluster = table.sum(axis=1), table.sum(axis=0)
    h_class, h_cluster = _entropy(per_class, total), _entropy(per_cluster, total)
    h_joint = _entropy(table.reshape(classes * clusters, -1), total)
    with np.errstate(invalid="ignore", divide="ignore"):
        homogeneity = np.where(h_class > 0, 1 - (h_joint - h_cluster) / h_class, 1.0)
        completeness = np.where(h_cluster > 0, 1 - (h_joint - h_class) / h_cluster, 1.0)
        both = homogeneity + completeness
        return np.where(both > 0, 2 * homogeneity * completeness / both, 0.0)


def interval(replicates: np.ndarray, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """The percentile interval of each row's replicates (the last axis)."""
    tail = (1 - level) / 2 * 100
    lo, hi = np.nanpercentile(replicates, [tail, 100 - tail], axis=-1)
    return lo, hi
