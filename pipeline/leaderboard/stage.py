"""leaderboard stage: every model's scores in one table, for this run and across runs.

The run's table goes to `leaderboard.*` at the artifacts root. The cumulative
one, `leaderboard-all.*`, keeps every model ever scored there, on whatever
evaluation data, keyed by evaluation data and model fingerprint: re-scoring a
model on the same data replaces its rows and its test items
(pipeline.leaderboard.kept_items), and two different models that share a run
name on the same data are told apart by fingerprint. Scores on different data
are not comparable, so its table is one section per data (column `data`), this
run's first, each ranked and given intervals and differences to the reference
row among its own rows alone.
"""

from __future__ import annotations

import logging
import tempfile
from typing import TYPE_CHECKING

import fsspec
import pandas as pd

from pipeline.augment import stage as augment
from pipeline.config_base import Strict
from pipeline.evaluate import items as test_items
from pipeline.evaluate.stage import STAGE as EVALUATE
from pipeline.evaluate.stage import initial_row
from pipeline.leaderboard import kept_items
from pipeline.leaderboard.cards import restated, trained_runs, update_cards
from pipeline.leaderboard.readouts import with_readouts
from pipeline.leaderboard.table import (
    DATA,
    absent_tasks,
    leaderboard,
    rank_column,
    ranked,
    to_markdown,
    write_leaderboard,
)
from pipeline.repeats import seeded, split_seeded
from pipeline.stage import Stage
from pipeline.train import stage as train
from storage import DatasetWriter, dataset_parts, dataset_path, leased, put_file, read_manifest, read_table

if TYPE_CHECKING:
    from pipeline.config import Config

# 3: columns name their protocol; averages name their tasks and are missing when a task is; rank_by.
# 4: bootstrap intervals on every score column, and the paired difference to evaluate.compare_to's row.
# 5: a difference over seeds counts their variance with the items'; marks after Holm's correction; p, p adjusted.
# 5 also: a trained row's recipe states what ran (steps taken, pairs read, documents drawn); a note names
# compared rows trained on different documents.
# 6: a row over seeds says each seed's recipe where they differ (each seed's dev-selected step); a budget column
# and a note naming compared rows trained for different budgets.
# 7: a difference between rows of one model has its p on the normal from the bootstrap's standard error, not by
# counting resamples past 0, which floored it at 2 / (B + 1): Holm over 26 or more cells could mark nothing. p and
# p adjusted to 4 significant digits.
VERSION = "7"
TITLE = "Leaderboard"
SCORES = "scores.parquet"
CUMULATIVE = "leaderboard-all"
# Scores kept across runs, under the labels of version 4: rows scored before STS-B/SICK-R had the "cosine" and
# "senteval" protocols carry the old labels, so they are not mixed in. Version 5 changed only how the table judges
# differences, not what the kept scores and items mean, so their store keeps its name (and every earlier run's rows).
LABELS = "4"
CUMULATIVE_SCORES = f"{CUMULATIVE}.v{LABELS}.{SCORES}"
CUMULATIVE_ITEMS = f"{CUMULATIVE}.v{LABELS}.items"  # a directory: pipeline.leaderboard.kept_items
log = logging.getLogger("cpipe")


def load_scores(paths: list[str]) -> pd.DataFrame:
    return pd.concat([read_table(p).to_pandas() for p in paths], ignore_index=True)


class LeaderboardSettings(Strict):
    """The leaderboard stage's config: the column to rank by (evaluate.rank_by; None: the default rule), the row to
    compare with (evaluate.compare_to), else the encoder the runs start from (used when the leaderboard has it). A
    manifest written before compare_to holds rank_by alone."""

    rank_by: str | None = None
    compare_to: str | None = None
    compare_to_default: str | None = None


def config(cfg: Config, key: None = None) -> dict:
    """compare_to: the row named by evaluate.compare_to, else the encoder the runs start from (used when the
    leaderboard has it)."""
    default = initial_row(cfg)[0] if cfg.evaluate.untrained else None
    return {"rank_by": cfg.evaluate.rank_by, "compare_to": cfg.evaluate.compare_to, "compare_to_default": default}


def load_items(paths: list[str]) -> dict[str, pd.DataFrame]:
    """{model: its test items} of the evaluate datasets that kept them (pipeline.evaluate.items)."""
    out = {}
    for path in paths:
        kept = test_items.read(path)
        if kept is not None:
            [model] = pd.unique(read_table(path, columns=["model"]).column("model").to_pandas())
            out[model] = kept
    return out


def reference(settings: LeaderboardSettings, models) -> str | None:
    """The row differences are taken to: evaluate.compare_to's (an error when the table lacks it), else the
    default row when the table has it."""
    default = settings.compare_to_default
    rows = {split_seeded(m)[0] for m in models}  # a row over several seeds is named by its repeats
    return settings.compare_to or (default if default in rows else None)


def inputs(cfg: Config, done: dict[str, str], key: None = None) -> dict[str, str]:
    """Every scored row's evaluate dataset."""
    return {f"scores-{k.split('/', 1)[1]}": v for k, v in done.items() if k.startswith("evaluate/")}


def run(settings: LeaderboardSettings, inputs: dict[str, str], out: DatasetWriter) -> None:
    paths = [inputs[k] for k in sorted(inputs)]
    runs = trained_runs(inputs, train.STAGE.name, augment.STAGE.name)
    scores = restated(load_scores(paths), runs)  # what each trained row ran, from its train and pairs manifests
    trained = {row: run.train["config"].get("train") for row, run in runs.items()}
    scores = with_readouts(scores, paths, trained)  # kept with the scores: the cumulative table compares by them too
    compare_to = reference(settings, scores["model"])
    table = leaderboard(scores, rank_by=settings.rank_by, items=load_items(paths), compare_to=compare_to)
    rank_by = rank_column(table, settings.rank_by)
    absent = absent_tasks(scores)
    write_leaderboard(table, absent, out.local_dir, title=TITLE, rank_by=rank_by, compare_to=compare_to)
    scores.to_parquet(f"{out.local_dir}/{SCORES}", index=False)
    update_cards(runs, table, compare_to)  # each trained model's README.md now states its scores, and the reference's
    out.extra.update(
        {
            "models": table["model"].tolist(),
            "absent_tasks": absent,
            "rank_by": rank_by,
            "rank_by_setting": settings.rank_by,
            "compare_to": compare_to,
        }
    )


def cumulative(previous: pd.DataFrame | None, scores: pd.DataFrame) -> pd.DataFrame:
    """Every model scored on any evaluation data; this run's rows replace a model's older ones on the same data
    (its whole evaluation: one row of the table comes from one evaluation), and rows on other data stay. A row
    scored again on the same data as another model (rebuilt: a new fingerprint) keeps both versions, each named
    with the fingerprint of its first repeat ("<row> @<fingerprint>"; a repeat's seed stays last, so that its
    seeds stay one row). Names need only differ within one data's rows, which are never shown beside another
    data's unmarked: a model directory scored on two data keeps its name on both."""
    merged, sources = scores, pd.Series("this run", index=scores.index)
    if previous is not None:
        ours = set(zip(scores["data_hash"], scores["model_fingerprint"]))
        older = previous[[key not in ours for key in zip(previous["data_hash"], previous["model_fingerprint"])]]
        merged = pd.concat([older, scores], ignore_index=True)
        sources = pd.Series(["older"] * len(older) + ["this run"] * len(scores))
    merged = merged.copy()
    row, seed = zip(*map(split_seeded, merged["model"])) if len(merged) else ((), ())
    rows = pd.DataFrame(
        {
            "row": row,
            "seed": pd.Series(seed, dtype="float"),
            "source": sources.values,
            "fp": merged["model_fingerprint"].values,
            "model": merged["model"].values,
            "data": merged["data_hash"].values,
        }
    )
    clash = rows.groupby(["data", "model"])["fp"].transform("nunique") > 1
    clashing = set(zip(rows.loc[clash, "data"], rows.loc[clash, "row"]))
    named = pd.Series([key in clashing for key in zip(rows["data"], rows["row"])], index=rows.index, dtype=bool)
    for (_, name, _), version in rows[named].groupby(["data", "row", "source"]):
        tagged = f"{name} @{version.sort_values('seed', na_position='first')['fp'].iloc[0][:8]}"
        merged.loc[version.index, "model"] = [tagged if pd.isna(s) else seeded(tagged, int(s)) for s in version["seed"]]
    return merged


def cumulative_reference(manifest: dict, scores: pd.DataFrame, merged: pd.DataFrame) -> str | None:
    """The cumulative table's reference row: the run's, under its name there (which may carry its fingerprint),
    else the default row when that table has it (on any data: each data's section compares with its own)."""
    compare_to = manifest.get("compare_to")
    if compare_to is None:
        return reference(STAGE.settings_of(manifest["config"]), merged["model"])
    # The reference's repeats, when it has several, are named "<row> (seed s)".
    mine = scores[[split_seeded(m)[0] == compare_to for m in scores["model"]]]
    keys = set(zip(mine["data_hash"], mine["model_fingerprint"]))
    theirs = merged[[key in keys for key in zip(merged["data_hash"], merged["model_fingerprint"])]]
    return split_seeded(theirs["model"].sort_values().iloc[0])[0]


def cumulative_table(
    merged: pd.DataFrame, scores: pd.DataFrame, items: str, fresh: dict[str, pd.DataFrame], manifest: dict
) -> tuple[pd.DataFrame, str | None, str | None]:
    """The cumulative table and its reference row and rank column: one section per evaluation data (`data`: its
    hash), this run's data first, each built alone, so that its ranks, intervals and paired differences are among
    rows scored on the same test items. A section compares with the reference row when it has one of that name,
    and has no differences otherwise."""
    compare_to, rank_by = cumulative_reference(manifest, scores, merged), manifest.get("rank_by_setting")
    ours = list(pd.unique(scores["data_hash"]))
    order = ours + [d for d in pd.unique(merged["data_hash"]) if d not in ours]
    sections, column = [], None
    for data in order:
        rows, mine = merged[merged["data_hash"] == data], data in ours
        names = {split_seeded(m)[0] for m in rows["model"]}
        section = leaderboard(
            rows,
            rank_by=rank_by if mine else None,
            compare_to=compare_to if compare_to in names else None,
            items=kept_items.gather(items, rows, scores, fresh),
        )
        if mine:
            column = column or rank_column(section, rank_by)
        elif column in section.columns:  # other data ranked by this run's column where they have it
            section = ranked(section, column)
        sections.append(section.assign(**{DATA: data}))
    table = pd.concat(sections, ignore_index=True)
    return table[["model", DATA, *[c for c in table.columns if c not in ("model", DATA)]]], compare_to, column


def _evaluated(path: str, manifest: dict) -> list[str]:
    """The evaluate datasets a leaderboard dataset was built from, which its manifest names by fingerprint."""
    return [dataset_path(dataset_parts(path)[0], EVALUATE.name, fp) for _, fp in sorted(manifest["inputs"].items())]


def publish(path: str, artifacts: str) -> tuple[pd.DataFrame, str]:
    """Rewrite the run's and the cumulative leaderboard at the artifacts root, where users look (each file
    replaced whole). Runs sharing the artifacts publish one at a time: the cumulative scores and test items are
    read, merged and rewritten under a lease, so no run's rows are lost to another's rewrite."""
    table = _read_parquet(f"{path}/leaderboard.parquet")
    manifest = read_manifest(path)
    absent, rank_by, compare_to = manifest["absent_tasks"], manifest.get("rank_by"), manifest.get("compare_to")
    root = artifacts.rstrip("/")
    store, items_store = f"{root}/{CUMULATIVE_SCORES}", f"{root}/{CUMULATIVE_ITEMS}"
    fs, p = fsspec.core.url_to_fs(store)
    with leased(dataset_path(artifacts, STAGE.name, CUMULATIVE)):
        write_leaderboard(table, absent, artifacts, title=TITLE, rank_by=rank_by, compare_to=compare_to)
        scores = _read_parquet(f"{path}/{SCORES}")
        merged = cumulative(_read_parquet(store) if fs.exists(p) else None, scores)
        fresh = load_items(_evaluated(path, manifest))
        everything, reference_row, column = cumulative_table(merged, scores, items_store, fresh, manifest)
        write_leaderboard(
            everything,
            absent_tasks(merged),
            artifacts,
            title=f"{TITLE}: every run",
            name=CUMULATIVE,
            rank_by=column,
            compare_to=reference_row,
        )
        # Items written before the scores, stale ones removed after: a publish cut off in between leaves each
        # kept row with items of its own model and data, or none, and files no row has, which the next removes.
        kept_items.keep(items_store, scores, fresh)
        with tempfile.TemporaryDirectory(prefix="cpipe-leaderboard-") as tmp:
            merged.to_parquet(f"{tmp}/{SCORES}", index=False)
            put_file(f"{tmp}/{SCORES}", store)
        kept_items.prune(items_store, merged, scores, fresh)
    return table, to_markdown(table, absent, title=TITLE, rank_by=rank_by, compare_to=compare_to)


def _read_parquet(path: str) -> pd.DataFrame:
    # Through fsspec, whose settings (an S3 endpoint, say) the whole pipeline shares; pandas alone would
    # open s3:// URLs with pyarrow's own client.
    with fsspec.open(path, "rb") as f:
        return pd.read_parquet(f)


STAGE = Stage(
    name="leaderboard",
    version=VERSION,
    flow="evaluate",
    section="evaluate",
    settings=LeaderboardSettings,
    config=config,
    inputs=inputs,
    run=run,
)
