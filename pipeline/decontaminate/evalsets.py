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


def eval_texts(data: str | None, transfer: bool, dev_sets: list[str]) -> dict[str, list[str]]:
    """{task: its sentences} of the evaluation data (a directory or one pair file) and the dev sets."""
    out: dict[str, list[str]] = {}
    if data is not None:
        if not Path(data).exists():
            raise InputError(f"evaluate.data: {data}: no such file or directory")
        # SentEval's kinds the run scores (STS: its directories and pair files, or `data` as one pair file; the
        # transfer tasks with evaluate.transfer), then the file kinds'
        for kind in kinds.senteval_kinds():
            if kind.on({"transfer": transfer}):
                _texts(kind.find(Path(data)), out)
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
        if (texts := kinds.kind(task.kind).texts) is not None:
            out.setdefault(task.name, []).extend(texts(task.data))
