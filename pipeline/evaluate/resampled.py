"""What a statistic of a task's test items is on many bootstrap resamples at once, and the statistics the kinds
declare (pipeline.evaluate.kind.Kind.statistic, Column.statistic), which the leaderboard's bootstrap
(pipeline.leaderboard.intervals) calls on one row's items of one column.

A resample is held as draw counts (how often each item was drawn), so a statistic over B resamples is a few
B x n array operations, and exact: Spearman's correlation of a resample with repeated items gives tied values
their average rank, as scipy.stats.spearmanr on the resampled list would (an item drawn twice ties with itself).

A statistic is a function (Sample, strata, pooled) -> (b,) values: `strata` the block's draw counts within each
stratum of the sample (its STS12-16 subsets, its folds, its clustering runs), `pooled` the same over all its items.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pipeline.evaluate.items import run_group


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


class Sample:
    """One row's test items of one task under one protocol, by stratum, as a statistic reads them: predictions and
    golds per stratum and pooled, and a Ranker per distinct array of values (`ranker`), shared by the rows whose
    items share it (a task's gold scores)."""

    def __init__(self, names, predictions, golds, rankers: dict[bytes, Ranker]):
        self.names, self.predictions, self.golds, self._rankers = tuple(names), predictions, golds, rankers
        self.prediction, self.gold = np.concatenate(predictions), np.concatenate(golds)

    def ranker(self, values: np.ndarray) -> Ranker:
        key = values.tobytes()
        if key not in self._rankers:
            self._rankers[key] = Ranker(values)
        return self._rankers[key]


Statistic = Callable[[Sample, list[Resample], Resample], np.ndarray]


def mean(s: Sample, strata: list[Resample], pooled: Resample) -> np.ndarray:
    """The mean of the items' values (per-query nDCG@10 or MAP)."""
    return accuracy(s.prediction, pooled)


def pooled_spearman(s: Sample, strata: list[Resample], pooled: Resample) -> np.ndarray:
    """One Spearman correlation over all the items."""
    return spearman(s.ranker(s.prediction), s.ranker(s.gold), pooled)


def mean_spearman(s: Sample, strata: list[Resample], pooled: Resample) -> np.ndarray:
    """The mean over the strata of each one's Spearman correlation (STS12-16 as SentEval averages its subsets)."""
    return np.mean([spearman(s.ranker(p), s.ranker(g), w) for p, g, w in zip(s.predictions, s.golds, strata)], axis=0)


def mean_accuracy(s: Sample, strata: list[Resample], pooled: Resample) -> np.ndarray:
    """The mean over the strata (the cross-validation folds) of each one's accuracy."""
    return np.mean([accuracy(p == g, w) for p, g, w in zip(s.predictions, s.golds, strata)], axis=0)


def pooled_f1(s: Sample, strata: list[Resample], pooled: Resample) -> np.ndarray:
    return f1(s.prediction, s.gold, pooled)


def accuracy_f1(s: Sample, strata: list[Resample], pooled: Resample) -> np.ndarray:
    """MRPC's two together: the mean of its accuracy and F1."""
    return (mean_accuracy(s, strata, pooled) + pooled_f1(s, strata, pooled)) / 2


def pooled_average_precision(s: Sample, strata: list[Resample], pooled: Resample) -> np.ndarray:
    """Average precision of the scored pairs (prediction the score, gold the 0/1 label)."""
    return average_precision(s.prediction, s.gold, pooled)


def mean_v_measure(s: Sample, strata: list[Resample], pooled: Resample) -> np.ndarray:
    """The mean over sets of each set's mean over its runs, every run of a set on its first run's draws."""
    draws, per_set = {}, {}
    for name, p, g, w in zip(s.names, s.predictions, s.golds, strata):
        group = run_group(name)
        per_set.setdefault(group, []).append(v_measure(p, g, draws.setdefault(group, w)))
    return np.mean([np.mean(runs, axis=0) for runs in per_set.values()], axis=0)
