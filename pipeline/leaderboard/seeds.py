"""A row trained over several seeds (pipeline.repeats: its repeats are named "<row> (seed s)"): one leaderboard row
with the mean over seeds of each score, their standard deviation and a 95% t-interval, the per-seed scores kept.

The t-interval is mean +- t(0.975, n - 1) * std / sqrt(n), std the sample standard deviation (n - 1): what the
seeds say of the training's spread, with n seeds. An average column's per-seed values are each seed's average,
so its interval too comes from per-seed numbers, never from other intervals' ends.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from pipeline.leaderboard.bootstrap import LEVEL
from pipeline.leaderboard.intervals import HI, LO, PER_SEED, SEEDS, STD
from pipeline.repeats import split_seeded


def t_interval(values: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    """The t-interval of the mean of `values` (n >= 2)."""
    n = len(values)
    half = stats.t.ppf((1 + level) / 2, n - 1) * np.std(values, ddof=1) / np.sqrt(n)
    mean = np.mean(values)
    return mean - half, mean + half


def groups(models) -> dict[str, list[tuple[int, str]]]:
    """{row: [(seed, model)], seeds ascending} of the repeated rows among `models`: two or more "<row> (seed s)"
    and no model named "<row>" itself (that name would then be two rows)."""
    found: dict[str, list[tuple[int, str]]] = {}
    for model in models:
        row, seed = split_seeded(model)
        if seed is not None:
            found.setdefault(row, []).append((seed, model))
    present = set(models)
    return {row: sorted(members) for row, members in found.items() if len(members) > 1 and row not in present}


def aggregate(table: pd.DataFrame, scores: list[str], means: list[str]) -> pd.DataFrame:
    """`table` (one row per model) with each repeated row's models replaced by one row, where the first of them
    was: its `seeds`, and per column of `scores` the mean over seeds (missing where a seed lacks it), `<column> std`,
    `<column> lo` and `hi` (the t-interval) and `<column> per seed`; per column of `means` the mean only. What the
    row is (kind, objective, recipe, ...) is its first seed's."""
    found = groups(table["model"])
    if not found:
        return table
    position = {model: i for i, model in enumerate(table["model"])}
    first = {members[0][1]: row for row, members in found.items()}
    repeated = {model for members in found.values() for _, model in members}
    records, extra = [], []
    for record in table.to_dict("records"):
        model = record["model"]
        if model in first:
            row = first[model]
            picked = table.iloc[[position[m] for _, m in found[row]]]
            record = {**record, "model": row, **{c: picked[c].mean(skipna=False) for c in (*scores, *means)}}
            extra.append(_spread(picked, scores, [s for s, _ in found[row]]))
        elif model in repeated:
            continue
        else:
            extra.append({SEEDS: None})
        records.append(record)
    out, spread = pd.DataFrame(records, columns=table.columns), pd.DataFrame(extra)
    order = []
    for column in table.columns:
        order.append(out[column])
        if column == "model":
            order.append(spread[SEEDS])
        if column in scores:
            for suffix in (LO, HI, STD, PER_SEED):
                name = f"{column} {suffix}"
                empty = pd.Series([None if suffix == PER_SEED else np.nan] * len(out))
                order.append((spread[name] if name in spread.columns else empty).rename(name))
    return pd.concat(order, axis=1)


def _spread(picked: pd.DataFrame, scores: list[str], seeds: list[int]) -> dict:
    out: dict = {SEEDS: seeds}
    for column in scores:
        values = picked[column].to_numpy(dtype=float)
        out[f"{column} {PER_SEED}"] = [round(float(v), 2) for v in values]
        if np.isnan(values).any():
            continue
        lo, hi = map(float, t_interval(values))
        out.update(
            {
                f"{column} {LO}": round(lo, 2),
                f"{column} {HI}": round(hi, 2),
                f"{column} {STD}": round(float(np.std(values, ddof=1)), 2),
            }
        )
    return out
