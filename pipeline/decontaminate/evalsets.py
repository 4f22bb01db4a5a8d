"""Every sentence the run will score, by evaluation task, read with the evaluation's own readers
(pipeline.evaluate): the STS tasks and STS pair files, SentEval's transfer tasks (with evaluate.transfer), every
task of the other kinds, and each run's train.dev_set.

Dev splits count: a model selected on them has seen them as surely as one scored on them. Train splits do not:
SentEval fits its classifiers and the relatedness regressor on them, and no score is taken on them.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.errors import InputError
from pipeline.evaluate import kinds
from pipeline.evaluate.kind import Task
from pipeline.readers.sts import read_stsb_split
from pipeline.readers.transfer import find_transfer

UNSCORED = "train"


def eval_texts(data: str | None, transfer: bool, dev_sets: list[str]) -> dict[str, list[str]]:
    """{task: its sentences} of the evaluation data (a directory or one pair file) and the dev sets."""
    out: dict[str, list[str]] = {}
    if data is not None:
        if not Path(data).exists():
            raise InputError(f"evaluate.data: {data}: no such file or directory")
        for kind in kinds.senteval_kinds():  # STS: its directories and pair files, or `data` as one pair file
            _texts(kind.find(Path(data)), out)
        for task in find_transfer(data)[0] if transfer else []:
            for split, ex in task.splits.items():
                if split != UNSCORED:
                    out.setdefault(task.name, []).extend([*ex.text, *(ex.pair or [])])
        _kind_texts(data, out)
    # A dev set that is not there is the train stage's pre-flight error to report, naming its key.
    for path in map(Path, dev_sets):
        if path.is_file():
            dev = read_stsb_split(path, "dev")
            out.setdefault(path.name, []).extend([*dev.sent1, *dev.sent2])
        elif path.is_dir():  # a task's dev data (train.select_by)
            _kind_texts(path, out)
    return out


def _kind_texts(data, out: dict[str, list[str]]) -> None:
    _texts(kinds.find_all(data), out)


def _texts(tasks: list[Task], out: dict[str, list[str]]) -> None:
    """Each task's sentences, as its kind declares them (pipeline.evaluate.kind.Kind.texts)."""
    for task in tasks:
        out.setdefault(task.name, []).extend(kinds.kind(task.kind).texts(task.data))
