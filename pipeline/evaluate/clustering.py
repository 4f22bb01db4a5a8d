"""Clustering on the user's own data, scored as MTEB scores its clustering tasks: V-measure of mini-batch k-means
on the embeddings, with k the number of distinct gold labels.

Files sit directly in an --eval-data directory (as STS pair files do), named `<task>.clustering.<format>`
(`<task>.reranking.jsonl` and `<task>.pairclass.<format>` for the other kinds):
- `.jsonl` (or `.jsonl.gz`), MTEB's layout: each line one clustering set, `{"sentences": [...], "labels": [...]}`;
- `.csv` (or `.csv.gz`) or `.parquet` with `text` and `label` columns: one set.

Each set is clustered RUNS times, k-means seeded seed, seed+1, ...; the task's score is the mean over its sets
of each set's mean V-measure over the runs (MTEB averages its sets the same way). MTEB's own k-means settings:
batch size 512, one k-means++ initialisation. MTEB's AbsTaskClustering also takes its ten runs from one seed, on
bootstrap resamples (16,384 sentences drawn with replacement); here every run sees the whole set and the seed
varies instead, so a small set is not scored on thousands of duplicates.
"""

from __future__ import annotations

import csv
import gzip
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from sklearn.cluster import MiniBatchKMeans
from sklearn.metrics import v_measure_score

from pipeline.evaluate.sts_data import LEADERBOARD_SPLIT, EvalDataError
from pipeline.jsonlines import json_objects

KIND = "clustering"
FORMATS = (".jsonl", ".jsonl.gz", ".csv", ".csv.gz", ".parquet")
METRIC, PROTOCOL = "v_measure", "kmeans"
RUNS = 10
# MTEB's AbsTaskClustering.k_mean_batch_size, and n_init=1 with k-means++ (sklearn's "auto" for it).
BATCH_SIZE = 512
TABLE_COLUMNS = ("text", "label")


@dataclass(frozen=True)
class ClusteringTask:
    name: str
    path: Path
    split: str
    # (sentences, labels) per clustering set
    sets: list[tuple[list[str], list[str]]]


def open_text(path: Path) -> io.TextIOBase:
    return gzip.open(path, "rt", encoding="utf-8", newline="") if path.suffix == ".gz" else \
        open(path, encoding="utf-8", newline="")


def task_files(data_dir: Path, kind: str, formats: tuple[str, ...]) -> dict[str, Path]:
    """{task: path} of the files named `<task>.<kind><format>` directly in data_dir (or data_dir itself, one such
    file); two files of one task are an error, not a guess."""
    candidates = [data_dir] if data_dir.is_file() else sorted(p for p in data_dir.iterdir() if p.is_file()) \
        if data_dir.is_dir() else []
    found: dict[str, Path] = {}
    for path in candidates:
        fmt = next((f for f in formats if path.name.endswith(f".{kind}{f}")), None)
        if fmt is None:
            continue
        task = path.name[:-len(f".{kind}{fmt}")]
        if not task:
            raise EvalDataError(f"{path}: no task name before .{kind}{fmt}")
        if task in found:
            raise EvalDataError(f"{path} and {found[task]} both name the {kind} task {task}")
        found[task] = path
    return found


def _label(value, where: str):
    # A label names a cluster, so 1 and "1" are one; bool is an int to Python, but True is no cluster's name.
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return str(value)
    raise EvalDataError(f"{where}: label {value!r} is not a string or an integer")


def _sentence(value, where: str) -> str:
    if not isinstance(value, str):
        raise EvalDataError(f"{where}: sentence {value!r} is not a string")
    return value


def _jsonl_sets(path: Path) -> list[tuple[list[str], list[str]]]:
    sets = []
    with open_text(path) as f:
        for lineno, record in json_objects(f, path, EvalDataError):
            where = f"{path}:{lineno}"
            sentences, labels = record.get("sentences"), record.get("labels")
            if not isinstance(sentences, list) or not isinstance(labels, list):
                raise EvalDataError(f"{where}: expected lists \"sentences\" and \"labels\"")
            if len(sentences) != len(labels):
                raise EvalDataError(f"{where}: {len(sentences)} sentences but {len(labels)} labels")
            if not sentences:
                raise EvalDataError(f"{where}: an empty clustering set")
            sets.append(([_sentence(s, where) for s in sentences], [_label(v, where) for v in labels]))
    return sets


def _table_set(path: Path) -> list[tuple[list[str], list[str]]]:
    if path.name.endswith(".parquet"):
        table = pq.read_table(path)
        missing = [c for c in TABLE_COLUMNS if c not in table.column_names]
        if missing:
            raise EvalDataError(f"{path}: no column(s) {', '.join(missing)} (columns: {', '.join(table.column_names)})")
        records = [(f"{path}: row {i}", r) for i, r in enumerate(table.select(list(TABLE_COLUMNS)).to_pylist(), 1)]
    else:
        with open_text(path) as f:
            reader = csv.DictReader(f)
            missing = [c for c in TABLE_COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise EvalDataError(f"{path}:1: no column(s) {', '.join(missing)} in the header "
                                    f"(got: {', '.join(reader.fieldnames or [])})")
            records = [(f"{path}:{reader.line_num}", r) for r in reader]
    if not records:
        raise EvalDataError(f"{path}: no rows")
    return [([_sentence(r["text"], w) for w, r in records], [_label(r["label"], w) for w, r in records])]


def read(path: Path, task: str) -> ClusteringTask:
    try:
        sets = _jsonl_sets(path) if ".jsonl" in path.suffixes else _table_set(path)
    except (UnicodeDecodeError, gzip.BadGzipFile, EOFError, OSError, csv.Error) as e:
        raise EvalDataError(f"{path}: cannot read ({e})") from None
    if not sets:
        raise EvalDataError(f"{path}: no clustering sets")
    return ClusteringTask(task, path, LEADERBOARD_SPLIT, sets)


def find(data_dir: Path) -> list[ClusteringTask]:
    return [read(path, task) for task, path in task_files(Path(data_dir), KIND, FORMATS).items()]


def assign(embeddings: np.ndarray, k: int, seed: int) -> np.ndarray:
    """One seeded mini-batch k-means run's cluster of each embedding."""
    model = MiniBatchKMeans(n_clusters=k, batch_size=BATCH_SIZE, n_init=1, init="k-means++", random_state=seed)
    return model.fit_predict(np.asarray(embeddings, dtype=np.float64))


def v_measure(labels: list[str], assignment: np.ndarray) -> float:
    return float(v_measure_score(labels, assignment))


def set_score(embeddings: np.ndarray, labels: list[str], seed: int) -> float:
    """A set's mean V-measure over RUNS seeded runs; a set of one label is 1.0 whatever the clusters (as MTEB)."""
    k = len(set(labels))
    if k <= 1:
        return 1.0
    return float(np.mean([v_measure(labels, assign(embeddings, k, seed + run)) for run in range(RUNS)]))


def score(task: ClusteringTask, embed, seed: int) -> list[dict]:
    scores = [set_score(np.asarray(embed(sentences)), labels, seed) for sentences, labels in task.sets]
    return [{"task": task.name, "subset": "all", "split": task.split, "metric": METRIC, "protocol": PROTOCOL,
             "value": float(np.mean(scores)), "n": sum(len(labels) for _, labels in task.sets)}]
