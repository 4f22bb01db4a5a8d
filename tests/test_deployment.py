"""`cpipe serve` against a real Prefect server on 127.0.0.1, driven by `prefect deployment run`."""

from __future__ import annotations

import json
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
def process_pool(prefect_server):
    """prefect.yaml's deployments on the process pool `local-process`, as the README deploys them; yields a
    function that runs `prefect` in this checkout against the server."""
    env = {
        **prefect_server,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PWD": str(ROOT),
        "COLUMNS": "250",
    }  # rich would truncate the listings' columns

    def prefect(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
        return subprocess.run([PREFECT, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)

    created = prefect("work-pool", "create", "local-process", "--type", "process")
    assert created.returncode == 0, created.stdout + created.stderr
    deployed = prefect("--no-prompt", "deploy", "--name", "local")
    assert deployed.returncode == 0, deployed.stdout[-3000:] + deployed.stderr[-3000:]
    prefect.env = env
    return prefect


def run_on_worker(prefect, deployment: str, *params: str) -> tuple[str, str]:
    """Queue a run of `deployment` with `params` (name=value), let a worker run it; the flow run's name and what the
    worker printed."""
    queued = prefect("deployment", "run", deployment, *[a for p in params for a in ("--param", p)])
    assert queued.returncode == 0, queued.stdout + queued.stderr
    name = re.search(r"Created flow run '([^']+)'", queued.stdout).group(1)  # the server has other tests' runs
    worker = prefect("worker", "start", "--pool", "local-process", "--run-once", timeout=900)
    assert worker.returncode == 0, worker.stdout[-3000:] + worker.stderr[-3000:]
    return name, worker.stdout + worker.stderr


# What the server holds of a flow run (by name) and of a deployment, read through Prefect's client.
_READ = """
import asyncio, json, sys
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName, LogFilter, LogFilterFlowRunId

async def main(run, deployment):
    async with get_client() as client:
        found = await client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[run])))
        tasks = await client.read_task_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[run])))
        schema = (await client.read_deployment_by_name(deployment)).parameter_openapi_schema
        logs = await client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[found[0].id])))
    stages = [t for t in tasks if not t.name.startswith(("start_ray", "fetch_eval_data"))]  # a stage's is its label
    print(json.dumps({"state": found[0].state.name, "message": found[0].state.message, "schema": schema,
                      "tasks": {t.name: [t.state.name, t.state.message] for t in stages},
                      "logs": [log.message for log in logs]}))

asyncio.run(main(*sys.argv[1:]))
"""


def read_run(env: dict, run: str, deployment: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _READ, run, deployment], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    """One artifacts directory for both tests' runs of the same pipeline: the second reuses what the first built.
    Each removes leaderboard.md first, so that finding it shows its own run completed and published."""
    return tmp_path_factory.mktemp("artifacts")


def test_serve_registers_every_flow_and_the_full_pipeline_and_evaluate_run_to_completion(
    prefect_server, tmp_path, tiny_config, tiny_corpus, tiny_sts, artifacts
):
    env = prefect_server
    (artifacts / "leaderboard.md").unlink(missing_ok=True)
    serve_log = open(tmp_path / "serve.log", "w")
    serve = subprocess.Popen(
        [CPIPE, "serve", "--config", str(tiny_config), "--set", "runs={declutr: {}}"],
        cwd=ROOT,
        env=env,
        stdout=serve_log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        flows = ("data", "train", "evaluate", "full-pipeline")

        def deployed() -> bool:
            out = subprocess.run(
                [PREFECT, "deployment", "ls"], env={**env, "COLUMNS": "250"}, capture_output=True, text=True
            )
            return all(f"{name}/serve" in out.stdout for name in flows)

        wait_for(deployed, "the deployments data, train, evaluate and full-pipeline /serve")
        run = subprocess.run(
            [
                PREFECT,
                "deployment",
                "run",
                "full-pipeline/serve",
                "--param",
                f"corpus={tiny_corpus}",
                "--param",
                f"eval_data={tiny_sts}",
                "--param",
                f"artifacts={artifacts}",
                "--watch",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert run.returncode == 0, run.stdout[-3000:] + (tmp_path / "serve.log").read_text()[-5000:]
        assert "Completed" in run.stdout
        assert "| declutr |" in (artifacts / "leaderboard.md").read_text()
        artifact = subprocess.run(
            [PREFECT, "artifact", "inspect", "leaderboard"], env=env, capture_output=True, text=True
        )
        assert artifact.returncode == 0 and "declutr" in artifact.stdout and "fasttext-bow" in artifact.stdout

        # evaluate/serve scores a model directory given by path, as `cpipe evaluate --model` does.
        exported = next(artifacts.glob("train/*/sentence-transformers"))
        model = shutil.copytree(exported, tmp_path / "my-encoder")
        run = subprocess.run(
            [
                PREFECT,
                "deployment",
                "run",
                "evaluate/serve",
                "--param",
                f'models=["{model}"]',
                "--param",
                f"eval_data={tiny_sts}",
                "--param",
                f"artifacts={artifacts}",
                "--watch",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert run.returncode == 0 and "Completed" in run.stdout, (
            run.stdout[-3000:] + (tmp_path / "serve.log").read_text()[-5000:]
        )
        assert "| my-encoder |" in (artifacts / "leaderboard-all.md").read_text()
    finally:
        os.killpg(serve.pid, signal.SIGTERM)
        serve.wait(timeout=60)
        serve_log.close()


def test_prefect_yaml_deploys_to_a_process_pool_and_a_worker_runs_it(
    process_pool, tiny_config, tiny_corpus, tiny_sts, artifacts
):
    """`prefect deploy` from prefect.yaml, then `prefect worker start` on a process pool, as the README says."""
    prefect = process_pool
    listed = prefect("deployment", "ls").stdout
    assert all(f"{name}/local" in listed for name in ("data", "train", "evaluate", "full-pipeline")), listed
    (artifacts / "leaderboard.md").unlink(missing_ok=True)
    name, _ = run_on_worker(
        prefect,
        "full-pipeline/local",
        f"config={tiny_config}",
        f"corpus={tiny_corpus}",
        f"eval_data={tiny_sts}",
        f"artifacts={artifacts}",
        'overrides=["runs={declutr: {}}"]',
    )

    def completed() -> bool:
        listing = prefect("flow-run", "ls")
        assert not any(
            name in line and ("FAILED" in line or "CRASHED" in line) for line in listing.stdout.splitlines()
        ), listing.stdout
        return any(name in line and "COMPLETED" in line for line in listing.stdout.splitlines())

    wait_for(completed, "the flow run to complete", timeout=600)
    assert "| declutr |" in (artifacts / "leaderboard.md").read_text()


def test_a_bad_override_fails_the_run_with_the_one_line_error_as_its_state_message(
    process_pool, tiny_config, tiny_corpus, tiny_sts, tmp_path
):
    """What `cpipe run --set filter.bogus=1` prints, the run's Failed state says (and so `--watch` and the UI),
    in place of Prefect's 'Flow run encountered an exception:' and a traceback, as its log and its worker do; the
    deployment documents its parameters (the flows' docstrings), as `prefect deployment inspect` and the UI's run
    form show them."""
    name, printed = run_on_worker(
        process_pool,
        "full-pipeline/local",
        f"config={tiny_config}",
        f"corpus={tiny_corpus}",
        f"eval_data={tiny_sts}",
        f"artifacts={tmp_path / 'artifacts'}",
        'overrides=["filter.bogus=1"]',
    )
    run = read_run(process_pool.env, name, "full-pipeline/local")
    assert run["state"] == "Failed"
    assert run["message"] == "ConfigError: config error: --set filter.bogus=1: unknown key 'filter.bogus'", run[
        "message"
    ]
    # Its log says it in that one line: not again in Prefect's engine's record, with the error's traceback.
    logged = "\n".join(run["logs"])
    assert run["message"] in run["logs"] and "Traceback" not in logged and "Engine" not in logged, logged[-3000:]
    assert "Traceback" not in printed, printed[-3000:]
    described = {k: v.get("description", "") for k, v in run["schema"]["properties"].items()}
    assert "cpipe run --set" in described["overrides"] and "evaluate.data" in described["eval_data"], described
    assert all(described[k] for k in ("config", "corpus", "eval_data", "artifacts", "until", "overrides")), described


def test_the_data_deployment_takes_eval_data_and_a_rerun_names_each_reused_dataset(
    process_pool, tiny_config, tiny_corpus, tiny_sts, tmp_path
):
    """data/local with eval_data decontaminates against it (the profile's URLs are not fetched: this machine is
    offline); run again, each stage task ends Cached, its message the dataset it reused."""
    params = (
        f"config={tiny_config}",
        f"corpus={tiny_corpus}",
        f"eval_data={tiny_sts}",
        f"artifacts={tmp_path / 'artifacts'}",
        'overrides=["runs={declutr: {}}"]',
    )
    first = read_run(process_pool.env, run_on_worker(process_pool, "data/local", *params)[0], "data/local")
    assert first["state"] == "Completed", first
    assert "decontaminate" in first["tasks"], first["tasks"]
    assert all(state == "Completed" and message.startswith("built ") for state, message in first["tasks"].values()), (
        first["tasks"]
    )
    again = read_run(process_pool.env, run_on_worker(process_pool, "data/local", *params)[0], "data/local")
    assert again["state"] == "Completed", again
    assert again["tasks"].keys() == first["tasks"].keys()
    for label, (state, message) in again["tasks"].items():
        built = first["tasks"][label][1].removeprefix("built ")
        assert (state, message) == ("Cached", f"reused {built}"), (label, state, message)
        assert (Path(built) / "_SUCCESS").is_file()
