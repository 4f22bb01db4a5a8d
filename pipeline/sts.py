"""STS12-16 and STS-B in SentEval's file layout: reading, and cosine/Spearman scoring.

Both published aggregations are computed and labelled (DESIGN.md, "Evaluation"):
"senteval" is the mean of per-subset correlations, "simcse" is one correlation
over all of a task's pairs concatenated. They differ, and papers mix them up.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
from scipy import stats
from pipeline.errors import InputError

STS_TASKS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSB")
LEADERBOARD_SPLIT = "test"

_STSB_DIR = "STSBenchmark"
# Only test and dev are scored: train is what supervised models are fitted on.
_STSB_SPLITS = ("test", "dev")
# SentEval's STSBenchmarkEval reads these 0-based columns; later ones are ignored.
_STSB_SCORE, _STSB_SENT1, _STSB_SENT2 = 4, 5, 6


class StsDataError(InputError):
    """The STS data directory is missing or malformed; the message names the path."""


@dataclass(frozen=True)
class StsSubset:
    task: str
    name: str
    split: str
    sent1: list[str]
    sent2: list[str]
    gold: np.ndarray


def _task_dir(task: str) -> str:
    return _STSB_DIR if task == "STSB" else f"{task}-en-test"


def _lines(path: Path) -> list[str]:
    # Split on newlines only: str.splitlines() would also break inside a
    # sentence at characters such as U+2028 and misalign sentences and scores.
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r") for line in lines]


def _float(value: str, path: Path, lineno: int) -> float:
    try:
        return float(value)
    except ValueError:
        raise StsDataError(f"{path}:{lineno}: gold score {value!r} is not a number") from None


def _read_sts_subset(task: str, input_path: Path) -> StsSubset:
    name = input_path.name[len("STS.input."):-len(".txt")]
    gs_path = input_path.with_name(f"STS.gs.{name}.txt")
    if not gs_path.is_file():
        raise StsDataError(f"{input_path} has no gold file {gs_path}")
    inputs, golds = _lines(input_path), _lines(gs_path)
    if len(inputs) != len(golds):
        raise StsDataError(
            f"{input_path} has {len(inputs)} lines but {gs_path} has {len(golds)}")
    sent1, sent2, gold = [], [], []
    for lineno, (line, g) in enumerate(zip(inputs, golds), start=1):
        fields = line.split("\t")
        if len(fields) < 2:
            raise StsDataError(f"{input_path}:{lineno}: expected sentence1<TAB>sentence2")
        # An empty gold line marks a pair the organisers did not score (SentEval skips it).
        if not g.strip():
            continue
        # SentEval's download script keeps columns 1-2 (cut -f1/-f2); extra ones are ignored alike.
        sent1.append(fields[0])
        sent2.append(fields[1])
        gold.append(_float(g, gs_path, lineno))
    return StsSubset(task, name, LEADERBOARD_SPLIT, sent1, sent2, np.asarray(gold, dtype=np.float64))


def _read_stsb_split(path: Path, split: str) -> StsSubset:
    # Plain tab splitting, not the csv module: sentences contain unbalanced quotes.
    sent1, sent2, gold = [], [], []
    for lineno, line in enumerate(_lines(path), start=1):
        fields = line.split("\t")
        if len(fields) <= _STSB_SENT2:
            raise StsDataError(
                f"{path}:{lineno}: expected at least {_STSB_SENT2 + 1} tab-separated columns, got {len(fields)}")
        gold.append(_float(fields[_STSB_SCORE], path, lineno))
        sent1.append(fields[_STSB_SENT1])
        sent2.append(fields[_STSB_SENT2])
    return StsSubset("STSB", f"sts-{split}", split, sent1, sent2, np.asarray(gold, dtype=np.float64))


def _read_task(task: str, task_dir: Path) -> list[StsSubset]:
    if task == "STSB":
        test = task_dir / "sts-test.csv"
        if not test.is_file():
            raise StsDataError(f"{task_dir} has no sts-test.csv")
        return [_read_stsb_split(task_dir / f"sts-{split}.csv", split)
                for split in _STSB_SPLITS if (task_dir / f"sts-{split}.csv").is_file()]
    inputs = sorted(task_dir.glob("STS.input.*.txt"))
    if not inputs:
        raise StsDataError(f"{task_dir} has no STS.input.*.txt files")
    return [_read_sts_subset(task, path) for path in inputs]


def find_sts(data_dir: str | Path) -> tuple[list[StsSubset], list[str]]:
    """Load every known STS task under data_dir; return (subsets, names of absent tasks)."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise StsDataError(f"STS data directory {data_dir} does not exist")
    subsets: list[StsSubset] = []
    absent: list[str] = []
    for task in STS_TASKS:
        task_dir = data_dir / _task_dir(task)
        if task_dir.is_dir():
            subsets.extend(_read_task(task, task_dir))
        else:
            absent.append(task)
    if not subsets:
        looked_for = ", ".join(f"{_task_dir(t)}/" for t in STS_TASKS)
        raise StsDataError(f"no known STS task in {data_dir} (looked for {looked_for})")
    return subsets, absent


def data_hash(subsets: list[StsSubset]) -> str:
    """Short sha256 of exactly what was scored, so scores from different data never mix silently."""
    h = hashlib.sha256()
    for s in subsets:
        h.update(json.dumps([s.task, s.name, s.split, s.sent1, s.sent2, s.gold.tolist()]).encode())
        h.update(b"\n")
    return h.hexdigest()[:16]


def _unit_rows(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


def _rows(task: str, subset: str, split: str, protocol: str,
          sims: np.ndarray, gold: np.ndarray, n: int) -> list[dict]:
    return [
        {"task": task, "subset": subset, "split": split, "metric": "spearman", "protocol": protocol,
         "value": float(stats.spearmanr(sims, gold).statistic), "n": n},
        {"task": task, "subset": subset, "split": split, "metric": "pearson", "protocol": protocol,
         "value": float(stats.pearsonr(sims, gold).statistic), "n": n},
    ]


def score_sts(encode: Callable[[list[str]], np.ndarray], subsets: list[StsSubset]) -> list[dict]:
    """Score rows (task, subset, split, metric, protocol, value, n) for cosine similarity of `encode`."""
    # STS reuses sentences heavily across pairs; embed each distinct one once.
    index: dict[str, int] = {}
    for s in subsets:
        for sentence in (*s.sent1, *s.sent2):
            index.setdefault(sentence, len(index))
    unique = list(index)
    emb = np.asarray(encode(unique), dtype=np.float64)
    if emb.ndim != 2 or emb.shape[0] != len(unique):
        raise ValueError(f"encode returned shape {emb.shape} for {len(unique)} sentences")
    emb = _unit_rows(emb)

    rows: list[dict] = []
    groups: dict[tuple[str, str], list[tuple[np.ndarray, np.ndarray]]] = {}
    for s in subsets:
        a = emb[[index[x] for x in s.sent1]]
        b = emb[[index[x] for x in s.sent2]]
        sims = np.einsum("ij,ij->i", a, b)
        rows += _rows(s.task, s.name, s.split, "subset", sims, s.gold, len(s.gold))
        groups.setdefault((s.task, s.split), []).append((sims, s.gold))

    for (task, split), parts in groups.items():
        n = sum(len(g) for _, g in parts)
        per_subset = [r for r in rows if r["task"] == task and r["split"] == split and r["protocol"] == "subset"]
        for metric in ("spearman", "pearson"):
            mean = float(np.mean([r["value"] for r in per_subset if r["metric"] == metric]))
            rows.append({"task": task, "subset": "all", "split": split, "metric": metric,
                         "protocol": "senteval", "value": mean, "n": n})
        sims = np.concatenate([p[0] for p in parts])
        gold = np.concatenate([p[1] for p in parts])
        rows += _rows(task, "all", split, "simcse", sims, gold, n)
    return rows
