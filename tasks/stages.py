"""One Prefect task runs any stage; its cache key is the stage's fingerprint (and artifacts directory).

The key is offered only while the dataset it names is finished on disk, so a
deleted or half-written artifact is rebuilt rather than served from Prefect's
cache. Tasks pass paths, never data.
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

from pipeline.parallel import ordered_map
from pipeline.ranking import publish
from pipeline.stage import run_stage, stage_fingerprint, stage_path
from pipeline.stages import STAGES
from pipeline.train import ray_init
from storage import complete, is_local, read_manifest

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
    name, config, inputs, artifacts = params["name"], params["config"], params["inputs"], params["artifacts"]
    if not built(name, config, inputs, artifacts):
        return None
    # The same fingerprint under another artifacts directory is another dataset (another path).
    where = hashlib.sha256(artifacts.encode()).hexdigest()[:8]
    return f"{name}-{stage_fingerprint(STAGES[name], config, inputs)}-{where}"


@task(task_run_name="{name}", cache_key_fn=_cache_key, persist_result=True)
def stage_task(name: str, config: dict, inputs: dict[str, str], artifacts: str) -> str:
    return run_stage(STAGES[name], config, inputs, artifacts)


def built(name: str, config: dict, inputs: dict[str, str], artifacts: str) -> bool:
    """Whether the stage's dataset for these inputs is already finished."""
    return complete(stage_path(STAGES[name], config, inputs, artifacts))


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


def run(name: str, config: dict, inputs: dict[str, str], artifacts: str, label: str | None = None) -> str:
    """Run a stage as a task and log whether it was reused or built."""
    started = time.time()
    path = stage_task.with_options(task_run_name=label or name, result_storage=result_storage(artifacts))(
        name, config, inputs, artifacts)
    # Finished before this task started: a cache hit, or a dataset another run built while this one waited.
    reused = read_manifest(path)["created"] < started
    get_run_logger().info("%s: %s %s", label or name, "reused" if reused else "built", path)
    return path


@task
def evaluate_on_ray(jobs: list[tuple[dict, dict]], artifacts: str, workers: int) -> list[str]:
    """Score several models at once as Ray tasks; each writes its own evaluate dataset, its configs' runtime
    fanning its tasks out as nested Ray tasks (a task waiting on them gives its CPU back meanwhile)."""
    return list(ordered_map(evaluate_one, [(config, inputs, artifacts) for config, inputs in jobs], "ray", workers))


def evaluate_one(job: tuple[dict, dict, str]) -> str:
    return run_stage(STAGES["evaluate"], *job)


@task
def start_ray(address: str | None, num_cpus: int | None) -> None:
    ray_init(address, num_cpus)


@task
def publish_leaderboard(path: str, artifacts: str) -> str:
    table, markdown = publish(path, artifacts)
    create_table_artifact(key="leaderboard", table=table.astype(object).where(table.notna(), None).to_dict("records"),
                          description=markdown)
    get_run_logger().info("leaderboard:\n%s", markdown)
    return f"{artifacts.rstrip('/')}/leaderboard.md"
