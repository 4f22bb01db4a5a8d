"""`cpipe submit` against a real Ray head (`ray start`, with its dashboard): what the job is sent is the project the
command is run in, its sources only (no environment, artifacts, downloads, caches or build outputs, however large),
and it runs in the nodes' own environment unless `--install` asks Ray to build one from the project's requirements."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from flows.submit import project_dependencies, project_root
from pipeline.errors import InputError
from tests.conftest import CPIPE, ROOT, TINY_CONFIG, free_port, ray_cluster

SOURCES = ("flows", "pipeline", "storage", "tasks", "configs")
# Planted in the copy, each as a user's working tree has them: none may reach the cluster.
PLANTED = {
    ".venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so": 4 << 20,
    "artifacts/train/0123abcd/part-00000.parquet": 4 << 20,
    "downloads/openwebtext/urlsf_subset00.tar": 4 << 20,
    "pipeline/__pycache__/config.cpython-311.pyc": 4096,
    "build/lib/flows/cli.py": 100,
    "contrastive_pipeline.egg-info/PKG-INFO": 100,
    ".git/objects/pack/pack-0.pack": 4096,
    ".pytest_cache/v/cache/lastfailed": 10,
}

# Run in the job's working directory with the runtime_env the cpipe job had: the files there, and whether an actor
# with a runtime_env of its own (as Ray Train's controller is made) runs the job's worker setup hook, which keeps
# Ray Train's timed-out resource requests out of the job's log (pipeline.ray_session.QUIETED).
PROBE = """
import json, logging, os, ray
files = {os.path.relpath(os.path.join(d, f)): os.path.getsize(os.path.join(d, f))
         for d, _, names in os.walk(".") for f in names}
ray.init()

@ray.remote(num_cpus=0)
class Controller:
    def quieted(self):
        from pipeline.ray_session import QUIETED, _TimeoutsAsDebug
        return all(any(isinstance(f, _TimeoutsAsDebug) for f in logging.getLogger(n).filters) for n in QUIETED)

controller = Controller.options(runtime_env={"env_vars": {"CPIPE_PROBE": "1"}}).remote()
print("PROBE " + json.dumps({"files": files, "quieted": ray.get(controller.quieted.remote(), timeout=300)}))
"""


@pytest.fixture(scope="module")
def cluster():
    with ray_cluster(nodes=1, cpus=2, dashboard=True) as c:
        yield c


@pytest.fixture
def project(tmp_path) -> Path:
    """A copy of this project's sources, with a profile of its own and a user's clutter planted in it."""
    copy = tmp_path / "project"
    for name in SOURCES:
        shutil.copytree(ROOT / name, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", copy)
    (copy / "configs" / "probe.yaml").write_text(TINY_CONFIG)  # only the copy has it
    for path, size in PLANTED.items():
        (copy / path).parent.mkdir(parents=True, exist_ok=True)
        (copy / path).write_bytes(b"\0" * size)
    return copy


def submit(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CPIPE, "submit", *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def finished(client, job: str, timeout: float = 600):
    from ray.job_submission import JobStatus

    deadline = time.monotonic() + timeout
    while (status := client.get_job_status(job)) not in {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}:
        assert time.monotonic() < deadline, f"job {job} still {status}"
        time.sleep(1)
    return status


def test_the_project_is_found_from_the_current_directory_up(project, tmp_path):
    assert project_root(project / "pipeline" / "train") == project
    assert project_root(project) == project
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "pyproject.toml").write_text('[project]\nname = "another-project"\n')
    with pytest.raises(InputError, match="no pyproject.toml naming contrastive-pipeline"):
        project_root(tmp_path / "elsewhere")


@pytest.mark.slow
def test_submit_outside_the_project_is_one_line_exit_2(tmp_path):
    result = submit(tmp_path, "--address", f"http://127.0.0.1:{free_port()}", "--corpus", "/x")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "no pyproject.toml naming contrastive-pipeline" in result.stderr


@pytest.mark.e2e
def test_the_job_gets_the_projects_sources_only_and_succeeds(cluster, project, tmp_path, tiny_corpus):
    from ray.job_submission import JobStatus, JobSubmissionClient

    client = JobSubmissionClient(cluster["dashboard"])
    result = submit(
        project,
        "--address",
        cluster["dashboard"],
        "--no-wait",
        "--config",
        "configs/probe.yaml",
        "--corpus",
        str(tiny_corpus),
        "--artifacts",
        str(tmp_path / "a"),
        "--until",
        "corpus",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    job = re.search(r"submitted job (\S+)", result.stdout).group(1)
    assert finished(client, job) == JobStatus.SUCCEEDED, client.get_job_logs(job)[-3000:]
    assert (tmp_path / "a" / "corpus").is_dir()  # the job ran the copy's own profile, which only the copy has
    sent = client.get_job_info(job).runtime_env
    assert "pip" not in sent and "uv" not in sent and "conda" not in sent  # the nodes' own environment

    probe = client.submit_job(entrypoint=f"python -c {shlex.quote(PROBE)}", runtime_env=sent)
    assert finished(client, probe) == JobStatus.SUCCEEDED, client.get_job_logs(probe)[-3000:]
    [line] = [line for line in client.get_job_logs(probe).splitlines() if line.startswith("PROBE ")]
    shipped = json.loads(line.removeprefix("PROBE "))
    files = shipped["files"]
    assert {"pyproject.toml", "flows/cli.py", "pipeline/ray_session.py", "configs/probe.yaml"} <= set(files)
    assert not set(PLANTED) & set(files)
    assert not any(
        part in {".venv", "artifacts", "downloads", "build", ".git", "__pycache__", ".pytest_cache"}
        or part.endswith(".egg-info")
        for f in files
        for part in Path(f).parts
    ), sorted(files)
    assert sum(files.values()) < 4 << 20, sum(files.values())  # no planted file would fit
    assert shipped["quieted"]  # Train's controller runs the job's setup hook


@pytest.mark.ray
def test_install_has_ray_build_the_environment_from_the_projects_requirements(cluster, project, tmp_path):
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(cluster["dashboard"])
    pyproject = project / "pyproject.toml"  # the shipped project's requirements, not the installed one's
    pyproject.write_text(pyproject.read_text().replace('"pandas>=2"', '"pandas>=2.1"'))
    result = submit(
        project,
        "--address",
        cluster["dashboard"],
        "--install",
        "--no-wait",
        "--artifacts",
        str(tmp_path / "a"),
        "--until",
        "corpus",
        "--corpus",
        "/x",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    job = re.search(r"submitted job (\S+)", result.stdout).group(1)
    try:
        pip = client.get_job_info(job).runtime_env["pip"]
    finally:
        client.stop_job(job)  # building the environment takes minutes; what Ray was asked for is the test
    packages = pip["packages"] if isinstance(pip, dict) else pip
    assert packages == project_dependencies(project)
    assert "pandas>=2.1" in packages and any(p.startswith("s3fs") for p in packages)
