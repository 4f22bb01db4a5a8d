"""Each training run as an MLflow run, reported from its train dataset and the leaderboard datasets that rank it.

`report_trainings` (after the train stage): one MLflow run per train dataset, named "<run> (seed s)", with the run's
settings and recipe as params (the dataset's manifest: its config, the model card's facts, its inputs), its curves
as metrics at their steps (metrics.parquet, as TensorBoard gets them: pipeline.train.curves.series) and curves.png.
`report_leaderboard` (after the leaderboard stage): into each trained model's run, its own scores on that
leaderboard as metrics "leaderboard/<column>", its model card (rewritten with those scores) and the leaderboard's
Markdown as artifacts.

A run is found again by its dataset's fingerprint (tag cpipe.train_fingerprint) and a leaderboard's report by a tag
naming the leaderboard's, so reporting the same datasets twice, or a reused stage, adds nothing. Each tag is set
after what it stands for is logged: a report cut off midway is redone by the next, never taken for done.
"""

from __future__ import annotations

import json
import math
import os
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from pipeline.augment import stage as augment
from pipeline.config_base import flat
from pipeline.errors import InputError
from pipeline.leaderboard import stage as ranking
from pipeline.leaderboard.cards import trained_runs
from pipeline.leaderboard.intervals import LO, PER_SEED, SEEDS
from pipeline.leaderboard.table import ANALYSIS, rankable_columns
from pipeline.model.transformer import ST_DIR
from pipeline.repeats import seeded, split_seeded
from pipeline.tracking.config import KEY, MlflowConfig
from pipeline.train import stage as train
from pipeline.train.card import CARD, ran_recipe
from pipeline.train.curves import PNG, series
from storage import complete, dataset_parts, dataset_path, local_copy, read_manifest

FINGERPRINT = "cpipe.train_fingerprint"  # the tag a run is found by
LEADERBOARD_TAG = "cpipe.leaderboard."  # + a leaderboard dataset's fingerprint: its scores are logged
# Card facts worth a column of MLflow's run table; the rest of the card is its settings, logged from the config.
CARD_FACTS = ("objective", "augmentation", "base_model", "architecture", "parameters")
RESULTS = ("steps", "final_loss", "train_seconds", "best_step", "best_score")  # the train manifest's, as metrics


# MLflow tries a failed request 8 times, backing off for 4 minutes in all (rate limits can last a minute): a
# server gone since the pre-flight held the run that long at each report. A few seconds here; the user's own
# settings win.
HTTP_SETTINGS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
}


class Store:
    """An MLflow tracking store and the experiment runs go to (created when missing)."""

    def __init__(self, settings: MlflowConfig):
        self.uri = settings.uri
        for name, value in HTTP_SETTINGS.items():
            os.environ.setdefault(name, value)
        with self.errors():
            with warnings.catch_warnings():  # SQLAlchemy's deprecation notes about MLflow's own models
                warnings.simplefilter("ignore", DeprecationWarning)
                from mlflow.tracking import MlflowClient

                if self.uri.startswith("sqlite:"):
                    Path(self.uri.split(":///", 1)[1]).parent.mkdir(parents=True, exist_ok=True)
                self.client = MlflowClient(tracking_uri=self.uri)
                self.experiment = self._experiment(settings.experiment)

    def _experiment(self, name: str) -> str:
        found = self.client.get_experiment_by_name(name)
        if found is None:
            # A sqlite store's artifacts beside its file; MLflow's default is ./mlruns of whatever the working
            # directory is. A server keeps its own.
            beside = (
                f"{self.uri.split(':///', 1)[1].rsplit('/', 1)[0]}/mlartifacts"
                if self.uri.startswith("sqlite:")
                else None
            )
            return self.client.create_experiment(name, artifact_location=beside and f"{beside}/{name}")
        if found.lifecycle_stage != "active":
            raise InputError(
                f"{KEY} {self.uri}: experiment {name!r} is deleted there; restore it (mlflow "
                "experiments restore) or set tracking.mlflow.experiment to another name"
            )
        return found.experiment_id

    @contextmanager
    def errors(self) -> Iterator[None]:
        """A failure of the store (unreachable, not a database, a driver missing) as one line naming the key."""
        try:
            yield
        except InputError:
            raise
        except Exception as e:
            if not (
                isinstance(e, (OSError, ImportError))
                or type(e).__module__.split(".")[0] in ("mlflow", "sqlalchemy", "alembic", "requests", "urllib3")
            ):
                raise
            raise InputError(f"{KEY} {self.uri}: {_first_line(e)}") from None

    def find(self, fp: str) -> str | None:
        """The run reported from the train dataset of fingerprint `fp`, if any."""
        with self.errors():
            runs = self.client.search_runs(
                [self.experiment], filter_string=f"tags.`{FINGERPRINT}` = '{fp}'", max_results=1
            )
        return runs[0].info.run_id if runs else None


def report_trainings(settings: MlflowConfig, trained: dict[str, str]) -> dict[str, str]:
    """{row: run id}: the MLflow run of each train dataset (`trained`: its leaderboard row -> its path), created and
    logged unless the store has it already."""
    store = Store(settings)
    return {row: _training(store, path, row) for row, path in trained.items()}


def report_leaderboard(settings: MlflowConfig, path: str) -> dict[str, str]:
    """Log the leaderboard dataset at `path` into the run of each trained model it ranks (reported first where
    the store lacks it), unless logged there already; {model: run id}."""
    store, manifest = Store(settings), read_manifest(path)
    root = dataset_parts(path)[0]
    evaluated = {k: dataset_path(root, ranking.EVALUATE.name, fp) for k, fp in manifest["inputs"].items()}
    runs = trained_runs(evaluated, train.STAGE.name, augment.STAGE.name)
    table = _read_table(f"{path}/leaderboard.parquet")
    out = {}
    for model, run in runs.items():
        if run.postprocessed:  # a post-processed row's scores are not the model's (as its card says)
            continue
        out[model] = run_id = _training(store, run.model_dir, model)
        tag = f"{LEADERBOARD_TAG}{manifest['fingerprint']}"
        with store.errors():
            if tag in store.client.get_run(run_id).data.tags:
                continue
            # A failure here leaves the run as it was (its training's record) and untagged: the next report redoes it.
            store.client.log_batch(
                run_id,
                metrics=_metrics(
                    {f"leaderboard/{_key(c)}": v for c, v in own_scores(table, model).items()}, _ms(manifest["created"])
                ),
            )
            store.client.set_tag(run_id, "cpipe.leaderboard_row", split_seeded(model)[0])
            _log_file(store, run_id, f"{run.model_dir.rstrip('/')}/{ST_DIR}/{CARD}", "model_card")
            _log_file(store, run_id, f"{path.rstrip('/')}/leaderboard.md", f"leaderboards/{manifest['fingerprint']}")
            store.client.set_tag(run_id, tag, path)
    return out


def _training(store: Store, path: str, row: str) -> str:
    manifest = read_manifest(path)
    if (found := store.find(manifest["fingerprint"])) is not None:
        return found
    rows = _read_rows(path, train.METRICS) if _exists(path, train.METRICS) else []
    seconds = (rows[-1].get("seconds") or 0.0) if rows else 0.0
    start = manifest["created"] - seconds  # the run's steps on its own clock, ending when the dataset was written
    name = seeded(split_seeded(row)[0], manifest["config"]["train"]["seed"])
    with store.errors():
        run = store.client.create_run(
            store.experiment,
            start_time=_ms(start),
            run_name=name,
            tags={
                "cpipe.run": split_seeded(row)[0],
                "cpipe.seed": str(manifest["config"]["train"]["seed"]),
                "cpipe.row": row,
                "cpipe.dataset": path,
            },
        )
        run_id = run.info.run_id
        with _failing(store, run_id):
            _log_training(store, run_id, path, manifest, rows, start)
            store.client.set_tag(run_id, FINGERPRINT, manifest["fingerprint"])
        store.client.set_terminated(run_id, "FINISHED", end_time=_ms(manifest["created"]))
    return run_id


def _log_training(store: Store, run_id: str, path: str, manifest: dict, rows: list[dict], start: float) -> None:
    items = sorted(recipe_params(path, manifest).items())
    for i in range(0, len(items), 100):  # MLflow takes at most 100 params a batch
        store.client.log_batch(run_id, params=[_param(k, v) for k, v in items[i : i + 100]])
    metrics = curve_metrics(rows, start) + _metrics(
        {f"result/{k}": manifest[k] for k in RESULTS if _number(manifest.get(k))}, _ms(manifest["created"])
    )
    for i in range(0, len(metrics), 1000):  # and 1000 metrics
        store.client.log_batch(run_id, metrics=metrics[i : i + 1000])
    for file, where in ((f"{ST_DIR}/{CARD}", "model_card"), (PNG, None)):
        if _exists(path, file):
            _log_file(store, run_id, f"{path.rstrip('/')}/{file}", where)


def recipe_params(path: str, manifest: dict) -> dict[str, str]:
    """The train dataset's settings as params: its stage config flattened ("train.lr", "dev.by", ...), the
    recipe as it ran (as the leaderboard states it: pipeline.train.card.ran_recipe), the card's description of the
    model and the fingerprints of its inputs ("input.pairs")."""
    config = manifest["config"]
    params = flat(config)
    card = manifest.get("card") or {}
    pairs = dataset_path(dataset_parts(path)[0], augment.STAGE.name, manifest["inputs"]["pairs"])
    if card.get("recipe"):
        params["recipe"] = ran_recipe(
            card["recipe"], config["train"], manifest.get("steps"), read_manifest(pairs) if complete(pairs) else None
        )
    params.update({k: card[k] for k in CARD_FACTS if card.get(k) is not None})
    params.update({f"input.{k}": fp for k, fp in manifest["inputs"].items()})
    return {k: _text(v) for k, v in params.items()}


def curve_metrics(rows: list[dict], start: float) -> list:
    """Every curve of train's per-step rows as MLflow metrics, each point at its step and at its wall time."""
    seconds = {int(r["step"]): r.get("seconds") for r in rows}
    return [
        m
        for tag, (steps, values) in series(rows).items()
        for m in _metrics_at(tag, steps, values, [_ms(start + (seconds.get(s) or 0.0)) for s in steps])
    ]


def own_scores(table: pd.DataFrame, model: str) -> dict[str, float]:
    """`model`'s scores on the leaderboard: its row's, or, for a repeat of a row over several seeds
    ("<row> (seed s)"), its own seed's (the "<column> per seed" values; the table keeps none for the analysis
    columns). Score columns: those a leaderboard ranks by, the analysis ones and any with an interval."""
    columns = [c for c in table.columns if c in (*rankable_columns(), *ANALYSIS) or f"{c} {LO}" in table.columns]
    rows = table.set_index("model")
    if model in rows.index:
        values = {c: rows.at[model, c] for c in columns}
    else:
        row, seed = split_seeded(model)
        seeds = _listed(rows.at[row, SEEDS]) if row in rows.index and SEEDS in rows.columns else []
        if seed not in seeds:
            return {}
        per_seed = {c: _listed(rows.at[row, f"{c} {PER_SEED}"]) for c in columns if f"{c} {PER_SEED}" in rows.columns}
        values = {c: v[seeds.index(seed)] for c, v in per_seed.items() if len(v) == len(seeds)}
    return {c: float(v) for c, v in values.items() if _number(v)}


@contextmanager
def _failing(store: Store, run_id: str) -> Iterator[None]:
    """A run whose logging fails ends FAILED (and, untagged, is not found again: the next report starts over)."""
    try:
        yield
    except BaseException:
        try:
            store.client.set_terminated(run_id, "FAILED")
        except Exception:  # the store that failed may fail this too; the first error is the one to see
            pass
        raise


def _log_file(store: Store, run_id: str, path: str, where: str | None) -> None:
    with local_copy(path) as local:
        store.client.log_artifact(run_id, local, where)


def _read_table(path: str) -> pd.DataFrame:
    with local_copy(path) as local:
        return pd.read_parquet(local)


def _exists(path: str, name: str) -> bool:
    import fsspec

    fs, p = fsspec.core.url_to_fs(f"{path.rstrip('/')}/{name}")
    return fs.exists(p)


def _read_rows(path: str, name: str) -> list[dict]:
    import fsspec

    with fsspec.open(f"{path.rstrip('/')}/{name}", "rb") as f:
        return pq.read_table(f).to_pylist()


def _listed(cell: Any) -> list:
    """A list cell of the table as Parquet gives it back (an array; None where the row has none)."""
    return [] if cell is None or isinstance(cell, float) else list(cell)


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:6000]  # MLflow's longest param value


def _param(key: str, value: str):
    from mlflow.entities import Param

    return Param(_key(key), value)


def _metrics(values: dict[str, float], stamp: int) -> list:
    return [m for k, v in values.items() for m in _metrics_at(k, [0], [float(v)], [stamp])]


def _metrics_at(key: str, steps: list[int], values: list[float], stamps: list[int]) -> list:
    from mlflow.entities import Metric

    return [Metric(key, float(v), t, int(s)) for s, v, t in zip(steps, values, stamps)]


def _key(name: str) -> str:
    """A column's name as part of an MLflow key, which holds only letters, digits, _ - . / and spaces ("avg STS
    (7)" -> "avg STS _7_"); a "/" in a column's name is no level of MLflow's."""
    return re.sub(r"[^\w.\- ]", "_", name)[:200]


def _number(value: Any) -> bool:
    """A score or result MLflow can take: a number (numpy's too), not a flag, not missing."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return False
    return not isinstance(value, (bool, str)) and not math.isnan(number)


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


def _first_line(e: BaseException) -> str:
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:500]
