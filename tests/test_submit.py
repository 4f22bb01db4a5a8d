"""`cpipe submit` without a cluster: a corpus URL's password is neither printed nor put in the job's entrypoint
(the job gets it through its runtime_env's env_vars), and a dashboard that is not there is one line, exit 2.
The cluster is a local HTTP server answering the Ray Jobs API requests the client makes, recording what it is sent."""

from __future__ import annotations

import base64
import json
import shlex
from http.server import BaseHTTPRequestHandler
from importlib.metadata import version

import pytest

from flows.cli import _overrides, build_parser
from flows.submit import job_command, runtime_env
from pipeline.corpus.credentials import ENV, concealed
from pipeline.corpus.download import fetch
from pipeline.preflight import configured
from tests.conftest import cpipe, free_port, http_server

SECRET = "S3CRETPW-9046"


class Dashboard(BaseHTTPRequestHandler):
    """The Jobs API endpoints `JobSubmissionClient.submit_job` calls; every package is already uploaded."""

    def do_GET(self) -> None:
        if self.path == "/api/version":
            return self._json({"version": "4", "ray_version": version("ray"), "ray_commit": "test"})
        self._json({})  # /api/packages/...: the working directory is there, nothing is uploaded

    def do_POST(self) -> None:
        self.server.jobs.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self._json({"submission_id": "raysubmit_test", "job_id": None})

    def _json(self, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


class Protected(BaseHTTPRequestHandler):
    """The corpus, to alice with SECRET only."""

    def do_GET(self) -> None:
        if self.headers.get("Authorization") != "Basic " + base64.b64encode(f"alice:{SECRET}".encode()).decode():
            return self.send_error(401)
        data = self.server.corpus
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


def run_args(url: str, tmp_path, tiny_config) -> list[str]:
    return [
        "--config",
        str(tiny_config),
        "--corpus",
        url,
        "--artifacts",
        str(tmp_path / "a"),
        "--until",
        "corpus",
        "--set",
        f"corpus.download_dir={tmp_path / 'downloads'}",
    ]


def test_the_entrypoint_holds_no_credential_and_the_env_vars_hold_it(tmp_path, tiny_config):
    url = f"https://alice:{SECRET}@host.example/corpus.txt"
    entrypoint, secrets = job_command(run_args(url, tmp_path, tiny_config) + ["--set", f"evaluate.data={url}"])
    assert SECRET not in entrypoint and "alice" not in entrypoint
    assert shlex.split(entrypoint)[:4] == ["python", "-m", "flows.cli", "run"]
    assert "https://***@host.example/corpus.txt" in shlex.split(entrypoint)
    assert json.loads(secrets[ENV]) == {"https://***@host.example/corpus.txt": url}
    assert runtime_env(install=False, secrets=secrets)["env_vars"][ENV] == secrets[ENV]
    assert job_command(["--corpus", "/local/corpus"])[1] == {}  # nothing to hide, nothing sent


def job_resolves(job: dict, tmp_path, monkeypatch) -> bytes:
    """What the job's `cpipe run` downloads as its corpus, given only its entrypoint and env_vars: the options go
    the way cmd_run takes them, up to the download the corpus stage makes."""
    monkeypatch.delenv(ENV, raising=False)  # this process remembers nothing the job is not sent
    for name, value in job["runtime_env"]["env_vars"].items():
        monkeypatch.setenv(name, value)
    args = build_parser().parse_args(shlex.split(job["entrypoint"])[3:])
    cfg = configured(
        **concealed(
            dict(
                config=args.config,
                corpus=args.corpus,
                artifacts=args.artifacts,
                until=args.until,
                overrides=_overrides(args),
            )
        )
    )
    [source] = cfg.corpus.sources
    assert SECRET not in source
    return fetch(source, cfg.corpus.download_dir, retries=0, timeout=5.0, progress=False).read_bytes()


@pytest.mark.slow
def test_submit_prints_and_sends_no_password_and_the_job_still_downloads(tmp_path, tiny_config, monkeypatch):
    with http_server(Dashboard) as dashboard, http_server(Protected) as corpus:
        dashboard.jobs, corpus.corpus = [], b"one document\n" * 50
        url = f"http://alice:{SECRET}@127.0.0.1:{corpus.server_port}/corpus.txt"
        result = cpipe(
            "submit",
            "--address",
            f"http://127.0.0.1:{dashboard.server_port}",
            "--no-install",
            "--no-wait",
            *run_args(url, tmp_path, tiny_config),
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert "submitted job raysubmit_test" in result.stdout and "***@127.0.0.1" in result.stdout
        assert SECRET not in result.stdout + result.stderr
        [job] = dashboard.jobs
        assert SECRET not in job["entrypoint"] and SECRET in job["runtime_env"]["env_vars"][ENV]
        assert SECRET not in json.dumps({k: v for k, v in job.items() if k != "runtime_env"})
        assert job_resolves(job, tmp_path, monkeypatch) == corpus.corpus


@pytest.mark.slow
def test_submit_to_a_dashboard_that_is_not_there_is_one_line_exit_2():
    address = f"http://127.0.0.1:{free_port()}"
    result = cpipe("submit", "--address", address, "--corpus", "/x")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(f"cpipe: error: --address {address}: ")
