"""Bootstrap intervals on a leaderboard's score columns, and each row's paired difference to a reference row.

Every score column is recomputed from the models' test items (pipeline.evaluate.items) on B resamples of
those items (pipeline.leaderboard.bootstrap): STS12-16 senteval as the mean of the per-subset Spearman, simcse
as one Spearman over the subsets, STS-B/SICK-R and the pair files as one Spearman, transfer accuracies as the
mean over the cross-validation folds (one fold for the tasks with a test split), MRPC F1 as F1. An average's
resample is the average of its columns on the same resample, so its tasks' items are resampled jointly.
The interval is the 2.5th to 97.5th percentile of the resampled scores. A row's difference to the reference
comes from the same resamples of both (the items pair up by position, checked by their gold scores or labels).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import NamedTuple

import numpy as np
import pandas as pd

from pipeline.evaluate.items import run_group
from pipeline.evaluate.names import (AVG_PAIRS, MRPC_BOTH, PAPER_AVERAGES, RELATEDNESS_TASKS, STS_AVERAGES,
                                     STS_YEARS, TASK_KINDS, TRANSFER_PROTOCOLS, TRANSFER_TASKS, avg_transfer,
                                     is_pair_column, kind_average)
from pipeline.leaderboard import bootstrap
from pipeline.repeats import seeded

LO, HI, DIFF, DIFF_LO, DIFF_HI, SIGNIFICANT = "lo", "hi", "diff", "diff lo", "diff hi", "significant"
# A row trained over several seeds (pipeline.leaderboard.seeds): its seeds, and per column the spread over them.
SEEDS, STD, PER_SEED = "seeds", "std", "per seed"
SUFFIXES = (LO, HI, DIFF, DIFF_LO, DIFF_HI, SIGNIFICANT, STD, PER_SEED)
_MRPC_BOTH = MRPC_BOTH
# (task, stratum sizes, resamples) -> blocks of per-stratum index arrays: bootstrap.chunks, seeded.
Draw = Callable[[str, list[int], int], Iterator[list[np.ndarray]]]
DRAW: Draw = partial(bootstrap.chunks, seed=bootstrap.SEED)


class Spec(NamedTuple):
    """How a column is recomputed: from which task's items under which protocol, by which statistic."""

    task: str
    protocol: str
    # "spearman", "mean_spearman", "accuracy", "f1", "accuracy_f1", or a task kind's (names.TASK_KINDS)
    statistic: str


class Comparison(NamedTuple):
    reference: str | None
    comparisons: int  # cells with a difference interval, the reference row's own left out
    significant: int


def spec(column: str) -> Spec | None:
    task, _, protocol = column.rpartition(" ")
    if task in STS_YEARS and protocol in ("senteval", "simcse"):
        return Spec(task, "cosine", "mean_spearman" if protocol == "senteval" else "spearman")
    if task in RELATEDNESS_TASKS and protocol in ("cosine", "senteval"):
        return Spec(task, protocol, "spearman")
    if is_pair_column(column):
        return Spec(task, protocol, "spearman")
    if task in TRANSFER_TASKS and protocol in TRANSFER_PROTOCOLS:
        return Spec(task, protocol, "accuracy")
    if task == "MRPC F1" and protocol in TRANSFER_PROTOCOLS:
        return Spec("MRPC", protocol, "f1")
    if task == _MRPC_BOTH:
        return Spec("MRPC", protocol, "accuracy_f1")
    # A task kind's column, recomputed from its items as the kind says (names.TASK_KINDS).
    kind = next((k for k, (_, main, _) in TASK_KINDS.items() if protocol == main), None)
    return Spec(task, kind, TASK_KINDS[kind][2]) if kind is not None and task else None


def averages(columns: Sequence[str]) -> dict[str, list[str]]:
    """Each average column of the table and the columns it averages (MRPC by its accuracy and F1 together)."""
    present = set(columns)
    out = {name: parts for name, parts in STS_AVERAGES.items() if name in present}
    if AVG_PAIRS in present:
        out[AVG_PAIRS] = [c for c in columns if is_pair_column(c)]
    for kind in TASK_KINDS:
        if kind_average(kind) in present:
            out[kind_average(kind)] = [c for c in columns if (s := spec(c)) is not None and s.protocol == kind]
    for protocol in TRANSFER_PROTOCOLS:
        if avg_transfer(protocol) in present:
            out[avg_transfer(protocol)] = [f"{_MRPC_BOTH} {protocol}" if t == "MRPC" else f"{t} {protocol}"
                                           for t in TRANSFER_TASKS if f"{t} {protocol}" in present]
    out.update({name: parts for name, parts in PAPER_AVERAGES.items() if name in present})
    return out


class _Strata(NamedTuple):
    names: tuple[str, ...]
    predictions: list[np.ndarray]
    golds: list[np.ndarray]

    @property
    def layout(self) -> tuple:
        return tuple((name, len(g)) for name, g in zip(self.names, self.golds))

    def same_items(self, other: "_Strata") -> bool:
        return self.layout == other.layout and all(np.array_equal(a, b) for a, b in zip(self.golds, other.golds))


Index = dict[str, dict[tuple[str, str], _Strata]]  # model -> (task, protocol) -> its items


def index(items: dict[str, pd.DataFrame]) -> Index:
    out: Index = {}
    for model, frame in items.items():
        mine = out.setdefault(model, {})
        for (task, protocol, stratum), g in frame.groupby(["task", "protocol", "stratum"], sort=False):
            strata = mine.setdefault((task, protocol), _Strata((), [], []))
            mine[task, protocol] = _Strata((*strata.names, stratum), [*strata.predictions, g["prediction"].to_numpy()],
                                           [*strata.golds, g["gold"].to_numpy()])
    return out


def _strata(items: Index, model: str, task: str, protocol: str) -> _Strata | None:
    return items.get(model, {}).get((task, protocol))


class _Rankers:
    """One Ranker per distinct array of values, so the rows that share a task's gold scores rank them once."""

    def __init__(self):
        self._made: dict[bytes, bootstrap.Ranker] = {}

    def __call__(self, values: np.ndarray) -> bootstrap.Ranker:
        key = values.tobytes()
        if key not in self._made:
            self._made[key] = bootstrap.Ranker(values)
        return self._made[key]


class _Scorer:
    """One row's statistics of one task's items under one protocol, for a block of resamples: its draw counts per
    stratum and pooled (bootstrap.Resample)."""

    def __init__(self, strata: _Strata, rankers: _Rankers):
        self.strata, self.rankers = strata, rankers
        self.pooled_pred, self.pooled_gold = np.concatenate(strata.predictions), np.concatenate(strata.golds)
        self.correct = [(p == g).astype(np.float64) for p, g in zip(strata.predictions, strata.golds)]

    def __call__(self, statistic: str, strata: list[bootstrap.Resample], pooled: bootstrap.Resample) -> np.ndarray:
        if statistic == "mean":
            return bootstrap.accuracy(self.pooled_pred, pooled)
        if statistic == "average_precision":
            return bootstrap.average_precision(self.pooled_pred, self.pooled_gold, pooled)
        if statistic == "v_measure":
            return self._v_measure(strata)
        if statistic == "spearman":
            return bootstrap.spearman(self.rankers(self.pooled_pred), self.rankers(self.pooled_gold), pooled)
        if statistic == "mean_spearman":
            return np.mean([bootstrap.spearman(self.rankers(p), self.rankers(g), w)
                            for p, g, w in zip(self.strata.predictions, self.strata.golds, strata)], axis=0)
        accuracy = np.mean([bootstrap.accuracy(c, w) for c, w in zip(self.correct, strata)], axis=0)
        if statistic == "accuracy":
            return accuracy
        f1 = bootstrap.f1(self.pooled_pred, self.pooled_gold, pooled)
        return f1 if statistic == "f1" else (accuracy + f1) / 2


    def _v_measure(self, strata: list[bootstrap.Resample]) -> np.ndarray:
        """The mean over sets of each set's mean over its runs, every run of a set on its first run's draws."""
        draws, per_set = {}, {}
        for name, p, g, w in zip(self.strata.names, self.strata.predictions, self.strata.golds, strata):
            group = run_group(name)
            per_set.setdefault(group, []).append(bootstrap.v_measure(p, g, draws.setdefault(group, w)))
        return np.mean([np.mean(runs, axis=0) for runs in per_set.values()], axis=0)


def replicates(specs: dict[str, Spec], models: Sequence[str], items: Index,
               b: int = bootstrap.B, draw: Draw = DRAW) -> dict[str, np.ndarray]:
    """(rows, b) resampled scores x 100 of each column in `specs`, nan for a row without its items. One task's
    columns share its resamples; rows with the same items share the same draws."""
    out = {c: np.full((len(models), b), np.nan) for c in specs}
    by_task: dict[str, list[str]] = {}
    for column, s in specs.items():
        by_task.setdefault(s.task, []).append(column)
    for task, columns in by_task.items():
        rankers, scorers = _Rankers(), {}
        for r, model in enumerate(models):
            for protocol in dict.fromkeys(specs[c].protocol for c in columns):
                strata = _strata(items, model, task, protocol)
                if strata is not None:
                    scorers[r, protocol] = _Scorer(strata, rankers)
        for layout in dict.fromkeys(s.strata.layout for s in scorers.values()):
            mine = {key: s for key, s in scorers.items() if s.strata.layout == layout}
            sizes = [n for _, n in layout]
            start = 0
            for block in draw(task, sizes, b):
                w = [bootstrap.counts(idx, n) for idx, n in zip(block, sizes)]
                strata, pooled = [bootstrap.Resample(x) for x in w], bootstrap.Resample(np.hstack(w))
                stop = start + len(block[0])
                for column in columns:
                    s = specs[column]
                    for (r, protocol), scorer in mine.items():
                        if protocol == s.protocol:
                            out[column][r, start:stop] = 100 * scorer(s.statistic, strata, pooled)
                start = stop
    return out


def paired(specs: dict[str, Spec], models: Sequence[str], items: Index, reference: str) -> dict[str, np.ndarray]:
    """Per column, which rows were scored on the very items the reference row was (same strata, same gold)."""
    out = {}
    for column, s in specs.items():
        theirs = _strata(items, reference, s.task, s.protocol)
        out[column] = np.array([theirs is not None and (mine := _strata(items, m, s.task, s.protocol)) is not None
                                and mine.same_items(theirs) for m in models])
    return out


def members(table: pd.DataFrame) -> list[list[str]]:
    """Each row's models: a row over several seeds has its repeats' ("<row> (seed s)", by its `seeds` column),
    any other row its own."""
    seeds = table[SEEDS] if SEEDS in table.columns else [None] * len(table)
    return [[model] if not _listed(s) else [seeded(model, int(x)) for x in s]
            for model, s in zip(table["model"], seeds)]


def _listed(value) -> bool:
    return value is not None and not (np.isscalar(value) and pd.isna(value))


def add_intervals(table: pd.DataFrame, items: dict[str, pd.DataFrame], compare_to: str | None = None,
                  b: int = bootstrap.B, draw: Draw = DRAW) -> tuple[pd.DataFrame, Comparison]:
    """`table` with `<column> lo` and `<column> hi` after each score column that some row has items for, and with
    `compare_to` (a row's model) also `<column> diff`, `diff lo`, `diff hi` and `significant` (the difference's
    interval excludes 0). `draw` gives each task's resamples (a seam: tests pass their own indices).

    A row over several seeds (pipeline.leaderboard.seeds) keeps its t-interval over seeds as its `lo` and `hi`;
    its resampled score, for the differences, is the mean over its seeds of their scores on the same resample
    of the items, and so is the reference row's when it has seeds: the difference pooled over seeds."""
    models, items = table["model"].tolist(), index(items)
    rows = members(table)
    flat = list(dict.fromkeys(m for ms in rows for m in ms))
    groups = [[flat.index(m) for m in ms] for ms in rows]
    repeated = np.array([len(ms) > 1 for ms in rows])
    derived = {c for c in table.columns for x in SUFFIXES if c.endswith(f" {x}") and c[:-len(x) - 1] in table.columns}
    direct = {c: s for c in table.columns if c not in derived and (s := spec(c)) is not None}
    parts = averages([c for c in table.columns if c not in derived])
    needed = {**direct, **{p: spec(p) for ps in parts.values() for p in ps if spec(p) is not None}}
    each = replicates(needed, flat, items, b, draw)
    for name, ps in parts.items():
        each[name] = np.mean([each[p] if p in each else np.full((len(flat), b), np.nan) for p in ps], axis=0)
    reps = {c: np.stack([r[g].mean(axis=0) for g in groups]) for c, r in each.items()}  # nan where a seed has none
    ref = models.index(compare_to) if compare_to is not None else None
    pairable = {}
    if ref is not None:
        alike = paired(needed, flat, items, rows[ref][0])
        for name, ps in parts.items():
            alike[name] = np.all([alike.get(p, np.zeros(len(flat), bool)) for p in ps], axis=0)
        pairable = {c: np.array([v[g].all() and v[groups[ref]].all() for g in groups]) for c, v in alike.items()}
    extra: dict[str, dict[str, object]] = {}
    comparisons = significant = 0
    for column in [c for c in table.columns if c in direct or c in parts]:
        rep = reps[column]
        has = ~np.isnan(rep).all(axis=1)
        if not has.any():
            continue
        lo, hi = np.full(len(models), np.nan), np.full(len(models), np.nan)
        lo[has], hi[has] = bootstrap.interval(rep[has])
        if repeated.any():  # over seeds: the t-interval, from the seeds' scores
            lo[repeated] = table[f"{column} {LO}"].to_numpy(dtype=float)[repeated]
            hi[repeated] = table[f"{column} {HI}"].to_numpy(dtype=float)[repeated]
        cols = {LO: np.round(lo, 2), HI: np.round(hi, 2)}
        if ref is not None:
            ok = pairable[column] & has & has[ref]
            ok[ref] = False
            diff_lo, diff_hi = np.full(len(models), np.nan), np.full(len(models), np.nan)
            if ok.any():
                diff_lo[ok], diff_hi[ok] = bootstrap.interval(rep[ok] - rep[ref])
            values = table[column].to_numpy(dtype=float)
            cols[DIFF] = np.where(ok, np.round(values - values[ref], 2), np.nan)
            cols[DIFF_LO], cols[DIFF_HI] = np.round(diff_lo, 2), np.round(diff_hi, 2)
            sig = (diff_lo > 0) | (diff_hi < 0)
            cols[SIGNIFICANT] = pd.array([bool(x) if o else None for x, o in zip(sig, ok)], dtype="boolean")
            comparisons += int(ok.sum())
            significant += int((sig & ok).sum())
        extra[column] = cols
    added = {f"{column} {suffix}" for column, cols in extra.items() for suffix in cols}
    order = []
    for column in [c for c in table.columns if c not in added]:
        order.append(table[column])
        for suffix, values in extra.get(column, {}).items():
            order.append(pd.Series(values, index=table.index, name=f"{column} {suffix}"))
    return pd.concat(order, axis=1), Comparison(compare_to, comparisons, significant)
