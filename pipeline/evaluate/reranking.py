"""Reranking on the user's own data, scored as sentence-transformers' RerankingEvaluator scores it: each query's
candidates (its positives, then its negatives) ranked by cosine similarity to the query; MAP is the mean over
queries of sklearn's average_precision_score of that ranking, MRR@10 the mean of 1/rank of the first positive
among the top 10 (0 when none is). A query without positives or without negatives ranks nothing and is left
out, as the evaluator leaves it out; `n` counts the queries scored. MAP is the main metric, as in MTEB's
reranking tasks.

Files sit directly in an --eval-data directory, named `<task>.reranking.jsonl` (or `.jsonl.gz`), MTEB's layout:
one query a line, `{"query": "...", "positive": [...], "negative": [...]}` (a single string for a list of one,
as the evaluator accepts).
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sklearn.metrics import average_precision_score

from pipeline.evaluate import kind, resampled
from pipeline.evaluate.sts import unit_rows
from pipeline.readers import registry
from pipeline.readers.sts import EvalDataError, records

NAME = "reranking"
AT_K = 10
MAIN, MRR = registry.main_metric(NAME), f"mrr_at_{AT_K}"


@dataclass(frozen=True)
class Sample:
    query: str
    positive: list[str]
    negative: list[str]


def _texts(value, key: str, where: str) -> list[str]:
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise EvalDataError(f"{where}: {key} is {value!r}, not a list of texts")
    return texts


def _sample(where: str, record: dict) -> Sample:
    if not isinstance(record.get("query"), str):
        raise EvalDataError(f"{where}: query is {record.get('query')!r}, not a text")
    if not record["query"].strip():
        raise EvalDataError(f"{where}: an empty query")
    return Sample(
        record["query"],
        _texts(record.get("positive"), "positive", where),
        _texts(record.get("negative"), "negative", where),
    )


def read(path: Path) -> list[Sample]:
    try:
        samples = [_sample(where, record) for where, record in records(path, ".jsonl")]
    except (UnicodeDecodeError, gzip.BadGzipFile, EOFError, OSError) as e:
        raise EvalDataError(f"{path}: cannot read ({e})") from None
    if not any(s.positive and s.negative for s in samples):
        raise EvalDataError(f"{path}: no query with both a positive and a negative to rank")
    return samples


def find(data_dir: Path) -> list[kind.Task]:
    return [
        kind.Task(NAME, task, (str(path),), read(path))
        for task, path in kind.task_files(Path(data_dir), NAME, (".jsonl",)).items()
    ]


def reciprocal_rank(similarities: np.ndarray, relevant: np.ndarray, k: int = AT_K) -> float:
    """1/rank of the first relevant candidate within the top k by similarity, else 0."""
    top = np.argsort(-similarities, kind="stable")[:k]
    hits = np.flatnonzero(relevant[top])
    return 1.0 / (hits[0] + 1) if hits.size else 0.0


def score(task: kind.Task, embed, seed: int) -> list[dict]:
    """MAP and MRR@10 rows; `seed` is unused, nothing here being random."""
    samples = [s for s in task.data if s.positive and s.negative]
    queries = unit_rows(np.asarray(embed([s.query for s in samples]), dtype=np.float64))
    docs = unit_rows(np.asarray(embed([d for s in samples for d in (*s.positive, *s.negative)]), dtype=np.float64))
    aps, rrs, start = [], [], 0
    for query, s in zip(queries, samples):
        end = start + len(s.positive) + len(s.negative)
        similarities = docs[start:end] @ query
        relevant = np.array([1] * len(s.positive) + [0] * len(s.negative))
        aps.append(average_precision_score(relevant, similarities))
        rrs.append(reciprocal_rank(similarities, relevant))
        start = end
    kind.keep_items(embed, task, aps)
    return kind.rows(NAME, task.name, {MAIN: float(np.mean(aps)), MRR: float(np.mean(rrs))}, len(samples))


# Decontamination indexes its queries and their candidates.
KIND = kind.Kind(
    NAME,
    find,
    score,
    texts=lambda d: [t for s in d for t in (s.query, *s.positive, *s.negative)],
    statistic=resampled.mean,
    mteb=kind.Mteb("Reranking", {MAIN: "map_at_1000", MRR: "mrr_at_10"}),
)
