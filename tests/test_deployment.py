"""`cpipe serve` against a real Prefect server on 127.0.0.1, driven by `prefect deployment run`."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests import conftest
from tests.conftest import CPIPE, PREFECT, ROOT, wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def prefect_server(tmp_path_factory):
    """One server for both tests: each deploys the flows under the same names, the second over the first's."""
    with conftest.prefect_server(tmp_path_factory.mktemp("prefect-home")) as env:
        yield env


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    """One artifacts directory for both tests' runs of the same pipeline: the second reuses what the first built.
    Each removes leaderboard.md first, so that finding it shows its own run completed and published."""
    return tmp_path_factory.mktemp("artifacts")


def test_serve_registers_every_flow_and_the_full_pipeline_and_evaluate_run_to_completion(prefect_server, tmp_path, tiny_config, tiny_corpus, tiny_sts,
                                                                                        artifacts):
    env = prefect_server
    (artifacts / "leaderboard.md").unlink(missing_ok=True)
    serve_log = open(tmp_path / "serve.log", "w")
    serve = subprocess.Popen([CPIPE, "serve", "--config", str(tiny_config), "--set", "runs={declutr: {}}"],
                             cwd=ROOT, env=env, stdout=serve_log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        flows = ("data", "train", "evaluate", "full-pipeline")

        def deployed() -> bool:
            out = subprocess.run([PREFECT, "deployment", "ls"], env={**env, "COLUMNS": "250"}, capture_output=True,
                                 text=True)
            return all(f"{name}/serve" in out.stdout for name in flows)

        wait_for(deployed, "the deployments data, train, evaluate and full-pipeline /serve")
        run = subprocess.run(
            [PREFECT, "deployment", "run", "full-pipeline/serve", "--param", f"corpus={tiny_corpus}",
             "--param", f"eval_data={tiny_sts}", "--param", f"artifacts={artifacts}", "--watch"],
            env=env, capture_output=True, text=True, timeout=900)
        assert run.returncode == 0, run.stdout[-3000:] + (tmp_path / "serve.log").read_text()[-5000:]
        assert "Completed" in run.stdout
        assert "| declutr |" in (artifacts / "leaderboard.md").read_text()
        artifact = subprocess.run([PREFECT, "artifact", "inspect", "leaderboard"], env=env, capture_output=True,
                                  text=True)
        assert artifact.returncode == 0 and "declutr" in artifact.stdout and "fasttext-bow" in artifact.stdout

        # evaluate/serve scores a model directory given by path, as `cpipe evaluate --model` does.
        exported = next(artifacts.glob("train/*/sentence-transformers"))
        model = shutil.copytree(exported, tmp_path / "my-encoder")
        run = subprocess.run(
            [PREFECT, "deployment", "run", "evaluate/serve", "--param", f'models=["{model}"]',
             "--param", f"eval_data={tiny_sts}", "--param", f"artifacts={artifacts}", "--watch"],
            env=env, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0 and "Completed" in run.stdout, run.stdout[-3000:] + (tmp_path / "serve.log").read_text()[-5000:]
        assert "| my-encoder |" in (artifacts / "leaderboard-all.md").read_text()
    finally:
        os.killpg(serve.pid, signal.SIGTERM)
        serve.wait(timeout=60)
        serve_log.close()


def test_prefect_yaml_deploys_to_a_process_pool_and_a_worker_runs_it(prefect_server, tmp_path, tiny_config,
                                                                      tiny_corpus, tiny_sts, artifacts):
    """`prefect deploy` from prefect.yaml, then `prefect worker start` on a process pool, as the README says."""
    env = {**prefect_server, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PWD": str(ROOT)}

    def prefect(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
        return subprocess.run([PREFECT, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)

    created = prefect("work-pool", "create", "local-process", "--type", "process")
    assert created.returncode == 0, created.stdout + created.stderr
    deployed = prefect("--no-prompt", "deploy", "--name", "local")
    assert deployed.returncode == 0, deployed.stdout[-3000:] + deployed.stderr[-3000:]
    listed = subprocess.run([PREFECT, "deployment", "ls"], env={**env, "COLUMNS": "250"}, capture_output=True,
                            text=True).stdout
    assert all(f"{name}/local" in listed for name in ("data", "train", "evaluate", "full-pipeline")), listed
    (artifacts / "leaderboard.md").unlink(missing_ok=True)
    queued = prefect("deployment", "run", "full-pipeline/local", "--param", f"config={tiny_config}",
                     "--param", f"corpus={tiny_corpus}", "--param", f"eval_data={tiny_sts}",
                     "--param", f"artifacts={artifacts}", "--param", 'overrides=["runs={declutr: {}}"]')
    assert queued.returncode == 0, queued.stdout + queued.stderr
    name = re.search(r"Created flow run '([^']+)'", queued.stdout).group(1)  # the server has the first test's too
    worker = prefect("worker", "start", "--pool", "local-process", "--run-once", timeout=900)
    assert worker.returncode == 0, worker.stdout[-3000:] + worker.stderr[-3000:]
    env["COLUMNS"] = "250"  # rich would truncate the state column

    def completed() -> bool:
        listing = prefect("flow-run", "ls")
        assert "FAILED" not in listing.stdout and "CRASHED" not in listing.stdout, listing.stdout
        return any(name in line and "COMPLETED" in line for line in listing.stdout.splitlines())

    wait_for(completed, "the flow run to complete", timeout=600)
    assert "| declutr |" in (artifacts / "leaderboard.md").read_text()
