"""MTEB's result files from the evaluate stage's score rows, so that a model's numbers sit beside MTEB's public ones
and MTEB's own tooling (mteb.results.TaskResult, mteb.cache.ResultCache) reads them.

The layout and fields are those of mteb 2.x's ResultCache.save_to_cache and TaskResult.to_disk:
`<results_dir>/<model>/<revision>/<task>.json` (the model's name with "/" as "__" and spaces as "_"; the revision
is the model's fingerprint, which tells two models of one name apart as the cumulative leaderboard does) beside a
`model_meta.json` naming the model and revision. Each task file holds `task_name`, `dataset_revision` (the Hub
dataset's revision MTEB scores, for a task that is MTEB's (pipeline.readers.names.MTEB_STS); else the evaluation
data's hash: TaskResult requires a string), `mteb_version` (the installed mteb's, else MTEB_SCHEMA), `scores` as
{split: [{<metric>: value, ..., "main_score", "hf_subset": "default", "languages"}]} for the test split alone
(where a task has one: TaskResult.get_score() averages every split in the file) rounded to 6 places as
to_disk rounds them, `evaluation_time` (seconds of the task's evaluation unit), `kg_co2_emissions` (null), `date`
(when the model was scored) and `evaluation_phases` (null).

Which rows, under MTEB's metric names:
- STS12-16: the "simcse" protocol, one correlation over all of a task's test pairs concatenated, as MTEB's STS
  evaluator scores its single test split; STS-B, SICK-R and STS pair files: the "cosine" protocol. Spearman and
  Pearson of cosine similarity as cosine_spearman (main) and cosine_pearson. STS-B and SICK-R are written under
  MTEB's names (STSBenchmark, SICK-R) only when their test split has as many pairs as MTEB's, else under ours:
  SentEval's SICK-R test split is 4,927 of the 9,927 pairs MTEB scores, so it is written as SICKR. (STS12-16 are
  named alike in both.)
- retrieval: ndcg_at_10 (main), mrr_at_10, recall_at_100, map_at_100.
- pair classification: cosine_ap (main), cosine_accuracy, cosine_f1. MTEB's main score is max_ap, the best over
  five similarity functions; only cosine is scored here, so main_score is cosine_ap.
- clustering: v_measure (main).
- reranking: map_at_1000 (main: average precision over all of a query's candidates, which is map_at_1000 for up
  to 1,000 candidates) and mrr_at_10.
SentEval's transfer tasks are not MTEB's (MTEB's classification tasks are other data under another protocol), nor
are the SentEval protocols' or the analysis rows: none of them is written.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import math
import os
import tempfile
from collections import defaultdict

from pipeline.config_base import unusable_name
from pipeline.errors import InputError
from pipeline.evaluate import kind, kinds
from pipeline.readers.names import SIMILARITY_TASKS
from storage import put_file, read_manifest, read_table


def _mteb(task: str, protocols: set[str]) -> tuple[str | None, kind.Mteb | None]:
    """The protocol whose rows are MTEB's for `task`, and how MTEB names its results: the first kind declaring MTEB's
    files (Kind.mteb) whose protocol for the task the task's rows have (STS-B's analysis rows are "simcse" too, under
    other metrics: STS-B's are its "cosine" rows)."""
    for k in kinds.every_kind():
        if k.mteb is not None and (protocol := k.mteb.protocol_of(k.name, task)) in protocols:
            return protocol, k.mteb
    return None, None


MTEB_LANGUAGES = ["eng-Latn"]
# The mteb release whose TaskResult and ResultCache read these files (docs/evaluation.md): the files' mteb_version
# where mteb is not installed.
MTEB_SCHEMA = "2.26.24"
SUBSET, DECIMALS = "default", 6
META = "model_meta.json"
DEFAULT_DIR = "mteb-results"  # under the artifacts directory, when evaluate.results_dir is null
log = logging.getLogger("cpipe")


def mteb_version() -> str:
    try:
        return importlib.metadata.version("mteb")
    except importlib.metadata.PackageNotFoundError:
        return MTEB_SCHEMA


def task_results(
    rows: list[dict], seconds: dict[str, float] | None = None, date: float | None = None
) -> dict[str, dict]:
    """{MTEB task name: its result file's content} of one model's evaluate rows; `seconds` is each of our tasks'
    evaluation time."""
    by_task: dict[str, list[dict]] = defaultdict(list)
    version = mteb_version()
    for r in rows:
        if r["subset"] == "all":
            by_task[r["task"]].append(r)
    out = {}
    for task, task_rows in by_task.items():
        protocol, mteb = _mteb(task, {r["protocol"] for r in task_rows})
        names = dict(mteb.metrics) if mteb is not None else {}
        scored = [r for r in task_rows if r["protocol"] == protocol and r["metric"] in names]
        if not scored:
            continue
        known = mteb.task(task, next((r["n"] for r in scored if r["split"] == "test"), None))
        name = known.name if known is not None else task
        main = next(iter(names.values()))
        splits: dict[str, dict] = defaultdict(dict)
        for r in _reported(scored):
            splits[r["split"]][names[r["metric"]]] = _value(r)
        languages = MTEB_LANGUAGES if task in SIMILARITY_TASKS else []  # SentEval's are English; the user's, unknown
        out[name] = {
            "dataset_revision": known.revision if known is not None else scored[0]["data_hash"],
            "task_name": name,
            "mteb_version": version,
            "scores": {
                split: [{**values, "main_score": values[main], "hf_subset": SUBSET, "languages": languages}]
                for split, values in splits.items()
            },
            "evaluation_time": (seconds or {}).get(task),
            "kg_co2_emissions": None,
            "date": date,
            "evaluation_phases": None,
        }
    return out


def _reported(rows: list[dict]) -> list[dict]:
    """The rows of the split MTEB reports: the test split where there is one. TaskResult.get_score() averages the
    main score over every split in the file, so STS-B's dev rows beside its test rows made it read the mean of
    the two; MTEB itself writes only a task's evaluation splits (test for its STS tasks). The dev rows stay in
    the evaluate dataset's scores."""
    test = [r for r in rows if r["split"] == "test"]
    return test or rows


def _value(row: dict) -> float | None:
    """A score as MTEB's files hold it; null where it is no number (a correlation of an encoder whose similarities
    are all equal: the leaderboard's "-"), since JSON has no NaN and mteb's loaders would refuse the file. A
    warning, not an error: the model's other scores are good and are written."""
    value = float(row["value"])
    if math.isfinite(value):
        return round(value, DECIMALS)
    log.warning(
        "MTEB results of %s: %s %s %s is %s, written as null",
        row.get("model"),
        row["task"],
        row["split"],
        row["metric"],
        value,
    )
    return None


def model_dir(name: str) -> str:
    """The model's directory name, as mteb's ResultCache spells a model name; an InputError for a name that would
    leave results_dir or land in another's place ("..", "."), though the config and --model's refuse such names."""
    spelled = name.replace("/", "__").replace(" ", "_")
    if why := unusable_name(spelled):
        raise InputError(f"MTEB results of model {name!r}: {why}")
    return spelled


def model_meta(row: dict, max_length: int | None) -> dict:
    """The fields of mteb's ModelMeta that have no default. mteb's loaders read only `name` and `revision`;
    ModelMeta itself also wants the name as "organization/name", which only a hub model's row has."""
    return {
        "loader": None,
        "name": row["model"],
        "revision": row["model_fingerprint"],
        "release_date": None,
        "languages": None,
        "n_parameters": int(row["parameters"]),
        "memory_usage_mb": None,
        "max_tokens": max_length,
        "embed_dim": int(row["dimension"]),
        "license": None,
        "open_weights": None,
        "public_training_code": None,
        "public_training_data": None,
        "framework": ["PyTorch"],
        "similarity_fn_name": "cosine",
        "use_instructions": False,
        "training_datasets": None,
    }


def _put_json(obj: dict, path: str) -> None:
    """Written whole or not at all (storage.put_file: a rename on disk, one PUT on an object store)."""
    fd, tmp = tempfile.mkstemp(suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=2, allow_nan=False)
        put_file(tmp, path)
    finally:
        os.unlink(tmp)


def write(results_dir: str, evaluated: str) -> list[str]:
    """MTEB's result files of one evaluate dataset (one model) under `results_dir`; the paths written."""
    rows = read_table(evaluated).to_pylist()
    if not rows:
        return []
    manifest = read_manifest(evaluated)
    seconds = {u["unit"].split("/", 1)[1]: u["seconds"] for u in manifest.get("units", []) if "/" in u["unit"]}
    where = f"{results_dir.rstrip('/')}/{model_dir(rows[0]['model'])}/{rows[0]['model_fingerprint']}"
    paths = []
    for name, result in task_results(rows, seconds, manifest.get("created")).items():
        _put_json(result, f"{where}/{name}.json")
        paths.append(f"{where}/{name}.json")
    if paths:
        _put_json(model_meta(rows[0], manifest["config"].get("max_length")), f"{where}/{META}")
    return paths
