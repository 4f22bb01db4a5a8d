"""Clustering on the user's own data, scored as MTEB scores its clustering tasks: V-measure of mini-batch k-means
on the embeddings, with k the number of distinct gold labels.

Files sit directly in an --eval-data directory (as STS pair files do), named `<task>.clustering.<format>`
(`<task>.reranking.jsonl` and `<task>.pairclass.<format>` for the other kinds), text formats optionally gzipped:
- `.jsonl`, MTEB's layout: each line one clustering set, `{"sentences": [...], "labels": [...]}`;
- `.csv`, `.tsv` or `.parquet` with `text` and `label` columns: one set.
A set of one label (one sentence, say), or of a label per sentence, is refused naming it: any model clusters it
perfectly (MTEB scores such a set 1.0).

Each set is clustered RUNS times, k-means seeded seed, seed+1, ...; the task's score is the mean over its sets
of each set's mean V-measure over the runs (MTEB averages its sets the same way). MTEB's own k-means settings:
batch size 512, one k-means++ initialisation. MTEB's AbsTaskClustering also takes its ten runs from one seed, on
bootstrap resamples (16,384 sentences drawn with replacement); here every run sees the whole set and the seed
varies instead, so a small set is not scored on thousands of duplicates.
"""

from __future__ import annotations

import csv
import gzip
from pathlib import Path

import numpy as np
from sklearn.cluster import MiniBatchKMeans
from sklearn.metrics import v_measure_score

from pipeline.evaluate import kind, resampled
from pipeline.evaluate.items import run_stratum
from pipeline.readers import registry
from pipeline.readers.names import pair_format
from pipeline.readers.sts import EvalDataError, records

NAME = "clustering"
MAIN = registry.main_metric(NAME)
RUNS = 10
# MTEB's AbsTaskClustering.k_mean_batch_size, and n_init=1 with k-means++ (sklearn's "auto" for it).
BATCH_SIZE = 512
TABLE_COLUMNS = ("text", "label")
FORMATS = (".jsonl", ".csv", ".tsv", ".parquet")


def _label(value, where: str) -> str:
    # A label names a cluster, so 1 and "1" are one; bool is an int to Python, but True is no cluster's name. An
    # empty cell (a CSV's missing label) would gather every unlabelled sentence into one made-up cluster.
    if isinstance(value, str) and not value.strip():
        raise EvalDataError(f"{where}: an empty label")
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return str(value)
    raise EvalDataError(f"{where}: label {value!r} is not a string or an integer")


def _sentence(value, where: str) -> str:
    if not isinstance(value, str):
        raise EvalDataError(f"{where}: sentence {value!r} is not a string")
    return value


def _clusterable(where: str, sentences: list[str], labels: list[str]) -> tuple[list[str], list[str]]:
    """A set whose every sentence has one label, or its own label, is clustered perfectly by any model (V-measure
    1.0: one cluster, or one a sentence): it scores nothing, and would lift every model's mean alike."""
    k = len(set(labels))
    if k == 1:
        raise EvalDataError(
            f"{where}: one label ({labels[0]!r}) for all {len(labels)} sentence(s): any model clusters it perfectly; "
            "a clustering set needs two labels or more"
        )
    if k == len(labels):
        raise EvalDataError(
            f"{where}: each of its {k} sentences has a label of its own: any model clusters it perfectly; a "
            "clustering set needs a label shared by two sentences or more"
        )
    return sentences, labels


def _jsonl_set(where: str, record: dict) -> tuple[list[str], list[str]]:
    sentences, labels = record.get("sentences"), record.get("labels")
    if not isinstance(sentences, list) or not isinstance(labels, list):
        raise EvalDataError(f'{where}: expected lists "sentences" and "labels"')
    if len(sentences) != len(labels):
        raise EvalDataError(f"{where}: {len(sentences)} sentences but {len(labels)} labels")
    if not sentences:
        raise EvalDataError(f"{where}: an empty clustering set")
    return _clusterable(where, [_sentence(s, where) for s in sentences], [_label(v, where) for v in labels])


def read(path: Path) -> list[tuple[list[str], list[str]]]:
    """(sentences, labels) of each clustering set in the file: one a line of JSONL, one for a table."""
    fmt = pair_format(path)
    try:
        if fmt == ".jsonl":
            sets = [_jsonl_set(where, record) for where, record in records(path, fmt)]
        else:
            rows = list(records(path, fmt, TABLE_COLUMNS))
            sets = (
                [
                    _clusterable(
                        str(path),
                        [_sentence(r["text"], w) for w, r in rows],
                        [_label(r["label"], w) for w, r in rows],
                    )
                ]
                if rows
                else []
            )
    except (UnicodeDecodeError, gzip.BadGzipFile, EOFError, OSError, csv.Error) as e:
        raise EvalDataError(f"{path}: cannot read ({e})") from None
    if not sets:
        raise EvalDataError(f"{path}: no clustering sets")
    return sets


def find(data_dir: Path) -> list[kind.Task]:
    return [
        kind.Task(NAME, task, (str(path),), read(path))
        for task, path in kind.task_files(Path(data_dir), NAME, FORMATS).items()
    ]


def assign(embeddings: np.ndarray, k: int, seed: int) -> np.ndarray:
    """One seeded mini-batch k-means run's cluster of each embedding."""
    model = MiniBatchKMeans(n_clusters=k, batch_size=BATCH_SIZE, n_init=1, init="k-means++", random_state=seed)
    return model.fit_predict(np.asarray(embeddings, dtype=np.float64))


def v_measure(labels: list[str], assignment: np.ndarray) -> float:
    return float(v_measure_score(labels, assignment))


def assignments(embeddings: np.ndarray, labels: list[str], seed: int) -> list[np.ndarray]:
    """A set's clusters in each of RUNS seeded runs."""
    return [assign(embeddings, len(set(labels)), seed + run) for run in range(RUNS)]


def score(task: kind.Task, embed, seed: int) -> list[dict]:
    """The mean over the task's sets of each set's mean V-measure over its runs."""
    scores = []
    for at, (sentences, labels) in enumerate(task.data):
        runs = assignments(np.asarray(embed(sentences)), labels, seed)
        scores.append(np.mean([v_measure(labels, a) for a in runs]))
        codes = np.unique(labels, return_inverse=True)[1]
        for run, a in enumerate(runs):
            kind.keep_items(embed, task, a, codes, run_stratum(at, run))
    return kind.rows(NAME, task.name, {MAIN: float(np.mean(scores))}, sum(len(labels) for _, labels in task.data))


# Decontamination indexes its clustered sentences.
KIND = kind.Kind(
    NAME,
    find,
    score,
    texts=lambda d: [s for sentences, _ in d for s in sentences],
    statistic=resampled.mean_v_measure,
    mteb=kind.Mteb("Clustering", {MAIN: "v_measure"}),
)
