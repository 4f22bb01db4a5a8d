"""`cpipe serve` on a shared machine: the Prefect server it starts takes requests only from its user (the auth
string in a file only they can read), the data deployment keeps `--eval-data`, and SIGTERM stops it quietly."""

from __future__ import annotations

import base64
import json
import os
import signal
import stat
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from flows.cli import build_parser, serve_deployments
from flows.serve import ENV_FILE
from tests.conftest import CPIPE, PREFECT, ROOT, wait_for


def test_the_data_deployment_takes_eval_data_as_the_others_do(tiny_corpus, tiny_sts):
    """Decontamination keeps the evaluation data out of the pairs: the served data flow must get the same data
    as the flows that score on it, not the profile's URLs."""
    args = build_parser().parse_args(["serve", "--corpus", str(tiny_corpus), "--eval-data", str(tiny_sts)])
    deployments = {d.flow_name: d for d in serve_deployments(args)}
    assert set(deployments) == {"data", "train", "evaluate", "full-pipeline"}
    for name in ("data", "train", "full-pipeline"):
        assert deployments[name].parameters["eval_data"] == str(tiny_sts), name
        assert "eval_data" in deployments[name]._parameter_openapi_schema.properties, name
    assert "corpus" not in deployments["evaluate"].parameters  # each gets only what it takes


def start_serve(home: Path, log: Path, *args: str) -> subprocess.Popen:
    """`cpipe serve` as a user starts it: no server named, its own Prefect home; in a session of its own, so that
    the test can signal its whole process group as a terminal or a service manager does."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API_URL", "PREFECT_API_AUTH"))}
    env["PREFECT_HOME"] = str(home)
    with open(log, "w") as out, open(log.with_suffix(".err"), "w") as err:
        return subprocess.Popen(
            [CPIPE, "serve", *args], cwd=ROOT, env=env, stdout=out, stderr=err, start_new_session=True
        )


def serving(serve: subprocess.Popen, log: Path) -> bool:
    assert serve.poll() is None, log.read_text() + log.with_suffix(".err").read_text()
    return "cpipe: serving data/serve" in log.read_text()


def client_settings(home: Path) -> dict[str, str]:
    lines = (home / ENV_FILE).read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def request(method: str, url: str, auth: str | None = None, body: dict | None = None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    if auth is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(auth.encode()).decode()
    data = None if body is None else json.dumps(body).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data, headers, method=method), timeout=30) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, {}


@pytest.mark.prefect
def test_the_server_serve_starts_answers_only_its_users_auth_string_and_sigterm_stops_all_quietly(tmp_path):
    home, log = tmp_path / "prefect-home", tmp_path / "serve.log"
    serve = start_serve(home, log)
    try:
        wait_for(lambda: serving(serve, log), "cpipe serve to serve its deployments", timeout=300)
        env_file = home / ENV_FILE
        assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
        settings = client_settings(home)
        api, auth = settings["PREFECT_API_URL"], settings["PREFECT_API_AUTH_STRING"]
        assert api.startswith("http://127.0.0.1:") and len(auth) >= 32
        assert auth not in log.read_text()  # the output says where the string is, never the string

        # Another local user's request (no auth string, or a wrong one) is refused: no flow run as this user.
        status, found = request("GET", f"{api}/deployments/name/data/serve", auth)
        assert status == 200, found
        run = {"parameters": {"corpus": [str(tmp_path / "private")], "artifacts": str(tmp_path / "theirs")}}
        for wrong in (None, auth[:-1] + ("x" if auth[-1] != "x" else "y")):
            status, _ = request("POST", f"{api}/deployments/{found['id']}/create_flow_run", wrong, run)
            assert status == 401
        assert request("POST", f"{api}/flow_runs/filter", auth, {})[1] == []

        # The user's own client, with the file's settings, is answered.
        listed = subprocess.run(
            [PREFECT, "deployment", "ls"],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PREFECT_HOME": str(home), "COLUMNS": "250", **settings},
        )
        assert listed.returncode == 0 and "full-pipeline/serve" in listed.stdout, listed.stdout + listed.stderr

        os.killpg(serve.pid, signal.SIGTERM)  # the whole group, as systemd's or a terminal's stop does
        stopped_quietly(serve, api, home, log)
    finally:
        killed(serve)


@pytest.mark.prefect
def test_sigterm_as_soon_as_serve_says_it_serves_stops_it_quietly(tmp_path):
    """The runner may still be starting (its deployments registered, its loop not yet polling)."""
    home, log = tmp_path / "prefect-home", tmp_path / "serve.log"
    serve = start_serve(home, log)
    try:
        wait_for(lambda: serving(serve, log), "cpipe serve to serve its deployments", timeout=300)
        api = client_settings(home)["PREFECT_API_URL"]
        serve.send_signal(signal.SIGTERM)  # this process alone: its server, in a session of its own, is its to stop
        stopped_quietly(serve, api, home, log)
    finally:
        killed(serve)


def stopped_quietly(serve: subprocess.Popen, api: str, home: Path, log: Path) -> None:
    # A hang guard, not a timing claim: Prefect's own handler took over a minute against its stopped server.
    code = serve.wait(timeout=60)
    stderr = log.with_suffix(".err").read_text()
    assert code == 128 + signal.SIGTERM, stderr
    assert "Traceback" not in stderr and "RuntimeWarning" not in stderr and "ERROR" not in stderr, stderr
    assert not (home / ENV_FILE).exists()
    with pytest.raises(OSError):  # the server stopped with it
        urllib.request.urlopen(f"{api}/health", timeout=5)


def killed(serve: subprocess.Popen) -> None:
    if serve.poll() is None:
        os.killpg(serve.pid, signal.SIGKILL)
        serve.wait()
