"""`cpipe submit` to a two-node Ray cluster started on 127.0.0.1 with `ray start`, as a user would:
the working directory is shipped through the Ray Jobs API, the run's Ray work stays on the cluster,
and the artifacts land where the run options say."""

from __future__ import annotations

import importlib
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pandas as pd
import pytest

from flows.submit import EXCLUDES, project_dependencies, runtime_env
from pipeline.ray_session import setup_worker
from storage import list_datasets
from tests.conftest import cpipe, http_server, ray_cluster

pytestmark = pytest.mark.e2e


def test_the_job_ships_the_code_and_the_declared_dependencies():
    env = runtime_env(install=True)
    assert (Path(env["working_dir"]) / "flows" / "cli.py").is_file()  # `python -m flows.cli` runs from it
    assert ".venv" in EXCLUDES and "artifacts" in EXCLUDES
    assert env["pip"] == project_dependencies() and any(d.startswith("prefect") for d in env["pip"])
    assert any(d.startswith("s3fs") for d in env["pip"])  # remote artifacts work on the cluster
    assert "pip" not in runtime_env(install=False)
    module, name = env["worker_process_setup_hook"].rsplit(".", 1)  # the job's workers import it by its path
    assert getattr(importlib.import_module(module), name) is setup_worker


def test_a_typo_in_the_run_options_fails_before_anything_is_submitted():
    result = cpipe("submit", "--address", "http://127.0.0.1:9", "--corpuss", "x")
    assert result.returncode == 2 and "--corpuss" in result.stderr


@pytest.mark.parametrize("status,said", [(401, "Unauthorized: Missing"), (403, "Forbidden: Invalid")])
def test_a_cluster_that_refuses_the_jobs_token_is_one_line_naming_what_to_set(status, said):
    """A cluster with Ray's token authentication on (Ray 2.60's advice) answers a client without its token, or with
    another, as Ray's dashboard does: the command says so in one line, not Ray's traceback and paragraph."""

    class Dashboard(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(status)
            self.end_headers()
            self.wfile.write(f"{said} authentication token".encode())

        def log_message(self, *args):
            pass

    with http_server(Dashboard) as srv:
        address = f"http://127.0.0.1:{srv.server_port}"
        result = cpipe("submit", "--address", address, "--no-install", "--until", "corpus")
    assert result.returncode == 2, result.stderr[-3000:]
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"cpipe: error: --address {address}: the cluster takes jobs only with its token"), line
    assert said in line and "RAY_AUTH_TOKEN" in line


@pytest.fixture(scope="module")
def cluster():
    with ray_cluster(nodes=2, cpus=1, dashboard=True) as c:
        yield c


def test_submit_runs_the_pipeline_on_the_cluster(cluster, tmp_path, tiny_config, tiny_corpus, tiny_sts):
    # The nodes run this venv, as a cluster built from our image has the dependencies installed.
    result = cpipe(
        "submit",
        "--address",
        cluster["dashboard"],
        "--no-install",
        "--config",
        str(tiny_config),
        "--corpus",
        str(tiny_corpus),
        "--eval-data",
        str(tiny_sts),
        "--artifacts",
        str(tmp_path / "a"),
        "--set",
        "runs={declutr: {}}",
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "succeeded" in result.stdout and "leaderboard written" in result.stdout  # the job's log, streamed
    assert "Ignoring upload" not in result.stdout + result.stderr  # Ray's packing, at INFO
    board = pd.read_csv(tmp_path / "a" / "leaderboard.csv")
    assert {"declutr", "untrained"} <= set(board["model"])
    assert {d["stage"] for d in list_datasets(str(tmp_path / "a"))} >= {"corpus", "filter", "train", "evaluate"}


def test_a_failed_job_fails_the_command(cluster, tmp_path, tiny_config):
    result = cpipe(
        "submit",
        "--address",
        cluster["dashboard"],
        "--no-install",
        "--config",
        str(tiny_config),
        "--corpus",
        str(tmp_path / "missing"),
        "--artifacts",
        str(tmp_path / "a"),
    )
    assert result.returncode == 1 and "failed" in result.stdout
    assert "corpus path does not exist" in result.stdout


def test_the_workers_of_our_local_instance_ask_it_and_no_other_on_the_host(cluster):
    """Ray Train's controller asks Ray's state API whether its actors live. Beside another instance (here the
    module's `ray start` cluster, last: its jobs ran without a local instance beside it) that API, given no
    address, used the other one or failed ("Found multiple active Ray instances"); the workers of the instance
    ray_init starts name theirs. The actor has a runtime_env of its own, as Train's controller does."""
    import ray

    from pipeline.ray_session import ray_init, ray_shutdown

    ray_init(None, 1)
    try:

        @ray.remote(num_cpus=0)
        class Probe:
            def state(self) -> str:
                from ray.util.state import get_actor

                return get_actor(ray.get_runtime_context().get_actor_id()).state

        probe = Probe.options(runtime_env={"env_vars": {"CPIPE_PROBE": "1"}}).remote()
        assert ray.get(probe.state.remote(), timeout=120) == "ALIVE"
    finally:
        ray_shutdown()
