"""Rank 0's training progress: a bar (steps, loss, rate, ETA) where the user's terminal can show one, else a line
every train.log_every steps: "step 20/100 loss 2.3456 lr 5.00e-05 1.25 steps/s ETA 1:04".

A Ray Train worker's output is a pipe, not a terminal: what it prints reaches the user through the driver, which
prints it line by line with the worker's prefix, so a worker prints the lines. (Ray's own distributed bar,
ray.experimental.tqdm_ray, which the driver draws from states a worker prints, reached the driver's bar manager
but drew nothing on a terminal in Ray 2.60.) Outside Ray (a test, a benchmark calling run_loop), tqdm's bar when
stderr is a terminal.
"""

from __future__ import annotations

import sys
import time

from pipeline.progress import clock, eta_seconds


def loss(value: float) -> str:
    """Four significant digits: a loss of 1e-5 (SimCSE from a sentence-tuned encoder) is 1e-05, not 0.0000."""
    return f"{value:.4g}"


def progress_line(step: int, total: int, metrics: dict, first: int, elapsed: float) -> str:
    """The periodic line: step/total, loss, learning rate, steps per second and ETA since `first`."""
    rate = (step - first) / elapsed if elapsed > 0 and step > first else None
    return (
        f"step {step}/{total} loss {loss(metrics['loss'])} lr {metrics['lr']:.2e} "
        f"{'?' if rate is None else f'{rate:.2f}'} steps/s ETA {clock(eta_seconds(step, total, first, elapsed))}"
    )


def bar_kind() -> str | None:
    """ "local" (tqdm's bar) when this process's stderr is a terminal, else None (lines): always None in a Ray
    worker, whose stderr is a pipe to its log."""
    return "local" if sys.stderr.isatty() else None


class Progress:
    """Rank 0's progress from step `first` (0, or the step a resumed run restarts after) to `total`."""

    def __init__(self, total: int, first: int, every: int, kind: str | None):
        self.total, self.first, self.every = total, first, every
        self.started = time.perf_counter()
        self.bar = _open_bar(kind, total, first)
        self.kind = kind

    def step(self, step: int, metrics: dict) -> None:
        if self.bar is None:
            if step % self.every == 0:
                print(
                    progress_line(step, self.total, metrics, self.first, time.perf_counter() - self.started), flush=True
                )
            return
        self.bar.set_description(f"train loss {loss(metrics['loss'])}")
        self.bar.update(step - self.bar.n)

    def write(self, line: str) -> None:
        """A line between the bar's redraws (a dev score)."""
        if self.kind == "local":
            from tqdm import tqdm

            tqdm.write(line, file=sys.stderr)
        else:
            print(line, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _open_bar(kind: str | None, total: int, first: int):
    if kind == "local":
        from tqdm import tqdm

        return tqdm(total=total, initial=first, desc="train", unit="step", dynamic_ncols=True)
    return None
