"""A long loop's progress, the one way every stage shows it. On a terminal, tqdm's bar. Anywhere else (a log file,
Prefect's worker, a Ray worker's pipe) plain lines on the "cpipe" logger: the first once the loop has run FIRST
seconds, one every EVERY seconds after it and one at its end, each with what is done of the total, the rate and the
time left: "evaluate declutr: STSB: embedding 2,560/8,628 pairs, 45.2 pairs/s, ETA 2:14". Never a carriage return:
off a terminal tqdm's redraws pile up into one line of hundreds of characters. A loop shorter than FIRST says
nothing there; on a terminal its bar shows after DELAY.

A loop that cannot know whom it works for (an encoder's batches) is named by whoever calls it, with `doing`: the
evaluate stage names the model and task it scores, and the loops inside prefix their lines with them.
"""

from __future__ import annotations

import contextvars
import logging
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from tqdm import tqdm

T = TypeVar("T")
log = logging.getLogger("cpipe")
FIRST, EVERY = 10.0, 30.0
# A bar is drawn once its loop has run this long: one drawn for every short call (an STS batch) would flicker.
DELAY = 1.0
_doing: contextvars.ContextVar[str | None] = contextvars.ContextVar("cpipe_doing", default=None)


def clock(seconds: float | None) -> str:
    """ "1:02:03", "2:03" or "0:05"; "?" when unknown."""
    if seconds is None:
        return "?"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def eta_seconds(done: int, total: int, first: int, elapsed: float) -> float | None:
    """Seconds left at `done` of `total`, at the rate since `first` (where this process started: a resumed loop's
    skipped part took no time), `elapsed` seconds ago; None before anything is timed."""
    if done <= first or elapsed <= 0:
        return None
    return (total - done) * elapsed / (done - first)


@contextmanager
def doing(what: str) -> Iterator[None]:
    """Every loop run inside names its lines and bar "<what>: <its own name>"."""
    token = _doing.set(_named(what))
    try:
        yield
    finally:
        _doing.reset(token)


def _named(desc: str) -> str:
    prefix = _doing.get()
    return f"{prefix}: {desc}" if prefix else desc


def _say(line: str) -> None:
    """A line on the "cpipe" logger; printed to stderr where that logger shows no INFO line (a Ray worker, whose
    output its driver prints; a script that configured no logging)."""
    if log.isEnabledFor(logging.INFO) and log.hasHandlers():
        log.info("%s", line)
    else:
        print(line, file=sys.stderr, flush=True)


class Progress:
    """`update(n)` as the loop does n more of `total` (None: not known) `unit`s, from `initial`; `close()` at its
    end, or use it as a context manager. `scaled` counts bytes (KB, MB, ...); `silent` shows nothing."""

    def __init__(
        self,
        desc: str,
        total: int | None = None,
        unit: str = "items",
        initial: int = 0,
        scaled: bool = False,
        silent: bool = False,
    ):
        self.desc, self.total, self.unit, self.scaled, self.silent = _named(desc), total, unit, scaled, silent
        self.done = self.first = initial
        self.started = time.monotonic()
        self.due, self.said = self.started + FIRST, False
        self.bar = None
        if not silent and sys.stderr.isatty():
            self.bar = tqdm(
                total=total,
                initial=initial,
                desc=self.desc,
                unit=unit if scaled else f" {unit}",
                unit_scale=scaled,
                unit_divisor=1024,
                file=sys.stderr,
                delay=DELAY,
                leave=False,
                dynamic_ncols=True,
            )

    def update(self, n: int = 1) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        elif not self.silent and (now := time.monotonic()) >= self.due:
            self.due, self.said = now + EVERY, True
            _say(self.line(now - self.started))

    def line(self, elapsed: float) -> str:
        """ "<desc> 2,560/8,628 pairs, 45.2 pairs/s, ETA 2:14" (without a total: "<desc> 2,560 pairs, 45.2 pairs/s")."""
        rate = (self.done - self.first) / elapsed if elapsed > 0 else 0.0
        speed = self._amount(rate) if self.scaled else f"{rate:,.{1 if rate < 100 else 0}f} {self.unit}"
        eta = "" if self.total is None else f", ETA {clock(eta_seconds(self.done, self.total, self.first, elapsed))}"
        return f"{self._count()}, {speed}/s{eta}"

    def _count(self) -> str:
        """ "<desc> 2,560/8,628 pairs", "<desc> 11.8MB/180MB"."""
        count = self._amount(self.done) + ("" if self.total is None else f"/{self._amount(self.total)}")
        return f"{self.desc} {count}{'' if self.scaled else ' ' + self.unit}"

    def _amount(self, n: float) -> str:
        return tqdm.format_sizeof(n, self.unit, 1024) if self.scaled else f"{round(n):,}"

    def close(self) -> None:
        """The bar cleared; off a terminal, the last line where the loop said any: all it did, and how long."""
        if self.bar is not None:
            self.bar.close()
        elif self.said:
            self.said = False
            _say(f"{self._count()} in {clock(time.monotonic() - self.started)}")

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def tracked(items: Iterable[T], desc: str, unit: str = "items", total: int | None = None) -> Iterator[T]:
    """`items` as they are, with their Progress (the total: `total`, else their len where they have one)."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)
    with Progress(desc, total, unit) as progress:
        for item in items:
            yield item
            progress.update()
