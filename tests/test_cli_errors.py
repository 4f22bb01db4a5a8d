"""The command line as a user meets it: a mistake answers in one line before torch, Prefect or Ray are imported,
and a stopped run says how to go on in one line, leaving no Ray process behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler

import psutil
import pytest

from pipeline.config import load_config
from pipeline.errors import ConfigError
from pipeline.preflight import configured
from tests.conftest import CPIPE, ROOT, http_server, prebuild, signal_every_process

HEAVY = ("torch", "transformers", "prefect", "ray")
# Calls the CLI's main as the run cpipe starts (python -m flows.cli) does, then says which heavy modules the error
# path imported.
PROBE = (
    "import sys; from flows.cli import main; code = main(sys.argv[1:]); "
    f"print(sorted(m for m in {HEAVY!r} if m in sys.modules)); sys.exit(code)"
)


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.lr=[1,", "cpipe: error: --set train.lr: not valid YAML: expected the node content"),
        (
            "train.lr=!!python/object/apply:os.system [echo hi]",
            "cpipe: error: --set train.lr: not valid YAML: could not determine a constructor for the tag",
        ),
        ("model.base=/no/such/dir", "cpipe: error: model.base: /no/such/dir: no such directory"),
    ],
)
@pytest.mark.slow
def test_a_usage_error_is_one_line_and_exit_2_before_any_heavy_import(tmp_path, tiny_corpus, override, message):
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            PROBE,
            "run",
            "--corpus",
            str(tiny_corpus),
            "--artifacts",
            str(tmp_path / "a"),
            "--set",
            override,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(message), proc.stderr
    assert proc.stdout.strip() == "[]", f"imported before the error: {proc.stdout}"
    assert not (tmp_path / "a").exists()


def test_set_values_that_are_not_yaml_name_the_key():
    with pytest.raises(ConfigError, match=r"^--set train\.lr: not valid YAML: "):
        load_config(None, ["train.lr=[1,"])
    with pytest.raises(ConfigError, match=r"^--set evaluate\.data: not valid YAML: could not determine a constructor"):
        load_config(None, ["evaluate.data=!!python/name:os.system"])


@pytest.mark.parametrize(
    "files, problem",
    [
        ({}, "not a model directory (no config.json in"),
        ({"config.json": "{}"}, "no weights file in"),
    ],
)
def test_model_base_is_checked_before_any_work(tmp_path, tiny_corpus, files, problem):
    base = tmp_path / "base"
    base.mkdir()
    for name, text in files.items():
        (base / name).write_text(text)
    with pytest.raises(ConfigError, match=rf"^model\.base: {re.escape(f'{base}: {problem}')}"):
        configured(corpus=str(tiny_corpus), artifacts=str(tmp_path / "a"), overrides=[f"model.base={base}"])
    cfg = configured(
        corpus=str(tiny_corpus), artifacts=str(tmp_path / "a"), overrides=[f"model.base={base}"], first="evaluate"
    )  # scoring models never loads the base
    assert cfg.model.base == str(base)


@pytest.mark.slow
def test_plain_pytest_collects_from_the_project_root():
    """`.venv/bin/pytest`, not only `python -m pytest`: test_download imports `tests.conftest`."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    pytest_script = os.path.join(os.path.dirname(sys.executable), "pytest")  # .venv/bin/pytest
    proc = subprocess.run(
        [pytest_script, "--collect-only", "-q", "tests/test_download.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and re.search(r"^\d+ tests collected", proc.stdout, re.M), proc.stdout[-2000:]


def _stop_after(proc: subprocess.Popen, ready, sig: int, group: bool = False) -> tuple[int, list[psutil.Process]]:
    """Wait until `ready()`, note the run's processes, send `sig` (to its process group: Ctrl-C, `timeout`), wait."""
    deadline = time.monotonic() + 600
    while not ready():
        assert proc.poll() is None, f"the run ended early: {proc.returncode}"
        assert time.monotonic() < deadline, "the run did not get there in 600 s"
        time.sleep(0.2)
    children = psutil.Process(proc.pid).children(recursive=True)
    os.killpg(proc.pid, sig) if group else proc.send_signal(sig)
    return proc.wait(timeout=180), children


def _alive(processes: list[psutil.Process], grace: float = 15.0) -> list[str]:
    """The processes still running `grace` seconds after the run exited: on a loaded machine a Ray worker told
    to exit may take seconds to get the CPU to do it."""

    def running(p: psutil.Process) -> bool:
        try:
            return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    psutil.wait_procs([p for p in processes if running(p)], timeout=grace)
    alive = []
    for p in filter(running, processes):
        try:
            alive.append(" ".join(p.cmdline())[:120])
        except psutil.NoSuchProcess:
            pass
    return alive


@pytest.mark.e2e
def test_a_stopped_run_says_where_training_resumes_and_the_rerun_resumes_there(
    tmp_path, tiny_config, tiny_corpus, tiny_sts
):
    art = tmp_path / "a"
    overrides = ["augment.epochs=200", "runs={declutr: {}}", "train.max_steps=3000", "train.checkpoint_every=20"]
    command = [
        CPIPE,
        "run",
        "--config",
        str(tiny_config),
        "--corpus",
        str(tiny_corpus),
        "--eval-data",
        str(tiny_sts),
        "--artifacts",
        str(art),
        "--until",
        "train",
        *(a for o in overrides for a in ("--set", o)),
    ]
    prebuild(tiny_config, tiny_corpus, art, "init", overrides)  # the runs have only training left to do

    def start(name: str) -> subprocess.Popen:
        out, err = open(tmp_path / f"{name}.out", "w"), open(tmp_path / f"{name}.err", "w")
        return subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=err, start_new_session=True)

    # SIGTERM to the whole process group once training has recorded a checkpoint, as `timeout` sends it.
    first = start("first")
    code, children = _stop_after(
        first, lambda: list(art.glob("_ray/train-*/checkpoint_manager_snapshot.json")), signal.SIGTERM, group=True
    )
    out, err = (tmp_path / "first.out").read_text(), (tmp_path / "first.err").read_text()
    assert code == 143, err[-3000:]
    last = err.rstrip("\n").splitlines()[-1]
    assert last.startswith("cpipe: stopped; training resumes from step "), err[-3000:]
    step = int(last.rsplit(" ", 1)[1])
    assert step > 0 and step % 20 == 0
    for noise in ("Traceback", "absl", "SIGTERM received", "Crash detected", "Found multiple active Ray"):
        assert noise not in out + err, (out + err)[-3000:]
    assert not _alive(children), _alive(children)

    # The rerun resumes there; Ctrl-C (SIGINT to the process group) stops it as SIGTERM did.
    second = start("second")
    code, children = _stop_after(
        second, lambda: "resuming from step" in (tmp_path / "second.out").read_text(), signal.SIGINT, group=True
    )
    out, err = (tmp_path / "second.out").read_text(), (tmp_path / "second.err").read_text()
    assert f"resuming from step {step}\n" in out, out[-3000:]
    assert code == 130, err[-3000:]
    assert err.rstrip("\n").splitlines()[-1].startswith("cpipe: stopped; training resumes from step ")
    assert "Traceback" not in out + err and "absl" not in out + err, (out + err)[-3000:]
    assert not _alive(children), _alive(children)


@pytest.mark.e2e
def test_a_run_whose_every_process_is_sent_sigterm_at_once_says_it_stopped(tmp_path, tiny_config):
    """As systemd's default KillMode and Slurm's scancel stop a run: every process at once, the run's temporary
    Prefect server too. The run tells the dead server once how it ended, and says so, instead of retrying for
    minutes (past systemd's and Slurm's grace before SIGKILL). Data stages only: with Ray's processes signalled
    too, Ray's driver may end the run first (docs/operations.md, "Stopping and resuming a run")."""
    asked = threading.Event()

    class Stalled(BaseHTTPRequestHandler):  # a corpus download that never ends
        def do_GET(self):
            asked.set()
            time.sleep(120)

        def log_message(self, *args):
            pass

    out, err = tmp_path / "out", tmp_path / "err"
    with http_server(Stalled) as srv, open(out, "w") as stdout, open(err, "w") as stderr:
        command = [
            CPIPE,
            "run",
            "--config",
            str(tiny_config),
            "--artifacts",
            str(tmp_path / "a"),
            "--until",
            "corpus",
            "--corpus",
            f"http://127.0.0.1:{srv.server_port}/corpus.txt",
            "--set",
            f"corpus.download_dir={tmp_path / 'downloads'}",
        ]
        env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}  # a temporary server: the run's own
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=stdout, stderr=stderr, start_new_session=True)
        deadline = time.monotonic() + 300
        while not (asked.is_set() and "corpus: building" in err.read_text() + out.read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, err.read_text()[-3000:]
            time.sleep(0.2)
        signal_every_process(proc.pid, signal.SIGTERM)
        code = proc.wait(timeout=100)  # retrying, Prefect took over two minutes
    assert code == 143, err.read_text()[-3000:]
    assert err.read_text().rstrip("\n").splitlines()[-1] == "cpipe: stopped; rerun to resume", err.read_text()[-3000:]
