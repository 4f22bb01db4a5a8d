"""A `cpipe` that is killed outright (`kill -9`, the OOM killer) takes its run with it: the run's process and every
process below it are gone soon after, and the work in flight is not finished by orphans no one waits for."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import psutil
import pytest

from flows.processes import GRACE_S
from tests.conftest import CPIPE, ROOT, write_sts
from tests.helpers import tiny_model


@pytest.mark.e2e
def test_a_sigkilled_cpipe_takes_a_run_scoring_models_side_by_side_on_ray_with_it(tmp_path):
    """Two models scored at once (evaluate.workers=2: Prefect's thread pool, each fanning out on Ray): a stopped run's
    unwinding waited for both to finish, and an orphaned run went on scoring for minutes."""
    models = [str(tiny_model(tmp_path / name)) for name in ("m1", "m2")]
    data = write_sts(tmp_path / "sts", n_pairs=200_000)  # minutes of scoring: far more than the run's grace
    shutil.rmtree(data / "STSBenchmark")
    art, err = tmp_path / "a", tmp_path / "err"
    command = [
        CPIPE,
        "evaluate",
        *(a for m in models for a in ("--model", m)),
        "--eval-data",
        str(data),
        "--artifacts",
        str(art),
        "--set",
        "evaluate.workers=2",
    ]
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}  # a temporary server: the run's own
    with open(err, "w") as stderr:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=stderr, stderr=stderr, start_new_session=True)
    deadline = time.monotonic() + 600
    while "evaluate: building" not in err.read_text():
        assert proc.poll() is None and time.monotonic() < deadline, err.read_text()[-3000:]
        time.sleep(0.2)
    time.sleep(3)  # their units on Ray's workers
    run = psutil.Process(proc.pid).children(recursive=True)
    assert any("flows.cli" in " ".join(p.cmdline()) for p in run) and len(run) > 5, [p.cmdline() for p in run]
    proc.kill()
    proc.wait()
    gone, alive = psutil.wait_procs(run, timeout=GRACE_S + 240)  # a hang guard: they go within seconds of the grace
    assert not [p for p in alive if _running(p)], [p.cmdline() for p in alive if _running(p)]
    assert not list(art.glob("evaluate/*/_SUCCESS")), "the orphaned run finished scoring"


def _running(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
