"""train.select_by: what train.eval_every scores, the dev data each choice reads, and which score is best.

- `sts-dev`: Spearman of cosine on an STS-B-format dev file (pipeline.train.devset); higher is better.
- `heldout-loss`: the contrastive loss on the pairs of documents the augment stage held out
  (pipeline.train.heldout); lower is better. Needs augment.heldout_fraction above 0 (pipeline.config).
- the name of a task of another kind (pipeline.evaluate.kinds): the task read from train.dev_set (a directory
  in --eval-data's layouts; null = evaluate.data), a retrieval task's queries those of
  qrels/<train.dev_split>.tsv, scored by the kind's own scorer's main metric; higher is better. A file kind's
  file in evaluate.data is that task's test split, so its dev split must come from train.dev_set, and a dev
  file with the bytes of an evaluation file is refused.

The stage config's "dev" holds what the score reads (files and their content's hash), so changed dev data
retrains; `load` reads it on the driver for the workers (pipeline.train.scorers).
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

from pipeline.augment.heldout import read_heldout
from pipeline.errors import ConfigError, InputError
from pipeline.evaluate import kinds
from pipeline.file_snapshot import rglob
from pipeline.train import devset
from pipeline.train.config import HELDOUT_LOSS, STS_DEV, TrainConfig
from pipeline.train.heldout import COLUMNS, heldout_batches

TASK_SCORE = "dev_score"  # a task's main metric, in the metrics rows
RETRIEVAL = "retrieval"  # its tasks are read by split


def select_by(train: TrainConfig) -> str:
    return train.select_by or STS_DEV


def score_key(by: str) -> str:
    """The metrics rows' column the selection compares."""
    return {STS_DEV: "dev_spearman", HELDOUT_LOSS: "heldout_loss"}.get(by, TASK_SCORE)


def columns(by: str) -> tuple[str, ...]:
    """The metrics rows' columns an evaluation fills: the score, and beside the held-out loss its geometry."""
    return COLUMNS if by == HELDOUT_LOSS else (score_key(by),)


def lower_is_better(by: str) -> bool:
    return by == HELDOUT_LOSS


def improves(value: float, best: float | None, by: str) -> bool:
    """Whether `value` replaces the best so far: only if strictly better (the earliest of equals stays, as the
    HF Trainer keeps it), a NaN (constant embeddings) only when nothing was scored before it."""
    if best is None or (math.isnan(best) and not math.isnan(value)):
        return True
    if math.isnan(value):
        return False
    return value < best if lower_is_better(by) else value > best


def label(by: str, score: float, kind: str | None = None) -> str:
    """How a row and a card say what selected the step: "heldout-loss 1.234", "sts-dev Spearman 0.712", or a
    task's "<task> dev nDCG@10 0.412"."""
    what = {STS_DEV: "sts-dev Spearman", HELDOUT_LOSS: HELDOUT_LOSS}.get(by) or f"{by} dev {kinds.main_metric(kind)}"
    return f"{what} {score:.3f}"


def _digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _read_task(name: str, where: str, split: str) -> tuple[kinds.Task | None, list[str]]:
    """The task `name` in `where` (None without one) and every task's name there. A retrieval task (a folder
    holding a corpus file) is read with `split`'s qrels only when it is the one named: another's lacking them
    is no error of this selection."""
    tasks = [t for kind in kinds.KINDS if kind != RETRIEVAL for t in kinds.module(kind).find(Path(where))]
    folders = sorted({p.parent for f in ("corpus.jsonl", "corpus.jsonl.gz") for p in rglob(Path(where), f)})
    task = next((t for t in tasks if t.name == name), None)
    if task is None and (named := [d for d in folders if d.name == name]):
        task = kinds.module(RETRIEVAL).read(named[0], split)
    return task, [d.name for d in folders] + [t.name for t in tasks]


def find_task(name: str, dev_set: str | None, split: str, eval_data: str | None) -> kinds.Task:
    """The task `name` in the dev data; a ConfigError saying what is missing, or why it is no dev split."""
    where = dev_set or (eval_data if isinstance(eval_data, str) else None)
    if where is None or not Path(where).is_dir():
        raise ConfigError(
            f"train.select_by {name}: no dev data to find it in: set train.dev_set to a directory "
            f"holding the task {name} ({'evaluate.data is not set' if where is None else where})"
        )
    task, names = _read_task(name, where, split)
    if task is None:
        found = ", ".join(names) or "none"
        raise ConfigError(
            f"train.select_by {name!r}: no task of that name in {where} (tasks there: {found}); "
            f"select_by is {STS_DEV}, {HELDOUT_LOSS} or a task of the dev data"
        )
    if task.kind != RETRIEVAL and dev_set is None:
        raise ConfigError(
            f"train.select_by {name}: {task.files[0]} is the {task.kind} task's test split "
            "(evaluate.data); put its dev split in a directory and name it train.dev_set"
        )
    scored = kinds.find_all(eval_data) if dev_set and isinstance(eval_data, str) else []
    evaluated = {_digest(f) for t in scored for f in t.files}
    if task.kind != RETRIEVAL and any(_digest(f) in evaluated for f in task.files):
        raise ConfigError(
            f"train.select_by {name}: {task.files[0]} is a copy of a test file of {eval_data}; "
            "a test split is never a dev set"
        )
    return task


def stage_config(train: TrainConfig, eval_data: str | None, max_length: int) -> dict | None:
    """The train stage config's "dev": what the selection reads; None without eval_every, or for heldout-loss,
    whose pairs are the pairs dataset's (an input, fingerprinted as one)."""
    if train.eval_every is None or select_by(train) == HELDOUT_LOSS:
        return None
    by = select_by(train)
    if by == STS_DEV:
        return devset.stage_config(train, eval_data, max_length)
    task = find_task(by, train.dev_set, train.dev_split, eval_data)
    return {
        "task": by,
        "kind": task.kind,
        "dir": train.dev_set or eval_data,
        "split": train.dev_split,
        "hash": kinds.data_hash([task]),
        "max_length": max_length,
    }


def load(train: TrainConfig, dev: dict | None, pairs: str, special: dict) -> dict | None:
    """What the workers score with, read once on the driver: None without eval_every. `dev`: the train stage
    config's "dev" (stage_config's)."""
    if train.eval_every is None:
        return None
    by = select_by(train)
    if by == HELDOUT_LOSS:
        table = read_heldout(pairs, columns=["anchor_ids", "positive_ids"])
        return {"by": by, "batches": heldout_batches(table, special, train.max_length, train.batch_size)}
    if not dev:
        raise InputError(
            "train: eval_every is set but the stage config names no dev data "
            "(pipeline.train.selection.stage_config builds it)"
        )
    if by == STS_DEV:
        subset = devset.read_dev(dev["file"])
        if devset.data_hash([subset]) != dev["hash"]:
            raise InputError(f"train: {dev['file']} changed after the run was configured; start it again")
        return {"by": by, "subset": subset, "max_length": dev["max_length"]}
    task, _ = _read_task(by, dev["dir"], dev["split"])
    if task is None or kinds.data_hash([task]) != dev["hash"]:
        raise InputError(
            f"train: the dev data of {by} in {dev['dir']} changed after the run was configured; start it again"
        )
    return {"by": by, "task": task, "max_length": dev["max_length"]}
