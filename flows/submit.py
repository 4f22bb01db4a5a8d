"""`cpipe submit`: run the pipeline as a Ray job on a cluster, with the project it is run in shipped.

The job runs `cpipe run` (as `python -m flows.cli run`) inside the cluster, so
its Ray work lands there; its Prefect runs use the cluster's PREFECT_API_URL if
the nodes set one, else an embedded server of their own. Paths in the run
options are read on the cluster: use shared storage for corpora and artifacts.

What is shipped is the project's sources: the nearest directory at or above the current one whose pyproject.toml
names this project (a copy of the project runs its own code, not the installed one's), less EXCLUDES. The job runs
in the nodes' own environment (our image's, docker/); `--install` has Ray build one per node from the project's
requirements instead, which clones the nodes' virtualenv and pip-installs into it (minutes and GBs before the job
starts).

Credentials in URLs stay out of the entrypoint, which is printed and kept in clear in the cluster's job table:
it holds the concealed URLs (`https://***@host/...`), and the job gets the real ones in its runtime_env's
env_vars (credentials.ENV, read where the download is made). Those are the least exposed channel a Ray job
has: the dashboard shows them to a browser redacted, but the job table keeps them, and the Jobs SDK and
`ray job list` give them, to anyone who can reach the dashboard; the job's processes hold them in their environment.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shlex
import time
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10, the fairseq image's
    import tomli as tomllib

from pipeline.corpus.credentials import conceal, conceal_for_another_process
from pipeline.errors import InputError
from pipeline.ray_session import setup_worker

PROJECT = "contrastive-pipeline"
# Never shipped, wherever they lie in the project (gitwildmatch patterns, as .gitignore's, which Ray also reads
# unless RAY_RUNTIME_ENV_IGNORE_GITIGNORE=1): environments, version control, run outputs and downloads, caches and
# build outputs. The nodes have their own environment, and Ray caps a working_dir at a few hundred MB. `.env`
# files hold secrets.
EXCLUDES = [
    ".venv",
    "venv",
    ".env",
    ".git",
    "artifacts",
    "downloads",
    "mteb-results",
    ".prefect",
    "__pycache__",
    "*.py[cod]",
    ".pytest_cache",
    ".ruff_cache",
    ".mypy_cache",
    ".ipynb_checkpoints",
    ".tox",
    ".nox",
    "build",
    "dist",
    "*.egg-info",
    ".eggs",
]


def project_root(start: Path | None = None) -> Path:
    """The project `cpipe submit` ships: the nearest directory at or above `start` (the current one) whose
    pyproject.toml names this project."""
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        if _names_us(directory / "pyproject.toml"):
            return directory
    raise InputError(
        f"cpipe submit ships the project it is run in, and {here} is in none: no pyproject.toml "
        f"naming {PROJECT} there or above; run it from the project's directory"
    )


def _names_us(pyproject: Path) -> bool:
    try:
        with open(pyproject, "rb") as f:
            project = tomllib.load(f).get("project")
    except (OSError, tomllib.TOMLDecodeError):  # none, or not one we can read: not this project
        return False
    name = project.get("name") if isinstance(project, dict) else None
    return isinstance(name, str) and re.sub(r"[-_.]+", "-", name).lower() == PROJECT


def project_dependencies(root: Path | None = None) -> list[str]:
    """The distribution's own requirements, as the project's pyproject.toml lists them, with the `s3` extra: jobs
    on a cluster usually keep their artifacts on an object store."""
    with open((root or project_root()) / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    return project["dependencies"] + project["optional-dependencies"]["s3"]


def runtime_env(install: bool = False, secrets: dict[str, str] | None = None, root: Path | None = None) -> dict:
    root = root or project_root()
    env = {
        "working_dir": str(root),
        "excludes": EXCLUDES,
        # No RAY_AUTH_MODE: the job's driver takes the cluster's own, which its operator set (operations.md).
        "env_vars": {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", **(secrets or {})},
        # The job's workers name their own cluster to Ray's state API, as a local instance's do: Train's
        # controller otherwise fails beside another Ray instance on a node ("Found multiple active Ray
        # instances"), and Ray's noise stays in its logs. A job's hook is given by its import path.
        "worker_process_setup_hook": f"{setup_worker.__module__}.{setup_worker.__name__}",
    }
    if install:
        env["pip"] = project_dependencies(root)
    return env


def job_command(run_args: list[str]) -> tuple[str, dict[str, str]]:
    """The job's entrypoint, with the credentials in its URLs masked, and the environment variables with which
    the job reveals them."""
    args, secrets = conceal_for_another_process(run_args)
    return shlex.join(["python", "-m", "flows.cli", "run", *args]), secrets


def submit(address: str, run_args: list[str], install: bool = False, follow: bool = True) -> int:
    root = project_root()  # before anything is asked of the cluster
    client = _client(address)
    from ray.job_submission import JobStatus

    entrypoint, secrets = job_command(run_args)
    # Ray names, at INFO, each ignore file it meets packing the project ("Ignoring upload to cluster for these
    # files: [.ruff_cache/.gitignore]"): a line that reads as if the named files were left behind, on every submit.
    logging.getLogger("ray._private.runtime_env.packaging").setLevel(logging.WARNING)
    job = _submit(client, entrypoint, runtime_env(install, secrets, root))
    print(f"cpipe: submitted job {job} to {conceal(address)}: {entrypoint}", flush=True)
    if not follow:
        return 0
    asyncio.run(_stream(client, job))
    while (status := client.get_job_status(job)) not in {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}:
        time.sleep(1)  # the log stream can end a moment before the status settles
    print(f"cpipe: job {job} {status.value.lower()}", flush=True)
    return 0 if status == JobStatus.SUCCEEDED else 1


def _client(address: str):
    """A client of the cluster at `address`; one that is not there, or is no Ray dashboard, is a usage error."""
    from ray.exceptions import AuthenticationError, RpcError
    from ray.job_submission import JobSubmissionClient

    try:
        return JobSubmissionClient(address)
    except AuthenticationError as e:  # Ray's message: its reason, then a paragraph of advice
        raise InputError(
            f"--address {conceal(address)}: the cluster takes jobs only with its token "
            f"({conceal(str(e).splitlines()[0])}); set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN, or RAY_AUTH_TOKEN_PATH, "
            "to the cluster's token"
        ) from None
    # Ray's ConnectionError and requests' errors are OSErrors; a version check fails with a RuntimeError, an
    # address Ray cannot parse with a ValueError, a GCS address (no scheme) where none is with an RpcError.
    except (OSError, RuntimeError, ValueError, RpcError) as e:
        reason = "nothing answers there" if isinstance(e, ConnectionError) else conceal(str(e))
        raise InputError(
            f"--address {conceal(address)}: no Ray cluster's dashboard ({reason}); "
            "give the head's, e.g. http://HEAD:8265"
        ) from None


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
