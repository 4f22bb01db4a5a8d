"""Scoring STS12-16, STS-B, SICK-R and STS pair files (read by pipeline.readers.sts).

Every row names its protocol (DESIGN.md, "Evaluation"); papers mix them up:

- STS12-16, cosine similarity: "subset" rows per subset; "senteval" is the
  unweighted mean of the per-subset correlations (SentEval's
  results["all"]["spearman"]["mean"], which DeCLUTR reports; SentEval's
  "wmean" weights by subset size and is not computed); "simcse" is one
  correlation over all of the task's pairs concatenated (the "all" of SimCSE's
  SentEval fork, which SimCSE's table 1 reports).
- STS-B and SICK-R: "cosine" is the correlation of cosine similarity with the
  gold scores (what SimCSE reports, on test); "senteval" is SentEval's
  supervised regressor on [|u-v|, u*v] trained on the train split and selected
  on dev (pipeline.evaluate.relatedness; what DeCLUTR reports), scored only when the
  task has all three splits.
- STS pair files (MTEB's layout: sentence1, sentence2, score columns in CSV,
  TSV, JSONL or Parquet, optionally gzipped): one task per file, named by the
  file's stem and scored like STS-B's "cosine" (one correlation of cosine
  similarity with the scores, the protocol MTEB reports); they have no train
  split, so no regressor.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import numpy as np
from scipy import stats

from pipeline.evaluate import relatedness, resampled
from pipeline.evaluate.column import Column
from pipeline.evaluate.items import WHOLE, Items
from pipeline.evaluate.kind import Kind, Mteb, Task
from pipeline.progress import Progress
from pipeline.readers.names import (
    MTEB_STS,
    PAIR_PROTOCOL,
    RELATEDNESS_TASKS,
    SIMILARITY_PROTOCOLS,
    STS_TASKS,
    STS_YEARS,
)
from pipeline.readers.sts import LEADERBOARD_SPLIT, SCORED_SPLITS, SPLITS, StsSubset, data_hash, find_sts

# SentEval's default params.batch_size: how many pairs its batcher embeds at a time.
BATCH_SIZE = 128


def unit_rows(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


def _rows(task: str, subset: str, split: str, protocol: str, sims: np.ndarray, gold: np.ndarray, n: int) -> list[dict]:
    return [
        {
            "task": task,
            "subset": subset,
            "split": split,
            "metric": "spearman",
            "protocol": protocol,
            "value": float(stats.spearmanr(sims, gold).statistic),
            "n": n,
        },
        {
            "task": task,
            "subset": subset,
            "split": split,
            "metric": "pearson",
            "protocol": protocol,
            "value": float(stats.pearsonr(sims, gold).statistic),
            "n": n,
        },
    ]


def _pairs(
    encode: Callable[[list[str]], np.ndarray], s: StsSubset, progress: Progress
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(u, v, gold) as SentEval's STSEval and SICKRelatednessEval see a split: pairs in its order, each side
    embedded in batches of BATCH_SIZE as its batcher receives them (the words joined by one space). Noise from
    padding then matches SentEval's, which decides how pairs of identical sentences (cosine ~1) rank."""
    order = relatedness.senteval_order(s.sent1, s.sent2, s.gold)
    u, v = [], []
    for i in range(0, len(order), BATCH_SIZE):
        batch = order[i : i + BATCH_SIZE]
        for side, out in ((s.sent1, u), (s.sent2, v)):
            emb = np.asarray(encode([" ".join(side[j].split()) for j in batch]))
            if emb.ndim != 2 or emb.shape[0] != len(batch):
                raise ValueError(f"encode returned shape {emb.shape} for {len(batch)} sentences")
            out.append(emb)
        progress.update(len(batch))
    return np.concatenate(u), np.concatenate(v), s.gold[order]


def _cosines(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """SentEval's similarity, pair by pair in the embeddings' own precision (float32 for every encoder here):
    vectorised float64 cosines rank near-ties differently, by up to 5e-4 in an STS12 subset's Spearman."""
    u, v = np.nan_to_num(u), np.nan_to_num(v)
    with np.errstate(invalid="ignore", divide="ignore"):  # a zero vector: SentEval's nan, scored as 0
        return np.nan_to_num(np.array([np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)) for a, b in zip(u, v)]))


def _cosine(pairs: list[tuple[StsSubset, tuple]], items: list[Items] | None) -> list[dict]:
    rows: list[dict] = []
    groups: dict[tuple[str, str], list[tuple[np.ndarray, np.ndarray]]] = {}
    for s, (u, v, gold) in pairs:
        sims = _cosines(u, v)
        whole = (
            s.task not in STS_TASKS or s.task in RELATEDNESS_TASKS
        )  # one subset a split: its correlation is the task's
        if items is not None and s.split == LEADERBOARD_SPLIT:
            items.append(Items(s.task, "cosine", WHOLE if whole else s.name, sims, gold))
        if whole:
            rows += _rows(s.task, "all", s.split, "cosine", sims, gold, len(gold))
            continue
        rows += _rows(s.task, s.name, s.split, "subset", sims, gold, len(gold))
        groups.setdefault((s.task, s.split), []).append((sims, gold))

    for (task, split), parts in groups.items():
        n = sum(len(g) for _, g in parts)
        per_subset = [r for r in rows if r["task"] == task and r["split"] == split and r["protocol"] == "subset"]
        for metric in ("spearman", "pearson"):
            mean = float(np.mean([r["value"] for r in per_subset if r["metric"] == metric]))
            rows.append(
                {
                    "task": task,
                    "subset": "all",
                    "split": split,
                    "metric": metric,
                    "protocol": "senteval",
                    "value": mean,
                    "n": n,
                }
            )
        sims = np.concatenate([p[0] for p in parts])
        gold = np.concatenate([p[1] for p in parts])
        rows += _rows(task, "all", split, "simcse", sims, gold, n)
    return rows


def _regressor(task: str, splits: dict[str, tuple], seed: int, items: list[Items] | None) -> list[dict]:
    """SentEval's relatedness rows: test Spearman and Pearson, and the dev Pearson the model was selected on."""
    data = {split: (relatedness.pair_features(u, v), gold) for split, (u, v, gold) in splits.items()}
    dev_pearson, predicted = relatedness.fit_predict(*data["train"], *data["dev"], data["test"][0], seed=seed)
    test_gold = data["test"][1]
    if items is not None:
        items.append(Items(task, relatedness.PROTOCOL, WHOLE, predicted, test_gold))
    common = {"task": task, "subset": "all", "protocol": relatedness.PROTOCOL}
    return [
        {
            **common,
            "split": "test",
            "metric": "spearman",
            "value": float(stats.spearmanr(predicted, test_gold).statistic),
            "n": len(test_gold),
        },
        {
            **common,
            "split": "test",
            "metric": "pearson",
            "value": float(stats.pearsonr(predicted, test_gold).statistic),
            "n": len(test_gold),
        },
        {**common, "split": "dev", "metric": "pearson", "value": float(dev_pearson), "n": len(data["dev"][1])},
    ]


def score_sts(
    encode: Callable[[list[str]], np.ndarray],
    subsets: list[StsSubset],
    seed: int = relatedness.SEED,
    items: list[Items] | None = None,
) -> list[dict]:
    """Score rows (task, subset, split, metric, protocol, value, n): cosine similarity of `encode` on the test and
    dev splits, and SentEval's regressor (seeded with `seed`) for STS-B and SICK-R when they have train, dev and
    test. Given `items`, appends each test split's per-pair predictions and gold scores (pipeline.evaluate.items)."""
    regressed = {task for task in RELATEDNESS_TASKS if set(SPLITS) <= {s.split for s in subsets if s.task == task}}
    embedded = [s for s in subsets if s.split in SCORED_SPLITS or s.task in regressed]
    with Progress("embedding", sum(len(s.gold) for s in embedded), "pairs") as progress:
        pairs = [(s, _pairs(encode, s, progress)) for s in embedded]
    rows = _cosine([(s, p) for s, p in pairs if s.split in SCORED_SPLITS], items)
    for task in sorted(regressed, key=RELATEDNESS_TASKS.index):
        rows += _regressor(task, {s.split: p for s, p in pairs if s.task == task}, seed, items)
    return rows


# STS as a kind (pipeline.evaluate.kind): its tasks are SentEval's STS directories and the STS pair files, a task
# holding its subsets (StsSubset) in find_sts's order; shown as "<task> <protocol>", one column per protocol.
NAME = "sts"
UNSCORED = "train"  # SentEval fits the relatedness regressor on it and takes no score there
COSINE = "cosine"  # the protocol the cosine similarities' test items are kept under, whichever column they serve
# How each of an STS12-16 task's columns is recomputed from those items (pipeline.leaderboard.intervals).
YEAR_STATISTICS = {"senteval": resampled.mean_spearman, "simcse": resampled.pooled_spearman}
YEAR_MTEB = "simcse"


def tasks(subsets: list[StsSubset]) -> list[Task]:
    """The STS tasks of `subsets`, in the order of their first subsets."""
    return [
        Task(NAME, task, (), [s for s in subsets if s.task == task]) for task in dict.fromkeys(s.task for s in subsets)
    ]


def find(data_dir: Path) -> list[Task]:
    return tasks(find_sts(data_dir, required=False)[0])


def search(data_dir: Path, before: Mapping[str, list[Task]]) -> tuple[list[Task], list[str]]:
    """STS's tasks and SentEval's STS tasks the data lacks; data holding no task of the kinds searched before (the
    file kinds') must hold STS's (find_sts's error names what it looked for)."""
    subsets, absent = find_sts(data_dir, required=not any(before.values()))
    return tasks(subsets), absent


def fingerprint(found: list[Task]) -> str:
    """The hash of exactly the subsets scored (pipeline.readers.sts.data_hash), in find_sts's order."""
    return data_hash([s for t in found for s in t.data])


def score(task: Task, embed, seed: int) -> list[dict]:
    return score_sts(embed, task.data, seed=seed, items=getattr(embed, "items", None))


def texts(subsets: list[StsSubset]) -> Iterator[str]:
    """What decontamination indexes: every scored split's sentences (dev too: a model selected on it has seen it)."""
    for s in subsets:
        if s.split != UNSCORED:
            yield from s.sent1
            yield from s.sent2


def columns(task: str) -> list[Column]:
    """A task's columns, in the leaderboard's order: STS12-16 "senteval" and "simcse" (both from the cosine items),
    STS-B and SICK-R "cosine" and "senteval" (the regressor's own items), an STS pair file "cosine"."""
    return [
        Column(
            task=task,
            kind=NAME,
            metric="spearman",
            protocol=protocol,
            form="{task} {protocol}",
            kept_as=COSINE if task in STS_YEARS else "",
            statistic=YEAR_STATISTICS[protocol] if task in STS_YEARS else resampled.pooled_spearman,
        )
        for protocol in SIMILARITY_PROTOCOLS.get(task, (PAIR_PROTOCOL,))
    ]


def mteb_protocol(task: str) -> str:
    """The protocol whose rows MTEB's STS evaluator scores alike: one correlation over all of a task's test pairs,
    STS12-16's "simcse" (their subsets concatenated), STS-B's, SICK-R's and the pair files' "cosine"."""
    return YEAR_MTEB if task in STS_YEARS else PAIR_PROTOCOL


def kept_columns(task: str, protocol: str) -> list[Column]:
    """The columns recomputed from the test items a model kept as (task, protocol): none for items not STS's (a
    transfer task's "senteval" ones, say)."""
    if protocol != COSINE and not (task in RELATEDNESS_TASKS and protocol == relatedness.PROTOCOL):
        return []
    return [c for c in columns(task) if (c.kept_as or c.protocol) == protocol]


KIND = Kind(
    name=NAME,
    find=find,
    score=score,
    texts=texts,
    statistic=resampled.pooled_spearman,
    columns=columns,
    # STS12-16 keep their names in MTEB, with the same test pairs (3,108, 1,500, 3,750, 3,000 and 1,186); STS-B is
    # MTEB's STSBenchmark, and SICK-R its SICK-R only at MTEB's 9,927 pairs.
    mteb=Mteb(
        "STS",
        {"spearman": "cosine_spearman", "pearson": "cosine_pearson"},
        protocol=mteb_protocol,
        names=MTEB_STS,
    ),
    search=search,
    fingerprint=fingerprint,
)
