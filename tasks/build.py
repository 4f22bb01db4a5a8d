"""One Prefect task runs any stage; the stage decides whether its dataset is reused (`run_stage`: the
fingerprint's dataset, finished and intact), not Prefect's cache, so a deleted, half-written or damaged artifact
is rebuilt and a reused one is named in its task run's state: `Cached`, "reused <path>". Tasks pass paths, never
data. A failure the network may get over (a timeout, a dropped connection, a busy server) is retried later, with
backoff: a corpus download, a hub model, evaluation data.
"""

from __future__ import annotations

import http.client
import logging
import socket
import time
import urllib.error

import pandas as pd
from prefect import get_run_logger, task
from prefect.artifacts import create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.states import Completed, State
from prefect.tasks import exponential_backoff

from pipeline import stopping
from pipeline.config import RayConfig
from pipeline.errors import InputError
from pipeline.evaluate.data import local_eval_data
from pipeline.leaderboard.stage import publish
from pipeline.leaderboard.table import json_records, rank_column
from pipeline.ray_session import ray_init
from pipeline.registry import stage as registered
from pipeline.stage import run_stage
from pipeline.tracking.config import MlflowConfig
from pipeline.tracking.mlflow_report import report_leaderboard, report_trainings
from storage import dataset_path, intact, read_manifest


def _show_pipeline_logs() -> None:
    """Prefect gives the pipeline's "cpipe" logger (PREFECT_LOGGING_EXTRA_LOGGERS) its API handler but no level
    and no console: set INFO, and print it as Prefect prints its own, so stage progress reaches the terminal."""
    logger = logging.getLogger("cpipe")
    logger.setLevel(logging.INFO)
    for handler in logging.getLogger("prefect").handlers:
        if handler not in logger.handlers:
            logger.addHandler(handler)


_show_pipeline_logs()  # under remote artifacts: Prefect's results of the stage tasks


def _transient(exc: BaseException | None) -> bool:
    """Whether a failure may pass when tried again later: somewhere down its causes the network timed out, a
    connection dropped or the server was busy (HTTP 429, 5xx). No such host, a refused connection (offline), an
    HTTP 4xx or a file that does not verify fail the same way every time, as does anything else."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if type(exc).__module__.startswith("ray"):  # Ray's own timeouts: training's, which it handles itself
            return False
        if isinstance(exc, urllib.error.HTTPError):
            return exc.code == 429 or exc.code >= 500
        if isinstance(exc, urllib.error.URLError):
            return not isinstance(exc.reason, (socket.gaierror, ConnectionRefusedError))
        if isinstance(exc, (TimeoutError, ConnectionResetError, ConnectionAbortedError, http.client.HTTPException)):
            return True
        if type(exc).__module__.startswith(("httpx", "requests")) and type(exc).__name__.endswith(
            ("Timeout", "TimeoutException", "ReadError", "RemoteProtocolError")
        ):  # the hub's client's
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _retry_network_failures(task, task_run, state: State) -> bool:
    return _transient(state.result(raise_on_failure=False))


# Each stage's own downloads retry a dropped connection at once (pipeline.corpus.download); these retries come
# minutes later, for an outage that outlasts them.
NETWORK_RETRIES = dict(
    retries=3,
    retry_delay_seconds=exponential_backoff(backoff_factor=30),
    retry_jitter_factor=0.5,
    retry_condition_fn=_retry_network_failures,
)


# The task persists nothing: its state says reused or built and carries the path, and run_stage alone decides
# reuse from the dataset itself, so no Prefect result store (local or in the bucket) is written or read.
@task(task_run_name="{name}", cache_policy=NO_CACHE, persist_result=False, **NETWORK_RETRIES)
def stage_task(name: str, config: dict, inputs: dict[str, str], artifacts: str, fp: str) -> State:
    started = time.time()
    path = run_stage(registered(name), config, inputs, artifacts, fp)
    if _reused(path, started):
        return Completed(name="Cached", message=f"reused {path}", data=path)
    return Completed(message=f"built {path}", data=path)


@task(**NETWORK_RETRIES)
def fetch_eval_data(data: str | dict[str, str] | None, download_dir: str) -> str | None:
    return local_eval_data(data, download_dir)


def _prepared(name: str, config: dict, inputs: dict[str, str], artifacts: str, ray: RayConfig | None) -> str:
    """The stage's fingerprint, computed once, here, for the task and its cache key; Ray is started first when the stage is not
    built yet and its config runs on Ray (the stage decides), so a rerun that reuses everything needs no Ray."""
    stage = registered(name)
    fp = stage.fingerprint(config, inputs)
    if stage.needs_ray(stage.settings_of(config)) and not intact(dataset_path(artifacts, stage.name, fp)):
        start_ray(ray.address if ray else None, ray.num_cpus if ray else None)
    return fp


def _task(label: str, artifacts: str):
    return stage_task.with_options(task_run_name=label)


def _reused(path: str, started: float) -> bool:
    # Finished before the task started: found built, or built by another run while this one waited for it.
    return read_manifest(path)["created"] < started


def _logged(label: str, path: str | State, started: float) -> str:
    path = path.result() if isinstance(path, State) else path  # a task called returns the state it returned
    get_run_logger().info("%s: %s %s", label, "reused" if _reused(path, started) else "built", path)
    return path


def run(
    name: str,
    config: dict,
    inputs: dict[str, str],
    artifacts: str,
    label: str | None = None,
    ray: RayConfig | None = None,
) -> str:
    """Run a stage as a task and log whether it was reused or built."""
    started = time.time()
    fp = _prepared(name, config, inputs, artifacts, ray)
    stopping.reassert()  # the flow and Ray took SIGTERM over as they started
    return _logged(label or name, _task(label or name, artifacts)(name, config, inputs, artifacts, fp), started)


def run_all(
    jobs: dict[str, tuple[str, dict, dict[str, str]]], artifacts: str, ray: RayConfig | None = None
) -> dict[str, str]:
    """label -> (stage, config, inputs): the stage tasks submitted at once, so that they run concurrently
    (Prefect's thread pool), each waiting on Ray for its own work; label -> path."""
    started = time.time()
    futures = {}
    for label, (name, config, inputs) in jobs.items():
        fp = _prepared(name, config, inputs, artifacts, ray)
        futures[label] = _task(label, artifacts).submit(name, config, inputs, artifacts, fp)
    stopping.reassert()
    return {label: _logged(label, future.result(), started) for label, future in futures.items()}


@task
def start_ray(address: str | None, num_cpus: int | None) -> None:
    ray_init(address, num_cpus)


@task
def publish_leaderboard(path: str, artifacts: str) -> str:
    table, markdown = publish(path, artifacts)
    create_table_artifact(key="leaderboard", table=json_records(table), description=markdown)
    get_run_logger().info("%s", ranking(table, read_manifest(path).get("rank_by")))
    return f"{artifacts.rstrip('/')}/leaderboard.md"


def ranking(table: pd.DataFrame, rank_by: str | None) -> str:
    """The leaderboard as the run's log says it: a line per row, its score in the column it is ranked by and that
    score's interval. Its every column is in leaderboard.md and the table artifact: a row of the whole table was a
    line of a thousand characters and more in a log."""
    column = rank_column(table, rank_by)
    if column is None:
        return f"leaderboard: {', '.join(table['model'])} (no scores)"
    lines = [f"leaderboard, by {column}:"]
    for row in table.to_dict("records"):
        interval = (
            f" [{row[f'{column} lo']:.2f}, {row[f'{column} hi']:.2f}]" if pd.notna(row.get(f"{column} lo")) else ""
        )
        lines.append(f"  {row['model']} {'—' if pd.isna(row[column]) else f'{row[column]:.2f}'}{interval}")
    return "\n".join(lines)


@task(cache_policy=NO_CACHE)
def track_trainings(settings: MlflowConfig, trained: dict[str, str]) -> None:
    """Each train dataset (label "train/<row>" -> path) as an MLflow run, unless the store has it already."""
    try:
        runs = report_trainings(settings, {label.split("/", 1)[1]: path for label, path in trained.items()})
    except InputError as e:
        _not_reported("the trained models", e)
        return
    for row, run_id in runs.items():
        get_run_logger().info("train-%s: MLflow run %s (experiment %s)", row, run_id, settings.experiment)


@task(cache_policy=NO_CACHE)
def track_leaderboard(settings: MlflowConfig, path: str) -> None:
    """The leaderboard's scores, model cards and table into each trained model's MLflow run."""
    try:
        runs = report_leaderboard(settings, path)
    except InputError as e:
        _not_reported("the leaderboard", e)
        return
    get_run_logger().info("leaderboard: logged to %d MLflow run(s) (experiment %s)", len(runs), settings.experiment)


def _not_reported(what: str, e: InputError) -> None:
    """A store failing after the pre-flight (a server gone, a database unusable) stops nothing it reports on: the
    evaluation and the leaderboard are the run's results, tracking their record, and a rerun reports what is
    missing (pipeline.tracking.mlflow_report finds what the store has)."""
    get_run_logger().warning(
        "MLflow: %s not reported: %s; the run goes on (the same command again reports them, every stage reused)",
        what,
        e,
    )
