"""Pair classification (MTEB's kind, e.g. duplicate questions): is each sentence pair a positive (label 1) or not.

Found as the files directly in the evaluation data named `<task>.pairclass.<format>` (quora.pairclass.csv -> task
"quora"), as the other kinds' files are (pipeline.evaluate.kind.task_files): `sentence1`, `sentence2`, `label`
(0 or 1) columns in CSV, TSV, JSONL or Parquet, the text ones optionally gzipped.

Scored as sentence-transformers' BinaryClassificationEvaluator does with cosine similarity: "AP" (average
precision of the cosine over the pairs, MTEB's main score), "accuracy" and "F1" at the best threshold on the
cosine, each threshold placed between two distinct cosines, so tied pairs are never split.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from sklearn.metrics import average_precision_score

from pipeline.evaluate import kind, resampled
from pipeline.readers import registry
from pipeline.readers.names import PAIR_SUFFIXES, pair_format
from pipeline.readers.sts import EvalDataError, sentence_pairs

NAME = "pairclass"
MAIN = registry.main_metric(NAME)
COLUMNS = ("sentence1", "sentence2", "label")


def _label(value, where: str) -> int:
    if isinstance(value, bool) or str(value).strip() not in ("0", "1"):
        raise EvalDataError(f"{where}: label is {value!r}, not 0 or 1")
    return int(str(value).strip())


def read(task: str, path: Path) -> kind.Task:
    fmt = pair_format(path)
    sent1, sent2, labels = sentence_pairs(path, fmt, COLUMNS, _label, EvalDataError)
    if len(set(labels)) < 2:
        raise EvalDataError(f"{path}: needs pairs of both labels, 0 and 1 (has {sorted(set(labels)) or 'none'})")
    return kind.Task(NAME, task, (str(path),), (sent1, sent2, np.asarray(labels)))


def find(data_dir: Path) -> list[kind.Task]:
    return [read(task, path) for task, path in kind.task_files(data_dir, NAME, PAIR_SUFFIXES).items()]


def cosines(embed, sent1: list[str], sent2: list[str]) -> np.ndarray:
    """Each pair's cosine, every distinct sentence embedded once (as the evaluator does)."""
    unique = list(dict.fromkeys([*sent1, *sent2]))
    vectors = np.asarray(embed(unique), dtype=np.float32)
    vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    at = {s: i for i, s in enumerate(unique)}
    u, v = vectors[[at[s] for s in sent1]], vectors[[at[s] for s in sent2]]
    return np.sum(u * v, axis=1)


def best_accuracy(scores: np.ndarray, labels: np.ndarray) -> float:
    """The best accuracy of "positive above a threshold", over thresholds between distinct scores (and above all)."""
    order = np.argsort(-scores, kind="stable")
    s, y = scores[order], labels[order]
    last = np.r_[s[1:] != s[:-1], True]  # the last pair of each group of equal scores
    positives, negatives = np.cumsum(y)[last], np.cumsum(1 - y)[last]
    correct = positives + (len(y) - y.sum()) - negatives
    return float(max((len(y) - y.sum()) / len(y), correct.max() / len(y)))


def best_f1(scores: np.ndarray, labels: np.ndarray) -> float:
    order = np.argsort(-scores, kind="stable")
    s, y = scores[order], labels[order]
    last = np.r_[s[1:] != s[:-1], True]
    correct, extracted = np.cumsum(y)[last], np.arange(1, len(y) + 1)[last]
    f1 = 2 * correct / (extracted + y.sum())  # 2PR/(P+R) with P = correct/extracted, R = correct/positives
    return float(f1.max())


def score(task: kind.Task, embed, seed: int) -> list[dict]:
    """AP, accuracy and F1 of cosine similarity; `seed` unused (nothing here is random)."""
    sent1, sent2, labels = task.data
    scores = cosines(embed, sent1, sent2)
    values = {
        MAIN: average_precision_score(labels, scores),
        "accuracy": best_accuracy(scores, labels),
        "F1": best_f1(scores, labels),
    }
    kind.keep_items(embed, task, scores, labels)
    return kind.rows(NAME, task.name, values, len(labels))


# Decontamination indexes both sides of its pairs. MTEB's main score is max_ap, the best over five similarity
# functions; only cosine is scored here, so its main score is cosine_ap.
KIND = kind.Kind(
    NAME,
    find,
    score,
    texts=lambda d: [*d[0], *d[1]],
    statistic=resampled.pooled_average_precision,
    mteb=kind.Mteb("PairClassification", {MAIN: "cosine_ap", "accuracy": "cosine_accuracy", "F1": "cosine_f1"}),
)
