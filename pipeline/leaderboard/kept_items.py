"""The cumulative leaderboard's test items (pipeline.evaluate.items), kept across runs so that its rows get the
bootstrap intervals and paired differences the run's table has.

They are kept as the cumulative scores are, by evaluation data and model fingerprint: one Parquet file per
fingerprint, `<data_hash>.<model_fingerprint>.parquet` in a directory beside the scores, holding the items of
that fingerprint's rows with a `model` column naming each row as its run did (a post-processed model shares its
encoder's fingerprint). A publish writes only its own models' files, each replaced whole (storage.put_file), so
what it writes does not grow with the models kept before it; it reads every kept row's file, since each row's
interval is recomputed from its items.
"""

from __future__ import annotations

import tempfile

import fsspec
import pandas as pd
import pyarrow.parquet as pq

from storage import put_file

MODEL = "model"
Key = tuple[str, str]  # (data_hash, model_fingerprint)


def _file(key: Key) -> str:
    return f"{key[0]}.{key[1]}.parquet"


def _rows(scores: pd.DataFrame) -> dict[Key, list[str]]:
    """(data hash, model fingerprint) -> the names of its rows."""
    out: dict[Key, list[str]] = {}
    rows = scores[["data_hash", "model_fingerprint", MODEL]].drop_duplicates()
    for data_hash, fingerprint, model in rows.itertuples(index=False):
        out.setdefault((data_hash, fingerprint), []).append(model)
    return out


def _stored(directory: str) -> set[str]:
    fs, p = fsspec.core.url_to_fs(directory)
    fs.invalidate_cache(p)  # an object store's listing, cached in this process, misses what another run wrote since
    return {f.rstrip("/").rsplit("/", 1)[-1] for f in fs.ls(p, detail=False)} if fs.exists(p) else set()


def _read(path: str) -> dict[str, pd.DataFrame]:
    fs, p = fsspec.core.url_to_fs(path)
    with fs.open(p, "rb") as f:
        frame = pq.read_table(f).to_pandas()
    return {m: g.drop(columns=MODEL).reset_index(drop=True) for m, g in frame.groupby(MODEL, sort=False)}


def gather(
    directory: str, merged: pd.DataFrame, scores: pd.DataFrame, fresh: dict[str, pd.DataFrame]
) -> dict[str, pd.DataFrame]:
    """{row of `merged` (the cumulative scores of one evaluation data: a name is one row only within one data):
    its test items}, this run's rows' (`scores`) from `fresh` ({run's row: items}), earlier rows' from their kept
    files. A row renamed apart from another model of its name ("name @fingerprint") is found under its run's name;
    rows without items are left out."""
    ours, stored, out = _rows(scores), _stored(directory), {}
    for key, names in _rows(merged).items():
        if key in ours:
            kept = fresh
        elif _file(key) in stored:
            kept = _read(f"{directory}/{_file(key)}")
        else:
            continue
        for name in names:
            run_name = name.removesuffix(f" @{key[1][:8]}")
            if run_name in kept:
                out[name] = kept[run_name]
    return out


def keep(directory: str, scores: pd.DataFrame, fresh: dict[str, pd.DataFrame]) -> None:
    """Write the items of this run's rows (`scores`), one file per fingerprint."""
    for key, names in _rows(scores).items():
        frames = [fresh[m].assign(**{MODEL: m}) for m in names if m in fresh]
        if frames:
            with tempfile.TemporaryDirectory(prefix="cpipe-leaderboard-") as tmp:
                pd.concat(frames, ignore_index=True).to_parquet(f"{tmp}/items.parquet", index=False)
                put_file(f"{tmp}/items.parquet", f"{directory}/{_file(key)}")


def prune(directory: str, merged: pd.DataFrame, scores: pd.DataFrame, fresh: dict[str, pd.DataFrame]) -> None:
    """Remove every file no row of `merged` (every kept row, on any evaluation data) has: a re-scored fingerprint
    whose evaluation kept no items, a write cut off. Rows on other data than this run's keep theirs."""
    ours = _rows(scores)
    used = {_file(key) for key in _rows(merged) if key not in ours or any(m in fresh for m in ours[key])}
    fs, p = fsspec.core.url_to_fs(directory)
    for name in _stored(directory) - used:
        fs.rm_file(f"{p}/{name}")
