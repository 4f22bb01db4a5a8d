"""One model's scoring progress, task by task: a log line on the "cpipe" logger as each unit's rows come back,
"evaluate declutr (seed 0): STSBenchmark 3/5 in 12.3 s", which Prefect's logs (and, under `cpipe run` and
`cpipe evaluate`, Prefect's console) show; a tqdm bar instead where nothing prints that logger to the terminal
but stderr is one (the stage run from a script or a notebook), so that scoring is never minutes of silence.

The seconds are the unit's own (pipeline.evaluate.stage.score_unit times it where it runs), so a unit that ran on
Ray beside others reports what it took, not how long the driver waited for it.
"""

from __future__ import annotations

import logging
import sys

log = logging.getLogger("cpipe")


def task_name(unit: str) -> str:
    """ "sts/STSBenchmark" -> "STSBenchmark"; "analysis" stays."""
    return unit.rsplit("/", 1)[-1]


def line(model: str, unit: str, done: int, total: int, seconds: float) -> str:
    return f"evaluate {model}: {task_name(unit)} {done}/{total} in {seconds:.1f} s"


def _logged_to_terminal(logger: logging.Logger) -> bool:
    """Whether a handler of `logger` (or of a logger it propagates to) writes INFO lines to a terminal, as
    Prefect's console handler does: then the lines are the progress, and a bar would be drawn through them."""
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            stream = getattr(handler, "stream", None)
            if handler.level <= logging.INFO and stream is not None and getattr(stream, "isatty", lambda: False)():
                return True
        current = current.parent if current.propagate else None
    return False


class Progress:
    """Told each finished unit in the order its rows come back; `close` when the model is done."""

    def __init__(self, model: str, total: int):
        self.model, self.total, self.done = model, total, 0
        self.bar = None
        if sys.stderr.isatty() and not _logged_to_terminal(log):
            from tqdm import tqdm

            self.bar = tqdm(
                total=total,
                desc=f"evaluate {model}",
                bar_format="{desc} {n_fmt}/{total_fmt} [{elapsed}<{remaining}]",
                file=sys.stderr,
                leave=False,
            )

    def finished(self, unit: str, seconds: float) -> None:
        self.done += 1
        log.info("%s", line(self.model, unit, self.done, self.total, seconds))
        if self.bar is not None:
            self.bar.set_description(f"evaluate {self.model}: {task_name(unit)}", refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
