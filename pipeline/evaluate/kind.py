"""A task kind's declaration (Kind) and what its module builds its tasks and rows with. A kind is one module ending
in `KIND = Kind(...)` plus its line in pipeline.readers.registry, which names its module and its main metric; it
imports this module and the registry (a leaf), never pipeline.evaluate.kinds, so that no import cycle runs through
the registry's lazy imports. What the declaration says, and who reads it:

    find(data_dir) -> [Task]        its tasks in an --eval-data directory, [] when none; a bad file or row is an
                                    InputError "FILE:LINE: what" (pipeline.readers.sts.EvalDataError) (kinds.find_all)
    score(task, embed, seed) -> rows  the evaluate stage's scoring columns (task, subset, split, metric, protocol,
                                    value, n), built by `rows`; `embed(list[str]) -> np.ndarray` is the stage's
                                    Embed; its test items go to `keep_items`, for the bootstrap (evaluate.stage)
    texts(task.data) -> sentences   what decontamination indexes of a task (decontaminate.evalsets)
    main, column(task), average     its leaderboard columns: "<task> <main>" per task, "avg <kind>" over them
                                    (leaderboard.table); or `columns(task)`, typed, where a task has several.
                                    `main` is its registry line's, not declared (the config reads it there)
    statistic                       the function the leaderboard's bootstrap recomputes `main` with from the kept
                                    items on each resample (pipeline.evaluate.resampled: `mean` of per-query
                                    values, `pooled_average_precision` of scored pairs, ...; leaderboard.intervals);
                                    None where its rows keep no items (no interval). Anything else (a name, say)
                                    is refused when the kind is declared
    mteb                            MTEB's task type and metric names for its result files, and which protocol's
                                    rows they are where that differs by task (STS's) (evaluate.mteb_results)

SentEval's kinds (STS, transfer) and the analysis also declare what the evaluate stage otherwise assumes of a file
kind (each optional; the defaults are a file kind's):

    switch                          the evaluate setting that turns it on (evaluate.transfer); None: always on
    settings                        the evaluate settings its `score` takes as keywords (kfold, transfer_protocol)
    search(data_dir, found)         (its tasks, the names of those the data lacks: the manifest's absent_tasks),
      -> (tasks, absent)            given the tasks of the kinds searched before it, by kind (the file kinds'
                                    first): STS requires its own only where no file kind's are there, the analysis
                                    describes STS's; default (find(data_dir), [])
    fingerprint(tasks) -> str|None  its part of the evaluation data's hash (None: it adds none); default: its
                                    tasks' files, hashed with every file kind's (kinds.data_hash)
    summary(rows) -> rows           rows made from every unit's, once all are back (the transfer average)
    whole                           scored as one unit over all its tasks' data, named by the kind (the analysis)
    texts None                      its sentences are another kind's, indexed there (the analysis: STS-B's)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.evaluate.column import Column
from pipeline.evaluate.items import WHOLE, Items
from pipeline.evaluate.resampled import Statistic
from pipeline.readers import registry
from pipeline.readers.names import MtebTask, mteb_task, pair_format
from pipeline.readers.sts import EvalDataError, task_name

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


def task_files(data_dir: Path, kind: str, formats: tuple[str, ...]) -> dict[str, Path]:
    """{task: path} of the files named `<task>.<kind>.<format>` (text formats optionally .gz) directly in data_dir,
    or data_dir itself when it is one (the STS pair files leave such names to their kinds: names.kind_file); a
    format the kind does not read, or two files of one task, are errors."""
    candidates = (
        [data_dir]
        if data_dir.is_file()
        else sorted(p for p in data_dir.iterdir() if p.is_file())
        if data_dir.is_dir()
        else []
    )
    found: dict[str, Path] = {}
    for path in candidates:
        fmt = pair_format(path)
        stem = path.name[: -len(fmt + (".gz" if path.suffix == ".gz" else ""))] if fmt else ""
        if not stem.endswith(f".{kind}"):
            continue
        task = stem[: -len(f".{kind}")]
        if fmt not in formats or not task:
            raise EvalDataError(
                f"{path}: a {kind} file is named <task>.{kind}{'|'.join(formats)} (text ones optionally .gz)"
            )
        if task in found:
            raise EvalDataError(f"{path} and {found[task]} both name the {kind} task {task}")
        found[task_name(task, path)] = path
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
    return [
        {
            "task": task,
            "subset": SUBSET,
            "split": split,
            "metric": metric,
            "protocol": kind,
            "value": float(value),
            "n": n,
        }
        for metric, value in values.items()
    ]


@dataclass(frozen=True)
class Mteb:
    """How MTEB names a kind's tasks' results: its task type and, of our metric names, MTEB's (the first is the main
    score)."""

    type: str
    metrics: Mapping[str, str]
    # The protocol whose rows are MTEB's for a task (STS's differ by task); None: the kind's own.
    protocol: Callable[[str], str] | None = None
    # Our tasks that are MTEB's (pipeline.readers.names.MTEB_STS): its name, test split size, Hub dataset, revision.
    names: Mapping[str, MtebTask] = field(default_factory=dict)

    def protocol_of(self, kind: str, task: str) -> str:
        return self.protocol(task) if self.protocol is not None else kind

    def task(self, task: str, test_pairs: int | None) -> MtebTask | None:
        """MTEB's task that `task` is, when its test split has MTEB's size (else it keeps our name)."""
        return mteb_task(task, test_pairs, self.names)


@dataclass(frozen=True)
class Kind:
    name: str
    find: Callable[[Path], list[Task]]
    score: Callable[[Task, Any, int], list[dict]]
    texts: Callable[[Any], Iterable[str]] | None
    statistic: Statistic | None
    mteb: Mteb | None = None
    # A kind shown in several columns per task (STS's protocols) lists them; else one, `column`.
    columns: Callable[[str], list[Column]] | None = None
    switch: str | None = None
    settings: tuple[str, ...] = ()
    search: Callable[[Path, Mapping[str, list[Task]]], tuple[list[Task], list[str]]] | None = None
    fingerprint: Callable[[list[Task]], str | None] | None = None
    summary: Callable[[list[dict]], list[dict]] | None = None
    whole: bool = False

    def __post_init__(self):
        if self.statistic is not None and not callable(self.statistic):
            raise TypeError(
                f"task kind {self.name}: statistic must be a function (Sample, strata, pooled) -> values "
                f"(pipeline.evaluate.resampled), not {self.statistic!r}"
            )

    def on(self, settings: Mapping[str, Any]) -> bool:
        """Whether the evaluate settings score this kind (a switch they do not hold is off)."""
        return self.switch is None or bool(settings.get(self.switch, False))

    def found(self, data_dir: Path, before: Mapping[str, list[Task]]) -> tuple[list[Task], list[str]]:
        return self.search(data_dir, before) if self.search is not None else (self.find(data_dir), [])

    def unit(self, task: Task) -> str:
        """The name of the evaluate unit scoring `task` ("sts/STS12"; the manifest's units, the progress lines)."""
        return self.name if self.whole else f"{self.name}/{task.name}"

    @property
    def main(self) -> str:
        return registry.main_metric(self.name)

    def column(self, task: str) -> Column:
        return Column(task=task, kind=self.name, metric=self.main, protocol=self.name)

    def task_columns(self, task: str) -> list[Column]:
        return self.columns(task) if self.columns is not None else [self.column(task)]

    @property
    def average(self) -> str:
        return f"avg {self.name}"
