"""`cpipe serve`: the flows served as deployments; each flow run is a process of this user's on this machine.

Any local user can reach a port on 127.0.0.1, and a Prefect server takes any request by default: anyone could
start a flow run as this user, reading and writing paths of their choosing. So, unless a server is named
(PREFECT_API_URL, in the environment or the Prefect profile: its operator secures it), `cpipe serve` starts one
that answers only requests carrying an auth string made for this serve (Prefect's basic auth:
PREFECT_SERVER_API_AUTH_STRING on the server, PREFECT_API_AUTH_STRING in its clients, the served runs' included).
The server's URL and the auth string go to `$PREFECT_HOME/cpipe-serve.env`, a file only this user can read, for
`prefect deployment run` in another shell; the string never appears on a command line or in the output.

The server runs in a session of its own, so that a signal to the terminal's or the job's whole process group
leaves it up while serving stops: the served deployments are paused and running flow runs marked cancelled on
a live server in a second, where on a dead one Prefect retried for a minute and then printed its tracebacks.
"""

from __future__ import annotations

import asyncio
import ctypes  # noqa: F401  (imported before the fork: die_with_parent runs between fork and exec, threads about)
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from flows.processes import die_with_parent
from pipeline.errors import InputError

ENV_FILE = "cpipe-serve.env"
SERVER_LOG = "cpipe-serve-server.log"
HOST = "127.0.0.1"
# A server streams a run's logs to `prefect deployment run --watch` only when told to (off by default in Prefect
# 3): without it, a run stopped by bad input shows the watcher its final state's name and not the one-line reason.
LOG_STREAMING = {
    "PREFECT_SERVER_LOGS_STREAM_OUT_ENABLED": "true",
    "PREFECT_SERVER_LOGS_STREAM_PUBLISHING_ENABLED": "true",
}


def serve(deployments: list, on_stop: Callable[[], None] = lambda: None) -> int:
    """Serve `deployments` until SIGINT or SIGTERM; the exit status is the shell's 128 + the signal's number.
    `on_stop` runs as a stop begins (the CLI stops Prefect retrying a server that is gone)."""
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, get_current_settings, temporary_settings

    stopped: list[int] = []

    def stop(signum: int, frame) -> None:
        stopped.append(signum)
        raise KeyboardInterrupt  # before the runner starts: only the server is to stop

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        settings = get_current_settings()
        if settings.api.url:
            return _run(deployments, stopped, on_stop, f"on the Prefect server at {settings.api.url}")
        with _private_server(Path(settings.home)) as (api, auth, env_file):
            with temporary_settings(updates={PREFECT_API_URL: api, PREFECT_API_AUTH_STRING: auth}):
                return _run(
                    deployments,
                    stopped,
                    on_stop,
                    f"on a Prefect server at {api} that takes requests "
                    f"only with the auth string in {env_file} (only you can read it)",
                    f"set -a; . {env_file}; set +a",
                )
    except KeyboardInterrupt:
        return 128 + (stopped[0] if stopped else signal.SIGINT)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(
    deployments: list, stopped: list[int], on_stop: Callable[[], None], where: str, setup: str | None = None
) -> int:
    from prefect.runner import Runner

    class QuietRunner(Runner):
        def handle_sigterm(self, signum: int, frame) -> None:
            # Prefect's own calls the coroutine `stop` without awaiting it (a RuntimeWarning) and exits 0 from
            # inside the event loop; here the runner stops as at its end, and the exit status says why.
            stopped.append(signum)
            on_stop()
            with suppress(RuntimeError):  # the loop is over: serving has stopped already
                asyncio.get_running_loop().call_soon_threadsafe(lambda: asyncio.ensure_future(self.stop_anyway()))

        async def stop_anyway(self) -> None:
            while not self.started:  # the signal came as the runner was starting: stop it once it has
                await asyncio.sleep(0.1)
            try:
                await self.astop()
            except Exception:  # the server is gone (stopped with a whole cgroup): nothing to tell it; stop serving
                self._loops_task_group.cancel_scope.cancel()

    runner = QuietRunner(pause_on_shutdown=True, limit=None)
    for deployment in deployments:
        runner.add_deployment(deployment)
    _say_how_to_run(deployments, where, setup)
    try:
        asyncio.run(runner.start())
    except Exception:
        if not stopped:
            raise
        # Pausing the deployments failed on a server that went with the signal: the stop is the news.
    return 128 + stopped[0] if stopped else 0


def _say_how_to_run(deployments: list, where: str, setup: str | None = None) -> None:
    names = [f"{d.flow_name}/{d.name}" for d in deployments]
    print(f"cpipe: serving {', '.join(names)} {where}; to run one, in another shell:", flush=True)
    if setup:
        print(f"  {setup}")
    print(f"  prefect deployment run {names[-1]} --param corpus=... --param eval_data=...", flush=True)


@contextmanager
def _private_server(home: Path) -> Iterator[tuple[str, str, Path]]:
    """A Prefect server on 127.0.0.1 that answers only requests with its auth string: (API URL, auth string,
    the 0600 file holding both); stopped, and the file removed, on the way out."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    auth, port = secrets.token_urlsafe(32), _free_port()
    api = f"http://{HOST}:{port}/api"
    env = {**os.environ, "PREFECT_SERVER_API_AUTH_STRING": auth, "PREFECT_HOME": str(home), **LOG_STREAMING}
    log_path = home / SERVER_LOG
    with open(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "prefect", "server", "start", "--host", HOST, "--port", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            umask=0o077,  # its database holds every run's parameters and logs: this user's alone
            preexec_fn=die_with_parent if sys.platform == "linux" else None,
        )
    env_file = home / ENV_FILE
    try:
        _wait_healthy(server, api, log_path)
        _write_private(
            env_file,
            f"# cpipe serve's Prefect server (pid {os.getpid()}); in a shell: "
            f"set -a; . {env_file}; set +a\n"
            f"PREFECT_API_URL={api}\nPREFECT_API_AUTH_STRING={auth}\n",
        )
        yield api, auth, env_file
    finally:
        with suppress(OSError):
            if auth in env_file.read_text():  # another serve's file, written since, stays
                env_file.unlink()
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _wait_healthy(server: subprocess.Popen, api: str, log: Path) -> None:
    """Until the server answers its health check (which needs no auth string), or exits, or its time is up."""
    from prefect.settings import get_current_settings

    deadline = time.monotonic() + get_current_settings().server.ephemeral.startup_timeout_seconds
    while time.monotonic() < deadline:
        if server.poll() is not None:
            lines = log.read_text(errors="replace").strip().splitlines() or ["(no output)"]
            raise InputError(
                f"the Prefect server cpipe serve started exited with status {server.returncode}: "
                f"{lines[-1]} (its log: {log})"
            )
        with suppress(OSError):
            with urllib.request.urlopen(f"{api}/health", timeout=2) as response:
                if response.status == 200:
                    return
        time.sleep(0.3)
    raise InputError(f"the Prefect server cpipe serve started did not answer at {api} in time (its log: {log})")


def _write_private(path: Path, text: str) -> None:
    """Write `path` readable by this user alone, from its first byte (an older file's mode is not kept)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # mode 0600
    with open(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
