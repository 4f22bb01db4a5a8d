"""Stopping a run on SIGINT or SIGTERM, with nothing on the terminal after it but the caller's own last line.

Inside `stoppable()` (the CLI's run) both signals unwind the run as Ctrl-C does, with KeyboardInterrupt: the
exception Ray's blocking calls give up on (Prefect's SIGTERM handler raises one that they ignore until they
return, and Ray's own is preceded by abseil's, which prints a stack dump and aborts 3 s later). Before it
unwinds, stdout and stderr go to /dev/null: Prefect's crash reports, Ray's teardown and its workers' forwarded
output are no news to the user, who stopped the run. Each Prefect flow and ray.init take SIGTERM over as they
start; `reassert()` puts the handler back (the tasks, before each stage). A second signal ends the process at
once. A signal to the run's whole cgroup (systemd's default KillMode, Slurm) reaches its helpers too: SIGINT is
kept from them (below), but SIGTERM is how they are stopped, so the caller's `on_stop` keeps the run from waiting
on dead ones. (`cpipe` keeps a process group's signals from them: flows.cpipe.)
"""

from __future__ import annotations

import _thread
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM)
signum: int | None = None  # the signal that stopped the run
_active = False
_terminal: int | None = None  # the stderr the run had before it was stopped, for the last line
_on_stop: Callable[[], None] = lambda: None
_stopped_at = 0.0  # time.monotonic() of the stop


@contextmanager
def stoppable(on_stop: Callable[[], None] = lambda: None) -> Iterator[None]:
    """`on_stop` runs in the signal handler, before the run unwinds: what the caller must change for a run that
    is ending (the CLI stops Prefect retrying)."""
    global _active, _on_stop, signum
    signum = None
    _on_stop = on_stop
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handlers = {s: signal.getsignal(s) for s in SIGNALS}
    # Ctrl-C signals the terminal's whole process group: Prefect's server would stop at once, and the run,
    # unwinding, would retry for minutes to tell it how it ended (Ray training on meanwhile). Blocked here,
    # before the run starts a thread or a process, SIGINT stays blocked in all of them; one thread takes it
    # and has the main thread's handler run, as if it had come there.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    done = threading.Event()
    forwarder = threading.Thread(target=_forward_sigint, args=(done,), name="cpipe-sigint", daemon=True)
    _active = True
    reassert()
    forwarder.start()
    try:
        yield
    finally:
        _active = False
        done.set()
        forwarder.join()
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for s, handler in handlers.items():
            signal.signal(s, handler)
        # After a stop the output stays with /dev/null: Prefect and Ray still log as the process exits.


def reassert() -> None:
    if _active and signum is None and threading.current_thread() is threading.main_thread():
        for s in SIGNALS:
            signal.signal(s, _stop)


def _forward_sigint(done: threading.Event) -> None:
    while not done.is_set():
        if signal.sigtimedwait({signal.SIGINT}, 0.2) is not None:
            _thread.interrupt_main(signal.SIGINT)


def _stop(received: int, frame) -> None:
    global signum, _stopped_at, _terminal
    if signum is not None:
        # Within a second it is the same stop arriving twice (a unit's SIGTERM to every process, and cpipe passing
        # on its own), not a user insisting.
        if time.monotonic() - _stopped_at > 1:
            os._exit(128 + signum)
        return
    signum, _stopped_at = received, time.monotonic()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, RuntimeError):  # RuntimeError: the signal came in the middle of a write to it
            pass
    _terminal = os.dup(2)
    logging.disable(logging.CRITICAL)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)
    _on_stop()
    raise KeyboardInterrupt


def say(line: str) -> None:
    """`line` on the stderr the run had before it was stopped."""
    os.write(_terminal if _terminal is not None else 2, f"{line}\n".encode())
