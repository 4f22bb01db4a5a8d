"""Readout-matched differences: each row is compared with the reference row read as the row is (pooling: mean or
[CLS]; pipeline.evaluate.readouts). A row read by [CLS] is compared with "<reference> [cls]", the reference's
encoder scored again under [CLS] pooling, not with the reference's own mean-pooled scores; a row under a pooling
the reference was not scored by gets no difference. Rows of an encoder that is no pooling choice (OWN), and rows
whose readout is not recorded, are compared with the reference as it is read itself, and the notes say so.

The rows are split by their reference, each group's intervals and differences taken by
pipeline.leaderboard.intervals.add_intervals with that reference, and the marks then decided once over every
compared cell of the table (one family), as add_intervals decides them over one reference's."""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipeline.evaluate import readouts
from pipeline.leaderboard.intervals import (
    ALPHA,
    CORRECTION,
    DIFF,
    DIFF_HI,
    DIFF_LO,
    P_ADJUSTED,
    SIGNIFICANT,
    SUFFIXES,
    P,
    Typed,
    add_intervals,
    adjust,
    rounded_p,
)
from storage import read_manifest

READOUT = "readout"  # the leaderboard's (and its scores') column: each row's readout


def with_readouts(scores: pd.DataFrame, paths: list[str], trained: dict[str, dict]) -> pd.DataFrame:
    """The scores with each row's readout (column READOUT): the spec its evaluate dataset (in `paths`) scored, as
    pipeline.evaluate.stage built it, and for a trained row its run's pooling and head (`trained`: row -> its train
    settings, as a train manifest holds them)."""
    found = {}
    for path in paths:
        config = read_manifest(path)["config"]
        model = config.get("model")
        found[model] = readouts.of_spec(config.get("spec") or {}, trained.get(model))
    return scores.assign(**{READOUT: scores["model"].map(found)})


def references(table: pd.DataFrame, compare_to: str | None) -> list[str | None]:
    """Each row's reference: compare_to when the row is read by its pooling (or has none: OWN, or unrecorded),
    "<compare_to> [<pooling>]" for a row read by another pooling when the table has that row, else None. The
    reference rows are their own (add_intervals leaves their own difference out)."""
    models = table["model"].tolist()
    if compare_to is None or READOUT not in table.columns:
        return [compare_to] * len(models)
    read = dict(zip(models, table[READOUT]))
    own = readouts.pooling(read.get(compare_to))
    out = []
    for model in models:
        pool = readouts.pooling(read[model])
        if model == compare_to or pool is None or own is None or pool == own:
            out.append(compare_to)
        else:
            other = readouts.variant(compare_to, pool)
            out.append(other if other in read else None)
    return out


def matched_intervals(
    table: pd.DataFrame, items: dict[str, pd.DataFrame], compare_to: str | None, typed: Typed | None = None
) -> pd.DataFrame:
    """add_intervals's table, each row's difference taken to its readout's reference (references); `typed`: the
    table's task kind columns (add_intervals)."""
    refs = references(table, compare_to)
    if set(refs) <= {compare_to}:
        return add_intervals(table, items, compare_to, typed=typed)[0]
    parts = []
    for ref in dict.fromkeys(refs):
        at = [i for i, r in enumerate(refs) if r == ref]
        part = add_intervals(table.iloc[at].reset_index(drop=True), items, ref, typed=typed)[0]
        parts.append(part.set_axis(at))
    merged = pd.concat(parts).sort_index()
    return _remarked(merged[_ordered(parts)].reset_index(drop=True))


def _ordered(parts: list[pd.DataFrame]) -> list[str]:
    """Every part's columns, each score column followed by its derived ones in the order add_intervals gives."""
    union = list(dict.fromkeys(c for p in parts for c in p.columns))
    stem = {c: c[: -len(s) - 1] for c in union for s in SUFFIXES if c.endswith(f" {s}") and c[: -len(s) - 1] in union}
    return [x for c in union if c not in stem for x in [c, *(d for d in union if stem.get(d) == c)]]


def _remarked(table: pd.DataFrame) -> pd.DataFrame:
    """The marks decided over every compared cell of the table (CORRECTION), as over one reference's."""
    columns = [
        c[: -len(P) - 1] for c in table.columns if c.endswith(f" {P}") and f"{c[: -len(P) - 1]} {DIFF}" in table.columns
    ]
    if not columns:
        return table
    p = table[[f"{c} {P}" for c in columns]].to_numpy(dtype=float)
    compared = ~np.isnan(p)
    adjusted = np.full(p.shape, np.nan)
    adjusted[compared] = adjust(p[compared], CORRECTION)
    table = table.copy()
    for j, c in enumerate(columns):
        lo, hi = table[f"{c} {DIFF_LO}"].to_numpy(dtype=float), table[f"{c} {DIFF_HI}"].to_numpy(dtype=float)
        sig = (adjusted[:, j] <= ALPHA) & ((lo > 0) | (hi < 0))
        table[f"{c} {P_ADJUSTED}"] = rounded_p(adjusted[:, j])
        table[f"{c} {SIGNIFICANT}"] = pd.array(
            [bool(s) if k else None for s, k in zip(sig, compared[:, j])], dtype="boolean"
        )
    return table


def notes(table: pd.DataFrame, compare_to: str | None) -> list[str]:
    """Which readout each row uses, and which of the reference's readouts each row's differences are taken to."""
    if READOUT not in table.columns:
        return []
    out = [
        "readout: how a row's sentence embedding is read from its encoder's last layer: mean = mean pooling over "
        'the tokens, cls = the first token\'s state ([CLS], <s>), "+ head" = then through the head its training '
        f"kept (train.keep_head: supervised SimCSE's MLP), {readouts.OWN} = an encoder whose embedding is no pooling "
        f"choice (bag of words, InferSent, USE, random vectors); — where it was not recorded."
    ]
    if compare_to is None or not any(c.endswith(f" {DIFF}") for c in table.columns):
        return out
    refs, models = references(table, compare_to), table["model"].tolist()
    read = dict(zip(models, table[READOUT]))
    own = read.get(compare_to)
    groups: dict[str | None, list[str]] = {}
    for model, ref in zip(models, refs):
        if model != ref:
            groups.setdefault(ref, []).append(model)
    said = [
        f"{', '.join(ms)} against {ref} (read by {read.get(ref) if pd.notna(read.get(ref)) else 'its own'})"
        for ref, ms in groups.items()
        if ref is not None
    ]
    out.append(
        "Differences are taken under one readout, never between a row and the reference read otherwise: "
        + "; ".join(said)
        + '. A "<reference> [<pooling>]" row is the reference\'s encoder scored again '
        "under that pooling, for the rows read so."
        if said
        else ""
    )
    if None in groups:
        why = (
            "its readout is fixed (a kept head, or no pooling to change)"
            if readouts.has_head(own) or not readouts.pooling(own)
            else "it was not scored under their pooling"
        )
        out.append(
            f"No differences for {', '.join(groups[None])}: their pooling is not the reference {compare_to}'s "
            f"({own}), and {why}."
        )
    unsure = [
        m
        for m in models
        if m != compare_to
        and refs[models.index(m)] == compare_to
        and readouts.pooling(read[m]) is None
        and read[m] != readouts.OWN
    ]
    if unsure:
        out.append(
            f"Readout not recorded for {', '.join(unsure)} (scored elsewhere, or before readouts were): "
            f"compared with {compare_to} as it is read itself, which may not be theirs."
        )
    return [n for n in out if n]
