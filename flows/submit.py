"""`cpipe submit`: run the pipeline as a Ray job on a cluster, with this working directory shipped.

The job runs `cpipe run` (as `python -m flows.cli run`) inside the cluster, so
its Ray work lands there; its Prefect runs use the cluster's PREFECT_API_URL if
the nodes set one, else an embedded server of their own. Paths in the run
options are read on the cluster: use shared storage for corpora and artifacts.
"""

from __future__ import annotations

import asyncio
import shlex
import time
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10, the fairseq image's
    import tomli as tomllib

from pipeline.ray_session import setup_worker

ROOT = Path(__file__).resolve().parents[1]
# Never shipped: environments, outputs and caches (Ray caps a working_dir at a few hundred MB).
EXCLUDES = [".venv", ".git", "artifacts", "downloads", "**/__pycache__", ".pytest_cache", "*.egg-info"]


def project_dependencies() -> list[str]:
    """The distribution's own requirements, as pyproject.toml lists them, with the `s3` extra: jobs on a
    cluster usually keep their artifacts on an object store."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    return project["dependencies"] + project["optional-dependencies"]["s3"]


def runtime_env(install: bool) -> dict:
    env = {"working_dir": str(ROOT), "excludes": EXCLUDES,
           "env_vars": {"RAY_AUTH_MODE": "disabled", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"},
           # The job's workers name their own cluster to Ray's state API, as a local instance's do: Train's
           # controller otherwise fails beside another Ray instance on a node ("Found multiple active Ray
           # instances"), and Ray's noise stays in its logs. A job's hook is given by its import path.
           "worker_process_setup_hook": f"{setup_worker.__module__}.{setup_worker.__name__}"}
    if install:  # clusters running our image (docker/) have them already
        env["pip"] = project_dependencies()
    return env


def submit(address: str, run_args: list[str], install: bool = True, follow: bool = True) -> int:
    from ray.job_submission import JobStatus, JobSubmissionClient

    client = JobSubmissionClient(address)
    entrypoint = shlex.join(["python", "-m", "flows.cli", "run", *run_args])
    job = _submit(client, entrypoint, runtime_env(install))
    print(f"cpipe: submitted job {job} to {address}: {entrypoint}", flush=True)
    if not follow:
        return 0
    asyncio.run(_stream(client, job))
    while (status := client.get_job_status(job)) not in {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}:
        time.sleep(1)  # the log stream can end a moment before the status settles
    print(f"cpipe: job {job} {status.value.lower()}", flush=True)
    return 0 if status == JobStatus.SUCCEEDED else 1


def _submit(client, entrypoint: str, env: dict, wait: float = 300) -> str:
    """Submit, waiting while the head's job agent is not up yet (a cluster just started, or a loaded head),
    which Ray answers with "No available agent to submit job, please try again later"."""
    deadline = time.monotonic() + wait
    while True:
        try:
            return client.submit_job(entrypoint=entrypoint, runtime_env=env)
        except RuntimeError as e:
            if "No available agent" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(2)


async def _stream(client, job: str) -> None:
    async for lines in client.tail_job_logs(job):
        print(lines, end="", flush=True)
