"""The task kinds beside STS and SentEval's transfer tasks (retrieval, pair classification, ...): the one list of
them, and what each kind's module provides.

A kind is one module, named here on one line and imported only when first needed (as pipeline.registry does for
stages), so that the config can check `evaluate.rank_by` without importing the kinds' scorers. Each module has:

    KIND = "<name>"                          # its key here, and the `protocol` of every row it scores
    MAIN = "<metric>"                        # the metric its leaderboard column shows: "<task> <MAIN>"
    def find(data_dir: Path) -> list[Task]   # its tasks in an --eval-data directory, [] when none; a bad file or
                                             # row is an InputError "FILE:LINE: what" (sts_data.EvalDataError)
    def score(task: Task, embed, seed: int) -> list[dict]
        # rows of the evaluate stage's scoring columns (task, subset, split, metric, protocol, value, n), built by
        # `rows` below; `embed(list[str]) -> np.ndarray` is the stage's Embed

The evaluate stage scores one unit per task (pipeline.evaluate.stage.units) and fingerprints every kind's files
(`data_hash`); the leaderboard shows each task's MAIN metric and a mean per kind (pipeline.leaderboard.table).
"""

from __future__ import annotations

import hashlib
import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from pipeline.errors import InputError

KINDS: dict[str, str] = {
}
# Rows of these kinds are scored on all of a task's items, and on its test split unless the kind says otherwise.
SUBSET, SPLIT = "all", "test"


@dataclass(frozen=True)
class Task:
    """One task of a kind: its name (the leaderboard's column), the files it was read from (what the data
    fingerprint hashes) and what its kind's `find` parsed from them for its `score`."""

    kind: str
    name: str
    files: tuple[str, ...]
    data: Any


def module(kind: str) -> ModuleType:
    return importlib.import_module(KINDS[kind])


def main_metric(kind: str) -> str:
    return module(kind).MAIN


def average_column(kind: str) -> str:
    return f"avg {kind}"


def find_all(data: str | Path | None) -> list[Task]:
    """Every kind's tasks under the evaluation directory, in registry order; none for one pair file. Two tasks
    of one name would share a leaderboard column, so that is an error naming both."""
    if data is None or not Path(data).is_dir():
        return []
    tasks = [t for kind in KINDS for t in module(kind).find(Path(data))]
    seen: dict[str, Task] = {}
    for t in tasks:
        if t.name in seen:
            raise InputError(f"{t.files[0]} and {seen[t.name].files[0]} both name the task {t.name!r}; rename one")
        seen[t.name] = t
    return tasks


def data_hash(tasks: list[Task]) -> str:
    """Short sha256 of the tasks' files' bytes, so changed data invalidates the scores."""
    h = hashlib.sha256()
    for t in tasks:
        h.update(f"{t.kind}/{t.name}\n".encode())
        for path in t.files:
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
    return h.hexdigest()[:16]


def rows(kind: str, task: str, values: dict[str, float], n: int, split: str = SPLIT) -> list[dict]:
    """Score rows of one task: one per metric, its protocol the kind's name."""
    return [{"task": task, "subset": SUBSET, "split": split, "metric": metric, "protocol": kind,
             "value": float(value), "n": n} for metric, value in values.items()]


def is_kind_column(column: str) -> bool:
    """Whether `column` can be a kind's leaderboard column: "avg <kind>", or "<task> <its kind's MAIN>"."""
    if column in (average_column(k) for k in KINDS):
        return True
    return any(column.endswith(f" {main_metric(k)}") and len(column) > len(main_metric(k)) + 1 for k in KINDS)
