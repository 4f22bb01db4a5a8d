"""Geometry of an embedding space: alignment and uniformity (Wang & Isola, 2020), and anisotropy.

Alignment and uniformity are computed as SimCSE does (Gao et al., 2021,
section 5): on STS-B, pairs with a gold score of at least 4.0 are the
positives for alignment, and all STS-B sentences of the split are the data for
uniformity. Lower is better for both. Embeddings are L2-normalised first, as
both papers assume.

Anisotropy is Ethayarajh's (2019): the expected cosine similarity between the
contextual representations of randomly sampled words, here the encoder's
last-layer token states (special tokens left out; a bag-of-words encoder's
word vectors), for PAIRS pairs of token occurrences drawn uniformly from the
STS-B test sentences, the two of a pair from different sentences, seeded.
The mean cosine between two different sentences' embeddings is kept as
"sentence_anisotropy".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
from scipy.spatial.distance import pdist
from scipy.special import logsumexp

from pipeline.evaluate.column import Column
from pipeline.evaluate.kind import Kind, Task
from pipeline.evaluate.sts import NAME as STS
from pipeline.evaluate.sts import unit_rows
from pipeline.readers.sts import StsSubset, find_sts

PROTOCOL = "simcse"
TASK = "STSB"  # the task described
TOKEN_PROTOCOL = "ethayarajh"
POSITIVE_THRESHOLD = 4.0
PAIRS = 1000
_SPLITS = ("test", "dev")  # train (read for SentEval's regressor) is not described


def alignment(x: np.ndarray, y: np.ndarray, alpha: float = 2.0) -> float:
    """E ||f(x) - f(y)||^alpha over positive pairs (rows of x and y), on unit vectors."""
    return float(np.mean(np.linalg.norm(unit_rows(x) - unit_rows(y), axis=1) ** alpha))


def uniformity(x: np.ndarray, t: float = 2.0) -> float:
    """log E exp(-t ||f(x) - f(y)||^2) over all pairs of distinct rows, on unit vectors."""
    d2 = pdist(unit_rows(x), "sqeuclidean")
    return float(logsumexp(-t * d2) - np.log(len(d2)))


def sentence_anisotropy(x: np.ndarray) -> float:
    """Mean cosine similarity of two different sentences' embeddings.

    This is the exact mean over all pairs of distinct rows, which sampling
    random pairs would only estimate: sum_{i != j} u_i.u_j = |sum u|^2 - sum |u_i|^2.
    """
    u = unit_rows(x)
    n = len(u)
    total = u.sum(axis=0)
    return float((total @ total - np.einsum("ij,ij->", u, u)) / (n * (n - 1)))


def token_anisotropy(tokens: list[np.ndarray], pairs: int = PAIRS, seed: int = 0) -> float | None:
    """Mean cosine of `pairs` pairs of token occurrences, each drawn uniformly from all occurrences, the second
    from another sentence than the first; None with fewer than two sentences that have tokens."""
    counts = np.array([len(t) for t in tokens])
    if np.count_nonzero(counts) < 2:
        return None
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    unit = unit_rows(np.concatenate([t for t in tokens if len(t)]).astype(np.float64))
    rng = np.random.default_rng(seed)
    first = rng.integers(counts.sum(), size=pairs)
    # The last sentence starting at or before the occurrence: never an empty one, which shares its start.
    sentence = np.searchsorted(starts, first, side="right") - 1
    # Uniform over the occurrences outside the first's sentence: skip over its block.
    other = rng.integers(counts.sum() - counts[sentence])
    second = other + (other >= starts[sentence]) * counts[sentence]
    return float(np.mean(np.einsum("ij,ij->i", unit[first], unit[second])))


def score_analysis(
    encode: Callable[[list[str]], np.ndarray],
    subsets: list[StsSubset],
    task: str = TASK,
    threshold: float = POSITIVE_THRESHOLD,
    tokens: Callable[[list[str]], list[np.ndarray]] | None = None,
    seed: int = 0,
    pairs: int = PAIRS,
) -> list[dict]:
    """Rows (task, subset="all", split, metric, protocol, value, n) per scored split of `task` in `subsets`.

    Metrics: "alignment" (n = positive pairs), "uniformity" and "sentence_anisotropy" (n = distinct
    sentences), and, given `tokens` (sentences -> each one's token representations), "anisotropy" on the
    test split (n = token pairs). A split with no positive pair gets no alignment row.
    """
    rows: list[dict] = []
    for split in dict.fromkeys(s.split for s in subsets if s.task == task and s.split in _SPLITS):
        parts = [s for s in subsets if s.task == task and s.split == split]
        sentences = list(dict.fromkeys(x for s in parts for x in (*s.sent1, *s.sent2)))
        index = {x: i for i, x in enumerate(sentences)}
        emb = np.asarray(encode(sentences), dtype=np.float64)
        if emb.ndim != 2 or emb.shape[0] != len(sentences):
            raise ValueError(f"encode returned shape {emb.shape} for {len(sentences)} sentences")
        positives = [(index[a], index[b]) for s in parts for a, b, g in zip(s.sent1, s.sent2, s.gold) if g >= threshold]
        common = {"task": task, "subset": "all", "split": split, "protocol": PROTOCOL}
        if positives:
            left, right = map(list, zip(*positives))
            rows.append(
                {**common, "metric": "alignment", "value": alignment(emb[left], emb[right]), "n": len(positives)}
            )
        rows.append({**common, "metric": "uniformity", "value": uniformity(emb), "n": len(sentences)})
        rows.append({**common, "metric": "sentence_anisotropy", "value": sentence_anisotropy(emb), "n": len(sentences)})
        value = token_anisotropy(tokens(sentences), pairs, seed) if tokens and split == "test" else None
        if value is not None:
            rows.append({**common, "protocol": TOKEN_PROTOCOL, "metric": "anisotropy", "value": value, "n": pairs})
    return rows


# The analysis as a kind (pipeline.evaluate.kind): one unit, "analysis", over the STS subsets the STS kind found (of
# which score_analysis describes STS-B's), on with evaluate.analysis. Its sentences are STS's, indexed there, and its
# data STS's, hashed there. On the leaderboard, one column per metric, named by it, unscaled and without interval.
NAME = "analysis"
METRICS = ("alignment", "uniformity", "sentence_anisotropy", "anisotropy")


def columns(task: str = TASK) -> list[Column]:
    return [
        Column(task, NAME, metric, TOKEN_PROTOCOL if metric == "anisotropy" else PROTOCOL, form="{metric}")
        for metric in METRICS
    ]


def search(data_dir: Path, before: Mapping[str, list[Task]]) -> tuple[list[Task], list[str]]:
    return [Task(NAME, NAME, (), [s for t in before.get(STS, []) for s in t.data])], []


def find(data_dir: Path) -> list[Task]:
    return search(data_dir, {STS: [Task(STS, STS, (), find_sts(data_dir, required=False)[0])]})[0]


def score(task: Task, embed, seed: int) -> list[dict]:
    return score_analysis(embed, task.data, tokens=getattr(embed, "tokens", None), seed=seed)


KIND = Kind(
    name=NAME,
    find=find,
    score=score,
    texts=None,
    statistic=None,  # its rows keep no test items: no interval
    columns=columns,
    switch="analysis",
    search=search,
    fingerprint=lambda found: None,
    whole=True,
)
