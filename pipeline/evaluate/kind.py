"""What a task kind's module builds its tasks and rows with (the kinds themselves: pipeline.evaluate.kinds): a kind
imports this module, never the registry, so that no import cycle runs through the registry's lazy imports."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.evaluate.items import WHOLE, Items
from pipeline.evaluate.names import pair_format
from pipeline.evaluate.sts_data import EvalDataError

# Rows of these kinds are scored on all of a task's items, and on its test split unless the kind says otherwise.
SUBSET, SPLIT = "all", "test"
log = logging.getLogger("cpipe")
_said: set[str] = set()


@dataclass(frozen=True)
class Task:
    """One task of a kind: its name (the leaderboard's column), the files it was read from (what the data
    fingerprint hashes) and what its kind's `find` parsed from them for its `score`."""

    kind: str
    name: str
    files: tuple[str, ...]
    data: Any


def warn_once(message: str) -> None:
    """A warning about the evaluation data, said once a process: the data is found several times a run (the check
    before any work, the data's fingerprint, the scoring)."""
    if message not in _said:
        _said.add(message)
        log.warning(message)


def task_files(data_dir: Path, kind: str, formats: tuple[str, ...]) -> dict[str, Path]:
    """{task: path} of the files named `<task>.<kind>.<format>` (text formats optionally .gz) directly in data_dir,
    or data_dir itself when it is one (the STS pair files leave such names to their kinds: names.kind_file); a
    format the kind does not read, or two files of one task, are errors."""
    candidates = [data_dir] if data_dir.is_file() else \
        sorted(p for p in data_dir.iterdir() if p.is_file()) if data_dir.is_dir() else []
    found: dict[str, Path] = {}
    for path in candidates:
        fmt = pair_format(path)
        stem = path.name[:-len(fmt + (".gz" if path.suffix == ".gz" else ""))] if fmt else ""
        if not stem.endswith(f".{kind}"):
            continue
        task = stem[:-len(f".{kind}")]
        if fmt not in formats or not task:
            raise EvalDataError(f"{path}: a {kind} file is named <task>.{kind}"
                                f"{'|'.join(formats)} (text ones optionally .gz)")
        if task in found:
            raise EvalDataError(f"{path} and {found[task]} both name the {kind} task {task}")
        found[task] = path
    return found


def keep_items(embed, task: Task, prediction, gold=None, stratum: str = WHOLE) -> None:
    """A task's test items (pipeline.evaluate.items), where `embed` keeps items (the stage's Embed does; a bare
    function, in a test, does not): a kind averaging a metric over queries passes each query's value alone."""
    items = getattr(embed, "items", None)
    if items is not None:
        values = np.asarray(prediction, dtype=np.float64)
        gold = np.zeros(len(values)) if gold is None else np.asarray(gold, dtype=np.float64)
        items.append(Items(task.name, task.kind, stratum, values, gold))


def rows(kind: str, task: str, values: dict[str, float], n: int, split: str = SPLIT) -> list[dict]:
    """Score rows of one task: one per metric, its protocol the kind's name."""
    return [{"task": task, "subset": SUBSET, "split": split, "metric": metric, "protocol": kind,
             "value": float(value), "n": n} for metric, value in values.items()]
