"""Bootstrap intervals on a leaderboard's score columns, and each row's difference to a reference row, judged over
the test items and the training seeds, the marks decided after a correction for the table's many comparisons.

Every score column is recomputed from the models' test items (pipeline.evaluate.items) on B resamples of
those items (pipeline.leaderboard.bootstrap): STS12-16 senteval as the mean of the per-subset Spearman, simcse
as one Spearman over the subsets, STS-B/SICK-R and the pair files as one Spearman, transfer accuracies as the
mean over the cross-validation folds (one fold for the tasks with a test split), MRPC F1 as F1. An average's
resample is the average of its columns on the same resample, so its tasks' items are resampled jointly.
The interval is the 2.5th to 97.5th percentile of the resampled scores. A row's difference to the reference
comes from the same resamples of both (the items pair up by position, checked by their gold scores or labels).

A difference has two sources of noise (Bouthillier et al. 2021, "Accounting for variance in machine learning
benchmarks", MLSys): which test items were drawn, and which training seeds. Between two rows of one model each
there is no seed to resample: the difference's interval is the percentile interval of the paired item bootstrap,
and its p is two-sided on the normal, 2 P(Z > |D| / se), D the difference of the two rows' scores and se the
standard deviation of its resampled values (the bootstrap's standard error, Efron & Tibshirani 1993, ch. 6): the t
below where the seeds add nothing. Where either row is over several seeds, the difference of their means over
seeds, D, is judged by a t-interval whose variance adds the two parts: the items' (the variance of the paired
bootstrap difference, on each resample the mean over each row's seeds, all seeds on the same resamples) and the
seeds' (var/n of each row's per-seed scores, Welch's two samples; or, when both rows have the very same seeds,
var/n of the per-seed differences: a run's seed s starts from the untrained encoder's seed-s weights, so they
pair). Its degrees of freedom are Welch-Satterthwaite's, the item part counted as known (infinitely many):
D +- t(0.975, df) sqrt(V_items + V_seeds), p = 2 P(T_df > |D| / sqrt(V)). With n seeds df is near n - 1 when the
seeds dominate (t(0.975, 2) = 4.30 at 3 seeds) and near the normal's when the items do. Per-seed scores on fixed items
carry the seed-by-item interaction, which the items' part counts too: counted twice, conservatively, as in
resampling both factors of a crossed design (Owen 2007, "The pigeonhole bootstrap").

Why not p from counting the resamples on the far side of 0, 2 (count + 1) / (B + 1) (Davison & Hinkley 1997,
ch. 4)? It cannot go below 2 / (B + 1), and the correction multiplies the smallest p by the family's size m: at
B = 1000 a table of 26 comparisons or more could mark nothing, however large a difference (at m = 36 every p
adjusted to 0.0719 at best), and the differences no resample crosses 0 in are the very ones a table must mark.
Counting to Holm's first step, alpha / m, needs B of order 20 m / alpha resamples (14,400 at m = 36), a cost of
every cell of the table that grows with it, and a B that grew with the table would move every column's interval
when a row was added. The standard error is resolved by any B of hundreds, its p has no floor, and the normal is
what a difference of means, correlations or accuracies over hundreds of test items tends to (the marks take the
percentile interval's side too, so a skewed bootstrap cannot mark what its own interval does not exclude).

Why not a two-level bootstrap (resample seeds, then items; Davison & Hinkley 1997, section 3.8, hierarchical
data)? With the 2-5 seeds a run has, the seed stage cannot reproduce the seeds' variance: a resampled mean of n
seeds never leaves [min, max] of the n, which misses the true mean with probability 2^(1-n) under any symmetric
seed noise (25% at three seeds, so a 95% interval could cover at most 75%), and its variance is (n - 1)/n of the
plug-in's. The t-quantile on df = n - 1 is what makes three seeds honest; the bootstrap keeps what it is good at,
the many test items.

The marks: every cell with a difference interval is one comparison of the table's family, and a cell is marked
(`significant`) where its p, adjusted by Holm's step-down correction over that family (Holm 1979; "bh",
Benjamini & Hochberg 1995, is available to `adjust`), is at most 0.05, which bounds the chance of any false mark
in the table by 5% under any dependence between the cells. The `diff lo` / `diff hi` shown are each cell's
unadjusted 95% interval: a cell whose interval excludes 0 may stay unmarked; `p` and `p adjusted` say why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from typing import NamedTuple

import numpy as np
import pandas as pd
from scipy import stats

from pipeline.evaluate import kinds, sts, transfer
from pipeline.evaluate.column import Column
from pipeline.evaluate.resampled import Resample, Sample, Statistic
from pipeline.leaderboard import bootstrap
from pipeline.readers import registry
from pipeline.readers.names import (
    AVG_PAIRS,
    PAPER_AVERAGES,
    STS_AVERAGES,
    TRANSFER_PROTOCOLS,
    TRANSFER_TASKS,
    avg_transfer,
    is_pair_column,
)
from pipeline.repeats import seeded

LO, HI, DIFF, DIFF_LO, DIFF_HI, SIGNIFICANT = "lo", "hi", "diff", "diff lo", "diff hi", "significant"
P, P_ADJUSTED = "p", "p adjusted"  # a difference's two-sided p, and after the table's correction (CORRECTION)
# A row trained over several seeds (pipeline.leaderboard.seeds): its seeds, and per column the spread over them.
SEEDS, STD, PER_SEED = "seeds", "std", "per seed"
SUFFIXES = (LO, HI, DIFF, DIFF_LO, DIFF_HI, P, P_ADJUSTED, SIGNIFICANT, STD, PER_SEED)
CORRECTION = "holm"  # how the marks are decided over the table's comparisons: "holm" or "bh" (adjust)
CORRECTIONS = {
    "holm": "Holm's step-down correction (family-wise error)",
    "bh": "Benjamini-Hochberg's correction (false discovery rate)",
}
ALPHA = 1 - bootstrap.LEVEL
# (task, stratum sizes, resamples) -> blocks of per-stratum index arrays: bootstrap.chunks, seeded.
Draw = Callable[[str, list[int], int], Iterator[list[np.ndarray]]]
DRAW: Draw = partial(bootstrap.chunks, seed=bootstrap.SEED)


class Spec(NamedTuple):
    """How a column is recomputed: from which task's items under which protocol, by which statistic."""

    task: str
    protocol: str
    # The column's own (Column.statistic) or its kind's (pipeline.evaluate.kind.Kind.statistic)
    statistic: Statistic


class Comparison(NamedTuple):
    reference: str | None
    comparisons: int  # cells with a difference interval, the reference row's own left out: the family
    significant: int  # marked after the correction
    correction: str = CORRECTION


# The typed score columns of a table (STS's, transfer's, the task kinds'), by name: pipeline.leaderboard.table
# gives them.
Typed = Mapping[str, Column]


def spec(column: str, typed: Typed | None = None) -> Spec | None:
    """How a typed column is recomputed from its items, as it (or its kind) declares; None for any other column,
    and for a kind's that keeps no items (statistic None): a name is never parsed."""
    c = (typed or {}).get(column)
    statistic = None if c is None else c.statistic or kinds.kind(c.kind).statistic
    return None if statistic is None else Spec(c.task, c.kept_as or c.protocol, statistic)


def typed_from(items: dict[str, pd.DataFrame]) -> dict[str, Column]:
    """The kinds' columns of the tasks `items` hold, for a table given without its typed columns (every kind column
    of which has items, as a test's)."""
    keys = {(t, p) for frame in items.values() for t, p in zip(frame["task"], frame["protocol"])}
    out = {c.name: c for task, protocol in sorted(keys) for c in sts.kept_columns(task, protocol)}
    for task, protocol in sorted(keys):
        if task in TRANSFER_TASKS and protocol in TRANSFER_PROTOCOLS:
            out.update({c.name: c for c in transfer.columns(task, protocol)})
    for name in registry.names():
        k = kinds.kind(name)
        out.update({(c := k.column(task)).name: c for task, protocol in sorted(keys) if protocol == name})
    return out


def averages(columns: Sequence[str], typed: Typed | None = None) -> dict[str, list[str]]:
    """Each average column of the table and the columns it averages (MRPC by its accuracy and F1 together)."""
    present, typed = set(columns), typed or {}
    out = {name: parts for name, parts in STS_AVERAGES.items() if name in present}
    if AVG_PAIRS in present:
        out[AVG_PAIRS] = [c for c in columns if is_pair_column(c)]
    for name in registry.names():
        if (average := registry.average(name)) in present:
            out[average] = [c for c in columns if c in typed and typed[c].kind == name]
    for protocol in TRANSFER_PROTOCOLS:
        if avg_transfer(protocol) in present:
            out[avg_transfer(protocol)] = [
                transfer.averaged(t, protocol).name
                for t in TRANSFER_TASKS
                if transfer.columns(t, protocol)[0].name in present
            ]
    out.update({name: parts for name, parts in PAPER_AVERAGES.items() if name in present})
    return out


class _Strata(NamedTuple):
    names: tuple[str, ...]
    predictions: list[np.ndarray]
    golds: list[np.ndarray]

    @property
    def layout(self) -> tuple:
        return tuple((name, len(g)) for name, g in zip(self.names, self.golds))

    def same_items(self, other: _Strata) -> bool:
        return self.layout == other.layout and all(np.array_equal(a, b) for a, b in zip(self.golds, other.golds))


Index = dict[str, dict[tuple[str, str], _Strata]]  # model -> (task, protocol) -> its items


def index(items: dict[str, pd.DataFrame]) -> Index:
    out: Index = {}
    for model, frame in items.items():
        mine = out.setdefault(model, {})
        for (task, protocol, stratum), g in frame.groupby(["task", "protocol", "stratum"], sort=False):
            strata = mine.setdefault((task, protocol), _Strata((), [], []))
            mine[task, protocol] = _Strata(
                (*strata.names, stratum),
                [*strata.predictions, g["prediction"].to_numpy()],
                [*strata.golds, g["gold"].to_numpy()],
            )
    return out


def _strata(items: Index, model: str, task: str, protocol: str) -> _Strata | None:
    return items.get(model, {}).get((task, protocol))


def replicates(
    specs: dict[str, Spec], models: Sequence[str], items: Index, b: int = bootstrap.B, draw: Draw = DRAW
) -> dict[str, np.ndarray]:
    """(rows, b) resampled scores x 100 of each column in `specs`, nan for a row without its items. One task's
    columns share its resamples; rows with the same items share the same draws."""
    out = {c: np.full((len(models), b), np.nan) for c in specs}
    by_task: dict[str, list[str]] = {}
    for column, s in specs.items():
        by_task.setdefault(s.task, []).append(column)
    for task, columns in by_task.items():
        rankers, samples = {}, {}
        for r, model in enumerate(models):
            for protocol in dict.fromkeys(specs[c].protocol for c in columns):
                strata = _strata(items, model, task, protocol)
                if strata is not None:
                    samples[r, protocol] = (strata.layout, Sample(*strata, rankers))
        for layout in dict.fromkeys(lay for lay, _ in samples.values()):
            mine = {key: sample for key, (lay, sample) in samples.items() if lay == layout}
            sizes = [n for _, n in layout]
            start = 0
            for block in draw(task, sizes, b):
                w = [bootstrap.counts(idx, n) for idx, n in zip(block, sizes)]
                strata, pooled = [Resample(x) for x in w], Resample(np.hstack(w))
                stop = start + len(block[0])
                for column in columns:
                    s = specs[column]
                    for (r, protocol), sample in mine.items():
                        if protocol == s.protocol:
                            out[column][r, start:stop] = 100 * s.statistic(sample, strata, pooled)
                start = stop
    return out


def paired(specs: dict[str, Spec], models: Sequence[str], items: Index, reference: str) -> dict[str, np.ndarray]:
    """Per column, which rows were scored on the very items the reference row was (same strata, same gold)."""
    out = {}
    for column, s in specs.items():
        theirs = _strata(items, reference, s.task, s.protocol)
        out[column] = np.array(
            [
                theirs is not None
                and (mine := _strata(items, m, s.task, s.protocol)) is not None
                and mine.same_items(theirs)
                for m in models
            ]
        )
    return out


def members(table: pd.DataFrame) -> list[list[str]]:
    """Each row's models: a row over several seeds has its repeats' ("<row> (seed s)", by its `seeds` column),
    any other row its own."""
    seeds = table[SEEDS] if SEEDS in table.columns else [None] * len(table)
    return [
        [model] if not _listed(s) else [seeded(model, int(x)) for x in s] for model, s in zip(table["model"], seeds)
    ]


def _listed(value) -> bool:
    return value is not None and not (np.isscalar(value) and pd.isna(value))


def adjust(p: np.ndarray, method: str = CORRECTION) -> np.ndarray:
    """Adjusted p-values of one family: Holm's step-down ("holm": the i-th smallest times m - i + 1, made
    non-decreasing) or Benjamini-Hochberg's step-up ("bh": the i-th smallest times m / i, made non-increasing from
    the largest); each at most 1. A comparison is kept where its adjusted p is at most the level."""
    p = np.asarray(p, dtype=float)
    m = len(p)
    order = np.argsort(p, kind="stable")
    ranked = p[order]
    if method == "holm":
        adjusted = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * ranked))
    elif method == "bh":
        adjusted = np.minimum.accumulate(np.minimum(1.0, m / np.arange(1, m + 1) * ranked)[::-1])[::-1]
    else:
        raise ValueError(f"unknown correction {method!r} (known: {', '.join(CORRECTIONS)})")
    out = np.empty(m)
    out[order] = adjusted
    return out


def rounded_p(p: np.ndarray) -> np.ndarray:
    """p to 4 significant digits, not decimals: a large effect's p of 1e-9 stays itself in the CSV, not 0, and the
    table's correction can be taken again from the rounded values (pipeline.leaderboard.readouts)."""
    return np.array([float(f"{x:.4g}") for x in np.ravel(p)]).reshape(np.shape(p))


def seed_variance(mine: np.ndarray | None, theirs: np.ndarray | None, paired: bool) -> tuple[float, float]:
    """What the seeds add to the variance of a difference of two means over seeds (None: a row of one model, which
    adds nothing it can measure), and that variance's Welch-Satterthwaite term, sum of v_k^2 / df_k: of the
    per-seed differences when `paired` (the same seeds), else of each row's v = var / n on n - 1."""
    if paired:
        mine, theirs = mine - theirs, None
    parts = [(np.var(x, ddof=1) / len(x), len(x) - 1) for x in (mine, theirs) if x is not None]
    return sum(v for v, _ in parts), sum(v * v / df for v, df in parts)


class _Judged(NamedTuple):
    lo: np.ndarray
    hi: np.ndarray
    p: np.ndarray


def _per_seed(table: pd.DataFrame, column: str, repeated: np.ndarray) -> list[np.ndarray | None]:
    """Each row's per-seed scores of `column` (None on a row of one model)."""
    if not repeated.any():
        return [None] * len(table)
    if f"{column} {PER_SEED}" not in table.columns:
        raise ValueError(f"leaderboard column {column!r} has rows over several seeds but no {PER_SEED!r} scores")
    return [np.asarray(x, dtype=float) if r else None for x, r in zip(table[f"{column} {PER_SEED}"], repeated)]


def _seeds(table: pd.DataFrame, row: int) -> list[int]:
    return [int(s) for s in table[SEEDS].iat[row]]


def _judge(
    table: pd.DataFrame, column: str, rep: np.ndarray, ok: np.ndarray, ref: int, repeated: np.ndarray
) -> _Judged:
    """Each compared row's (`ok`) difference interval and p: between two rows of one model the paired item
    bootstrap's percentile interval, else the t-interval over items and seeds; p from |D| / sqrt(V), the items'
    variance alone (on the normal) or with the seeds' (on t(df)) (the module's docstring)."""
    out = _Judged(*(np.full(len(table), np.nan) for _ in range(3)))
    diffs = rep - rep[ref]
    values = table[column].to_numpy(dtype=float)
    x = _per_seed(table, column, repeated)
    for i in np.flatnonzero(ok):
        single = x[i] is None and x[ref] is None
        if any(v is not None and np.isnan(v).any() for v in (x[i], x[ref])):
            ok[i] = False  # a seed without this column: its row has no mean to compare
            continue
        same = x[i] is not None and x[ref] is not None and _seeds(table, i) == _seeds(table, ref)
        v_seeds, welch = (0.0, 0.0) if single else seed_variance(x[i], x[ref], same)
        v = v_seeds + np.nanvar(diffs[i], ddof=1)
        df = v * v / welch if welch > 0 else np.inf  # the items' part alone: the normal
        d, se = values[i] - values[ref], np.sqrt(v)
        out.p[i] = 2 * stats.t.sf(abs(d) / se, df) if se > 0 else float(d == 0)
        if single:
            (out.lo[i],), (out.hi[i],) = bootstrap.interval(diffs[i : i + 1])
        else:
            half = stats.t.ppf((1 + bootstrap.LEVEL) / 2, df) * se
            out.lo[i], out.hi[i] = d - half, d + half
    return out


def add_intervals(
    table: pd.DataFrame,
    items: dict[str, pd.DataFrame],
    compare_to: str | None = None,
    b: int = bootstrap.B,
    draw: Draw = DRAW,
    typed: Typed | None = None,
) -> tuple[pd.DataFrame, Comparison]:
    """`table` with `<column> lo` and `<column> hi` after each score column that some row has items for, and with
    `compare_to` (a row's model) also `<column> diff`, `diff lo`, `diff hi` (its unadjusted 95% interval), `p`,
    `p adjusted` (by CORRECTION over every compared cell of the table) and `significant` (adjusted p at most 0.05).
    `draw` gives each task's resamples (a seam: tests pass their own indices). `typed`: the table's task kind
    columns (pipeline.leaderboard.table.leaderboard gives them); None: those of the tasks `items` holds.

    A row over several seeds (pipeline.leaderboard.seeds) keeps its t-interval over seeds as its `lo` and `hi`;
    its resampled score is the mean over its seeds of their scores on the same resample of the items, and so is the
    reference row's when it has seeds; a difference with such a row adds the seeds' variance (the module's
    docstring)."""
    typed = typed_from(items) if typed is None else typed
    models, items = table["model"].tolist(), index(items)
    rows = members(table)
    flat = list(dict.fromkeys(m for ms in rows for m in ms))
    groups = [[flat.index(m) for m in ms] for ms in rows]
    repeated = np.array([len(ms) > 1 for ms in rows])
    derived = {c for c in table.columns for x in SUFFIXES if c.endswith(f" {x}") and c[: -len(x) - 1] in table.columns}
    direct = {c: s for c in table.columns if c not in derived and (s := spec(c, typed)) is not None}
    parts = averages([c for c in table.columns if c not in derived], typed)
    needed = {**direct, **{p: s for ps in parts.values() for p in ps if (s := spec(p, typed)) is not None}}
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
    judged: dict[str, tuple[np.ndarray, _Judged]] = {}
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
        extra[column] = {LO: np.round(lo, 2), HI: np.round(hi, 2)}
        if ref is not None:
            ok = pairable[column] & has & has[ref]
            ok[ref] = False
            judged[column] = (ok, _judge(table, column, rep, ok, ref, repeated))
    significant = _decide(table, ref, extra, judged) if ref is not None else 0
    added = {f"{column} {suffix}" for column, cols in extra.items() for suffix in cols}
    order = []
    for column in [c for c in table.columns if c not in added]:
        order.append(table[column])
        for suffix, values in extra.get(column, {}).items():
            order.append(pd.Series(values, index=table.index, name=f"{column} {suffix}"))
    comparisons = sum(int(ok.sum()) for ok, _ in judged.values())
    return pd.concat(order, axis=1), Comparison(compare_to, comparisons, significant)


def _decide(
    table: pd.DataFrame, ref: int, extra: dict[str, dict[str, object]], judged: dict[str, tuple[np.ndarray, _Judged]]
) -> int:
    """Every compared cell's columns into `extra`, its mark decided after CORRECTION over all of them (the family);
    how many are marked."""
    family = np.concatenate([j.p[ok] for ok, j in judged.values()]) if judged else np.array([])
    adjusted, start, marked = adjust(family, CORRECTION), 0, 0
    for column, (ok, j) in judged.items():
        p_adjusted = np.full(len(ok), np.nan)
        p_adjusted[ok] = adjusted[start : start + int(ok.sum())]
        start += int(ok.sum())
        # And the interval's side, so that a mark's direction is its interval's (implied by p for both kinds).
        sig = (p_adjusted <= ALPHA) & ((j.lo > 0) | (j.hi < 0))
        values = table[column].to_numpy(dtype=float)
        extra[column].update(
            {
                DIFF: np.where(ok, np.round(values - values[ref], 2), np.nan),
                DIFF_LO: np.round(j.lo, 2),
                DIFF_HI: np.round(j.hi, 2),
                P: rounded_p(j.p),
                P_ADJUSTED: rounded_p(p_adjusted),
                SIGNIFICANT: pd.array([bool(x) if o else None for x, o in zip(sig, ok)], dtype="boolean"),
            }
        )
        marked += int((sig & ok).sum())
    return marked
