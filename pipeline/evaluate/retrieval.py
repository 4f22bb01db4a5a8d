"""Retrieval (BEIR's and MTEB's kind): for each query, rank a corpus of passages by cosine similarity.

Found as every directory under the evaluation data holding BEIR's layout (read by pipeline.readers.beir), the task
named by the directory: `corpus.jsonl` (`_id`, `text`, optional `title`), `queries.jsonl` (`_id`, `text`) and
`qrels/test.tsv` (`query-id`, `corpus-id`, `score`, tab-separated, with a header line); each file may be gzipped
(`.gz`).

Scored as sentence-transformers' InformationRetrievalEvaluator does, with cosine similarity: a passage is its
title and text joined by a space (stripped); a query-passage pair is relevant when its qrels score is above 0 (the
grade itself is not used: relevance is binary, as the evaluator's relevant-document sets are); queries without a
relevant passage are left out; passages are ranked by cosine, ties by passage id. The metrics, averaged over the
queries: "nDCG@10" (main), "MRR@10", "Recall@100" and "MAP@100" (average precision over the first 100, divided
by min(100, relevant passages)).

The search is exact and bounded in memory: the corpus is embedded CHUNK passages at a time, each chunk scored
against QUERIES queries at a time and only each query's best TOP candidates kept across chunks.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pipeline.evaluate import kind, resampled
from pipeline.readers import beir, registry
from pipeline.readers.beir import MAX_CHARS, SPLIT, Data  # noqa: F401 (MAX_CHARS: the cut's size, as tests read it)
from pipeline.readers.sts import task_name

NAME = "retrieval"
MAIN = registry.main_metric(NAME)
CHUNK, QUERIES = 50_000, 256
NDCG_K, MRR_K, RECALL_K, MAP_K = 10, 10, 100, 100
TOP = max(NDCG_K, MRR_K, RECALL_K, MAP_K)


def read(directory: Path, split: str = SPLIT) -> kind.Task:
    """The task in `directory`, its queries those of qrels/<split>.tsv (train.select_by reads the dev split)."""
    return kind.Task(NAME, task_name(directory.name, directory), *beir.read(directory, split))


def find(data_dir: Path, split: str = SPLIT) -> list[kind.Task]:
    """Every directory under data_dir in BEIR's layout (pipeline.readers.beir.directories), read."""
    return [read(d, split) for d in beir.directories(data_dir)]


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def search(queries: np.ndarray, embed_chunks, rank: np.ndarray, top: int = TOP) -> np.ndarray:
    """Each query's `top` passages (their indices), by cosine and then by `rank` (the passage ids' order) among
    equal cosines. `embed_chunks` yields (start, unit vectors) of consecutive corpus chunks; `queries` are unit
    vectors. Every candidate tied with a chunk's cut-off is kept, so ties are broken exactly as over the whole
    corpus."""
    best_i = [np.zeros(0, dtype=np.int64) for _ in range(len(queries))]
    best_s = [np.zeros(0, dtype=np.float32) for _ in range(len(queries))]
    for start, chunk in embed_chunks:
        for q0 in range(0, len(queries), QUERIES):
            # In float64, rounded to float32: a float32 product's last bit depends on the row's place in the
            # matrix, which would rank two copies of one passage by where they sit rather than by id.
            sims = (queries[q0 : q0 + QUERIES] @ chunk.T).astype(np.float32)
            k = min(top, chunk.shape[0])
            cut = -np.partition(-sims, k - 1, axis=1)[:, k - 1]
            for r, row in enumerate(sims):
                q = q0 + r
                cand = np.flatnonzero(row >= cut[r])
                i, s = np.r_[best_i[q], cand + start], np.r_[best_s[q], row[cand]]
                keep = np.lexsort((rank[i], -s))[:top]
                best_i[q], best_s[q] = i[keep], s[keep]
    return best_i


def metrics(ranked: list[list[str]], relevant: list[set[str]]) -> dict[str, np.ndarray]:
    """The evaluator's metrics of each query's ranked passage ids against its relevant ones, query by query (the
    scores are their means)."""
    ndcg, mrr, recall, ap = [], [], [], []
    for ids, rel in zip(ranked, relevant):
        hits = np.array([p in rel for p in ids[:TOP]], dtype=np.float64)
        discount = 1 / np.log2(np.arange(2, TOP + 2))
        ideal = discount[: min(len(rel), NDCG_K)].sum()
        ndcg.append((hits[:NDCG_K] * discount[: len(hits[:NDCG_K])]).sum() / ideal)
        first = np.flatnonzero(hits[:MRR_K])
        mrr.append(1 / (first[0] + 1) if len(first) else 0.0)
        recall.append(hits[:RECALL_K].sum() / len(rel))
        at = hits[:MAP_K]
        ap.append((np.cumsum(at) / np.arange(1, len(at) + 1) * at).sum() / min(MAP_K, len(rel)))
    return {
        MAIN: np.array(ndcg),
        f"MRR@{MRR_K}": np.array(mrr),
        f"Recall@{RECALL_K}": np.array(recall),
        f"MAP@{MAP_K}": np.array(ap),
    }


def score(task: kind.Task, embed, seed: int) -> list[dict]:
    """nDCG@10, MRR@10, Recall@100 and MAP@100 over the task's queries; `seed` unused (nothing here is random)."""
    d: Data = task.data
    queries = _unit(embed(d.queries))
    rank = np.argsort(np.argsort(np.array(d.passage_ids, dtype=object), kind="stable"), kind="stable")
    chunks = ((s, _unit(embed(d.passages[s : s + CHUNK]))) for s in range(0, len(d.passages), CHUNK))
    best = search(queries, chunks, rank)
    ranked = [[d.passage_ids[i] for i in row] for row in best]
    per_query = metrics(ranked, [d.relevant[q] for q in d.query_ids])
    kind.keep_items(embed, task, per_query[MAIN])
    return kind.rows(NAME, task.name, {k: v.mean() for k, v in per_query.items()}, len(d.query_ids), SPLIT)


# Decontamination indexes its passages and queries.
KIND = kind.Kind(
    NAME,
    find,
    score,
    texts=lambda d: [*d.passages, *d.queries],
    statistic=resampled.mean,
    mteb=kind.Mteb(
        "Retrieval",
        {
            MAIN: "ndcg_at_10",
            f"MRR@{MRR_K}": "mrr_at_10",
            f"Recall@{RECALL_K}": "recall_at_100",
            f"MAP@{MAP_K}": "map_at_100",
        },
    ),
)
