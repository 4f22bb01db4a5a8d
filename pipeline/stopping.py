"""Stopping a run on SIGINT or SIGTERM, with nothing on the terminal after it but the caller's own last line.

`install()` (the CLI) makes both signals unwind the run as Ctrl-C does, with KeyboardInterrupt: the exception
Ray's blocking calls give up on (Prefect's SIGTERM handler raises one that they ignore until they return, and
Ray's own is preceded by abseil's, which prints a stack dump and aborts 3 s later). Before it unwinds, stdout and
stderr go to /dev/null: Prefect's crash reports, Ray's teardown and its workers' forwarded output are no news
to the user, who stopped the run. Each Prefect flow and ray.init take SIGTERM over as they start; `reassert()`
puts the handler back (the tasks, before each stage). A second signal ends the process at once.
"""

from __future__ import annotations

import _thread
import logging
import os
import signal
import sys
import threading

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_installed = False
signum: int | None = None  # the signal that stopped the run
_terminal: int | None = None  # the stderr the process started with, for the last line


def install() -> None:
    global _installed
    _installed = True
    reassert()
    if threading.current_thread() is threading.main_thread():
        # Ctrl-C signals the terminal's whole process group: Prefect's server would stop at once, and the run,
        # unwinding, would retry for minutes to tell it how it ended (Ray training on meanwhile). Blocked
        # here, before any thread or process starts, SIGINT stays blocked in all of them; one thread takes it
        # and has the main thread's handler run, as if it had come there.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        threading.Thread(target=_forward_sigint, name="cpipe-sigint", daemon=True).start()


def _forward_sigint() -> None:
    while True:
        signal.sigwait({signal.SIGINT})
        _thread.interrupt_main(signal.SIGINT)


def reassert() -> None:
    if _installed and signum is None and threading.current_thread() is threading.main_thread():
        for s in SIGNALS:
            signal.signal(s, _stop)


def _stop(received: int, frame) -> None:
    global signum, _terminal
    if signum is not None:
        os._exit(128 + signum)
    signum = received
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
    raise KeyboardInterrupt


def say(line: str) -> None:
    """`line` on the terminal the process started with (its stderr)."""
    os.write(_terminal if _terminal is not None else 2, f"{line}\n".encode())
