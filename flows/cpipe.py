"""The `cpipe` console script. `cpipe run` and `cpipe evaluate` run in a session of their own (`python -m flows.cli`),
this process passing them the signals it gets, and then their exit code; the other commands run here. The run dies
with this process (flows.processes). Only the standard library is imported here: every run starts here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from flows.processes import PARENT, die_with_parent, exit_now


def main() -> int:
    if sys.argv[1:2] not in (["run"], ["evaluate"]):
        from flows.cli import main as command

        exit_now(command())
    run = subprocess.Popen(
        [sys.executable, "-m", "flows.cli", *sys.argv[1:]],
        start_new_session=True,
        env={**os.environ, PARENT: str(os.getpid())},
        preexec_fn=die_with_parent if sys.platform == "linux" else None,
    )
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, lambda received, _: run.send_signal(received))
    code = run.wait()
    return 128 - code if code < 0 else code  # ended by a signal: the shell's 128 + N


if __name__ == "__main__":
    sys.exit(main())
