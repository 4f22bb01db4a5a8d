"""How a run's processes die with the `cpipe` that started them, and how a run exits.

A signal to the caller's whole process group (Ctrl-C, `timeout`, `kill -- -PGID`) would otherwise reach the run's
Prefect server and Ray processes with the run: Ray's driver ends the run at once when its raylet dies, before the
run can say where training resumes, or the run waits minutes on the dead server. The run dies with its `cpipe`, as
Ray's own processes die with the run: a SIGKILLed `cpipe` (the OOM killer, `kill -9`) leaves its run a SIGTERM and
GRACE_S seconds to stop as a stopped run does, then the run's whole session is killed. Only the standard library
is imported here: every run starts here.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time
from typing import NoReturn

# Set for the run `cpipe` starts: its pid. The run's process takes it out of its environment at once.
PARENT = "CPIPE_PARENT"
# How long an orphaned run may take to stop before its session is killed: a stop takes a few seconds, but one that
# waits on work in flight (a stage's models scored side by side on Ray: Prefect's thread pool lets its tasks finish)
# would go on computing for minutes with no one to report to.
GRACE_S = 15.0


def die_with_parent() -> None:
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: stopped as by a kill


def end_with_parent() -> None:
    """In the run `cpipe` started (`python -m flows.cli`, a session of its own): once that `cpipe` is gone, kill the
    run's session GRACE_S seconds later, this process and every one below it (its Prefect server, Ray's local
    instance, a pool's workers), whatever the stop that PR_SET_PDEATHSIG began is waiting on. Also covers a `cpipe`
    that died before the death signal was set."""
    parent = os.environ.pop(PARENT, None)
    if parent is None or os.getpgrp() != os.getpid():  # not cpipe's run: the group is someone else's too
        return

    def watch() -> None:
        while os.getppid() == int(parent):
            time.sleep(0.5)
        time.sleep(GRACE_S)
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, name="cpipe-parent", daemon=True).start()


def exit_now(code: int) -> NoReturn:
    """Exit with `code` once Python's exit handlers have run (Ray's shutdown, Prefect's temporary server, logging),
    without the interpreter's teardown: there pyarrow's parquet threads now and then abort the process, after its
    work is done and printed ("terminate called without an active exception", SIGABRT: apache/arrow#34314)."""
    atexit._run_exitfuncs()  # CPython's own exit step, not public API
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)
