"""The task kinds beside STS and SentEval's transfer tasks (retrieval, pair classification, ...): the one list of
them, and what each kind's module provides.

A kind is one module, named on one line of pipeline.evaluate.names.TASK_KINDS with the metric its leaderboard
column shows ("<task> <metric>"; a leaf, so that the config checks `evaluate.rank_by` without importing the kinds'
scorers), and imported only when first needed (as pipeline.registry does for stages). Each module has:

    KIND = "<name>"                          # its key there, and the `protocol` of every row it scores
    def find(data_dir: Path) -> list[Task]   # its tasks in an --eval-data directory, [] when none; a bad file or
                                             # row is an InputError "FILE:LINE: what" (sts_data.EvalDataError)
    def score(task: Task, embed, seed: int) -> list[dict]
        # rows of the evaluate stage's scoring columns (task, subset, split, metric, protocol, value, n), built by
        # `rows` below; `embed(list[str]) -> np.ndarray` is the stage's Embed. It passes its test items to
        # `keep_items`, for the leaderboard's bootstrap intervals (what they hold: pipeline.evaluate.items).

The evaluate stage scores one unit per task (pipeline.evaluate.stage.units) and fingerprints every kind's files
(`data_hash`); the leaderboard shows each task's main metric and a mean per kind (pipeline.leaderboard.table).
"""

from __future__ import annotations

import hashlib
import importlib
import os
from pathlib import Path
from types import ModuleType

from pipeline.errors import InputError
from pipeline.evaluate.names import TASK_KINDS, kind_average, pair_format
from pipeline.evaluate.kind import SPLIT, SUBSET, Task, keep_items, rows, task_files, warn_once  # noqa: F401
from pipeline.evaluate.sts_data import SENTEVAL_NAMES
from pipeline.evaluate.transfer_data import LAYOUT_FILES
from pipeline.file_snapshot import rglob

KINDS = tuple(TASK_KINDS)


def module(kind: str) -> ModuleType:
    return importlib.import_module(TASK_KINDS[kind][0])


def main_metric(kind: str) -> str:
    return TASK_KINDS[kind][1]


average_column = kind_average


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
    if unread := unrecognised(Path(data), tasks):
        warn_once(f"{data}: {len(unread)} entr{'y' if len(unread) == 1 else 'ies'} no task reads: "
                  f"{', '.join(p.name + ('/' if p.is_dir() else '') for p in unread)}")
    return tasks


def unrecognised(data_dir: Path, tasks: list[Task]) -> list[Path]:
    """The entries directly in data_dir that hold nothing the evaluation reads, so that a misnamed or incomplete
    task (a BEIR folder with queries alone, `quora.pairclass.txt`) is not left out without a word: a file is read
    when it has a table's suffix (an STS pair file, or a kind's file: both are parsed or refused), a directory when
    one of `tasks`' files, or a SentEval task's file or directory, lies below it. Hidden entries are passed over."""
    read = [str(Path(f)) for t in tasks for f in t.files]
    known = SENTEVAL_NAMES | LAYOUT_FILES
    out = []
    for entry in sorted(data_dir.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_dir():
            inside = str(entry) + os.sep
            found = entry.name in known or any(f.startswith(inside) for f in read) \
                or any(p.name in known for p in rglob(entry))
        else:
            found = pair_format(entry) is not None or entry.name in known
        if not found:
            out.append(entry)
    return out


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


