"""Every kind of the evaluation, as it finds them: STS, SentEval's transfer tasks, the file kinds (retrieval, pair
classification, ...) and the analysis, each declared in its module (pipeline.evaluate.kind.Kind) and listed in
pipeline.readers.registry; every kind's tasks in the evaluation data (`search`), and the data's fingerprint.

The evaluate stage scores one unit per task of every kind the settings turn on (pipeline.evaluate.stage.units) and
fingerprints every kind's data (`fingerprint`); the leaderboard shows each task's columns as its kind declares them
(pipeline.leaderboard.table). `KINDS`, `all_kinds` and `find_all` are the file kinds alone (pipeline.train's view).
"""

from __future__ import annotations

import hashlib
import importlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from pipeline.errors import InputError
from pipeline.evaluate.kind import Kind, Task, rows  # noqa: F401 (rows: pipeline.train's)
from pipeline.file_snapshot import rglob
from pipeline.readers import registry
from pipeline.readers.names import pair_format
from pipeline.readers.sts import SENTEVAL_NAMES
from pipeline.readers.transfer import LAYOUT_FILES
from pipeline.readers.warn import warn_once

KINDS = registry.names()  # as at import, for pipeline.train; registry.names() sees a kind registered since
main_metric = registry.main_metric


def module(name: str) -> ModuleType:
    """The kind's module (its `read` and the rest beside its declaration), imported when first needed."""
    return importlib.import_module(registry.line(name)[0])


def kind(name: str) -> Kind:
    """The kind's declaration; one of another kind than its registry line names is refused."""
    declared = module(name).KIND
    if declared.name != name:
        raise ValueError(
            f"{registry.line(name)[0]} declares the kind {declared.name!r}; its registry line names {name!r}"
        )
    return declared


def all_kinds() -> list[Kind]:
    """The file kinds (registry.names()), as find_all searches them."""
    return [kind(name) for name in registry.names()]


def senteval_kinds() -> list[Kind]:
    """SentEval's kinds (registry.SENTEVAL: STS, transfer), each finding its own tasks by its `find`."""
    return [kind(name) for name in registry.SENTEVAL]


def space_kinds() -> list[Kind]:
    """The kinds describing the embedding space on other kinds' data (registry.SPACE: the analysis)."""
    return [kind(name) for name in registry.SPACE]


def every_kind() -> list[Kind]:
    """Every kind, in the order the evaluate stage scores and writes them: SentEval's, the file kinds, the
    analysis."""
    return senteval_kinds() + all_kinds() + space_kinds()


@dataclass(frozen=True)
class Found:
    """One kind's tasks in the evaluation data, and the names of its tasks the data lacks (SentEval's)."""

    kind: Kind
    tasks: list[Task]
    absent: list[str]


def search(data: str | Path, settings: Mapping[str, Any]) -> list[Found]:
    """Every kind the evaluate settings turn on (Kind.on), with its tasks in `data`, in every_kind()'s order. The file
    kinds are searched first (find_all), then the others in order, each told what was found before it (Kind.found);
    a bad file is the error of the first kind to read it."""
    files = find_all(data)
    before = {k.name: [t for t in files if t.kind == k.name] for k in all_kinds()}
    found: dict[str, Found] = {}
    for k in senteval_kinds() + space_kinds():
        if k.on(settings):
            tasks, absent = k.found(Path(data), before)
            before[k.name] = tasks
            found[k.name] = Found(k, tasks, absent)
    return [found[k.name] if k.name in found else Found(k, before[k.name], []) for k in every_kind() if k.on(settings)]


def fingerprint(found: list[Found]) -> str:
    """The evaluation data's hash: each kind's own part (Kind.fingerprint) in order, then the file kinds' files
    hashed together (data_hash), where there are any, so that data without them keeps the hash it had before them."""
    parts = [part for f in found if f.kind.fingerprint is not None and (part := f.kind.fingerprint(f.tasks))]
    files = [t for f in found if f.kind.fingerprint is None for t in f.tasks]
    parts += [data_hash(files)] if files else []
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:16]


def find_all(data: str | Path | None) -> list[Task]:
    """Every kind's tasks under the evaluation directory, in registry order; none for one pair file. Two tasks
    of one name would share a leaderboard column, so that is an error naming both."""
    if data is None or not Path(data).is_dir():
        return []
    tasks = [t for k in all_kinds() for t in k.find(Path(data))]
    seen: dict[str, Task] = {}
    for t in tasks:
        if t.name in seen:
            raise InputError(f"{t.files[0]} and {seen[t.name].files[0]} both name the task {t.name!r}; rename one")
        seen[t.name] = t
    if unread := unrecognised(Path(data), tasks):
        warn_once(
            f"{data}: {len(unread)} entr{'y' if len(unread) == 1 else 'ies'} no task reads: "
            f"{', '.join(p.name + ('/' if p.is_dir() else '') for p in unread)}"
        )
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
            found = (
                entry.name in known
                or any(f.startswith(inside) for f in read)
                or any(p.name in known for p in rglob(entry))
            )
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
