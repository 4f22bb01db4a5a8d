"""One Prefect task runs any stage; its cache key is the stage's fingerprint (and artifacts directory).

The key is offered only while the dataset it names is finished and intact on
disk, so a deleted, half-written or damaged artifact is rebuilt rather than
served from Prefect's cache. Tasks pass paths, never data.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import time
from typing import Any

from prefect import get_run_logger, task
from prefect.artifacts import create_table_artifact
from prefect.context import TaskRunContext
from prefect.filesystems import RemoteFileSystem

from pipeline import stopping
from pipeline.config import RayConfig
from pipeline.leaderboard.stage import publish
from pipeline.leaderboard.table import json_records
from pipeline.ray_session import ray_init
from pipeline.registry import stage as registered
from pipeline.stage import run_stage
from storage import dataset_path, intact, is_local, read_manifest

RESULTS = "_prefect"


def _show_pipeline_logs() -> None:
    """Prefect gives the pipeline's "cpipe" logger (PREFECT_LOGGING_EXTRA_LOGGERS) its API handler but no level
    and no console: set INFO, and print it as Prefect prints its own, so stage progress reaches the terminal."""
    logger = logging.getLogger("cpipe")
    logger.setLevel(logging.INFO)
    for handler in logging.getLogger("prefect").handlers:
        if handler not in logger.handlers:
            logger.addHandler(handler)


_show_pipeline_logs()  # under remote artifacts: Prefect's results of the stage tasks


def _cache_key(context: TaskRunContext, params: dict[str, Any]) -> str | None:
    name, fp, artifacts = params["name"], params["fp"], params["artifacts"]
    if not intact(dataset_path(artifacts, name, fp)):
        return None
    # The same fingerprint under another artifacts directory is another dataset (another path).
    where = hashlib.sha256(artifacts.encode()).hexdigest()[:8]
    return f"{name}-{fp}-{where}"


@task(task_run_name="{name}", cache_key_fn=_cache_key, persist_result=True)
def stage_task(name: str, config: dict, inputs: dict[str, str], artifacts: str, fp: str) -> str:
    return run_stage(registered(name), config, inputs, artifacts, fp)


@functools.cache
def result_storage(artifacts: str) -> str | None:
    """Remote artifacts keep Prefect's task results beside them, where any machine of a cluster can read
    them (local result storage breaks Prefect on a remote Ray cluster); local ones use Prefect's default.
    Prefect wants the storage saved as a block, which names it for every process that reads the results."""
    if is_local(artifacts):
        return None
    name = f"cpipe-results-{hashlib.sha256(artifacts.encode()).hexdigest()[:12]}"
    RemoteFileSystem(basepath=f"{artifacts.rstrip('/')}/{RESULTS}").save(name, overwrite=True)
    return f"remote-file-system/{name}"


def _prepared(name: str, config: dict, inputs: dict[str, str], artifacts: str, ray: RayConfig | None) -> str:
    """The stage's fingerprint, computed once, here, for the task and its cache key; Ray is started first when the stage is not
    built yet and its config runs on Ray (the stage decides), so a rerun that reuses everything needs no Ray."""
    stage = registered(name)
    fp = stage.fingerprint(config, inputs)
    if stage.needs_ray(config) and not intact(dataset_path(artifacts, stage.name, fp)):
        start_ray(ray.address if ray else None, ray.num_cpus if ray else None)
    return fp


def _task(label: str, artifacts: str):
    return stage_task.with_options(task_run_name=label, result_storage=result_storage(artifacts))


def _logged(label: str, path: str, started: float) -> str:
    # Finished before this task started: a cache hit, or a dataset another run built while this one waited.
    reused = read_manifest(path)["created"] < started
    get_run_logger().info("%s: %s %s", label, "reused" if reused else "built", path)
    return path


def run(name: str, config: dict, inputs: dict[str, str], artifacts: str, label: str | None = None,
        ray: RayConfig | None = None) -> str:
    """Run a stage as a task and log whether it was reused or built."""
    started = time.time()
    fp = _prepared(name, config, inputs, artifacts, ray)
    stopping.reassert()  # the flow and Ray took SIGTERM over as they started
    return _logged(label or name, _task(label or name, artifacts)(name, config, inputs, artifacts, fp), started)


def run_all(jobs: dict[str, tuple[str, dict, dict[str, str]]], artifacts: str,
            ray: RayConfig | None = None) -> dict[str, str]:
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
    get_run_logger().info("leaderboard:\n%s", markdown)
    return f"{artifacts.rstrip('/')}/leaderboard.md"
