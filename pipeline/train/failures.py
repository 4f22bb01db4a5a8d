"""Which of a Ray Train failure's errors is the user's to fix. A module of its own, importing no model code: Ray
Train's controller, a fresh process each fit, unpickles the run's failure policy, which calls this, and importing
pipeline.train.stage there (torch, transformers, every stage it builds on) cost each fit 5 s of CPU."""

from __future__ import annotations

from pipeline.errors import InputError
from storage import DatasetError


def worker_input_error(e: Exception) -> InputError | DatasetError | None:
    """A worker's InputError (a diverged loss: pipeline.train.loop.diverged) or DatasetError (a damaged dataset, a
    full disk met saving a checkpoint), or one Ray Train's controller met writing the run's state (a full disk),
    one line for the user, out of Ray Train's failure, which wraps it in every failed worker's traceback; None
    when none was one."""
    failures = [*(getattr(e, "worker_failures", None) or {}).values(), getattr(e, "controller_failure", None)]
    return next((f for f in failures if isinstance(f, (InputError, DatasetError))), None)
