"""NLI files, read: SNLI / MultiNLI JSONL (`sentence1`, `sentence2`, `gold_label`; rows labelled "-", no
annotator majority, are dropped), or SICK's tab-separated files with their entailment labels; which files train and
which select (InferSent's), and the refusal of a file that copies a split the evaluation scores."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import InputError
from pipeline.jsonlines import json_objects
from pipeline.readers.sts import (
    SCORED_SPLITS,
    SICK_FILES,
    StsSubset,
    find_file,
    same_pair,
    scored_splits,
    sick_rows,
)

LABELS = ("entailment", "neutral", "contradiction")
# How much an NLI file and a scored split may share (as a share of the smaller) before the file counts as a copy of
# the split: SICK's train split shares 93 of its 4,500 pairs (2.1%) with SICK's test split and 10 (2.0%) with its
# trial split; a copied split shares all of them.
SHARED_LIMIT = 0.1


class NliDataError(InputError):
    """An NLI file is malformed; the message names the file and line."""


@dataclass(frozen=True)
class NliPairs:
    premise: list[str]
    hypothesis: list[str]
    labels: list[int]
    dropped: int = 0  # rows without a gold label ("-")

    def __add__(self, other: NliPairs) -> NliPairs:
        return NliPairs(
            self.premise + other.premise,
            self.hypothesis + other.hypothesis,
            self.labels + other.labels,
            self.dropped + other.dropped,
        )


def _label(value, path, lineno: int) -> int:
    label = str(value).lower()
    if label not in LABELS:
        raise NliDataError(f"{path}:{lineno}: label {value!r} is not one of {', '.join(LABELS)} (or '-')")
    return LABELS.index(label)


def read_jsonl(path: str | Path) -> NliPairs:
    """SNLI / MultiNLI as distributed: one JSON object per line."""
    premise, hypothesis, labels, dropped = [], [], [], 0
    with open(path, encoding="utf-8") as f:
        for lineno, row in json_objects(f, path, NliDataError):
            if not all(isinstance(row.get(k), str) for k in ("sentence1", "sentence2", "gold_label")):
                raise NliDataError(f"{path}:{lineno}: expected string fields sentence1, sentence2 and gold_label")
            if row["gold_label"] == "-":
                dropped += 1
                continue
            labels.append(_label(row["gold_label"], path, lineno))
            premise.append(row["sentence1"])
            hypothesis.append(row["sentence2"])
    return NliPairs(premise, hypothesis, labels, dropped)


def read_sick(path: str | Path) -> NliPairs:
    """SICK as distributed for SemEval 2014: sentence_A, sentence_B and entailment_judgment."""
    rows = sick_rows(Path(path))
    return NliPairs([f[1] for _, f in rows], [f[2] for _, f in rows], [_label(f[4], path, n) for n, f in rows])


def read_nli(path: str | Path) -> NliPairs:
    return read_jsonl(path) if str(path).endswith(".jsonl") else read_sick(path)


def nli_files(paths: list[str], eval_data: str | None) -> dict[str, list[str]] | None:
    """{"train": files, "dev": files}: the given files split by name (SNLI / MultiNLI name dev files *_dev*,
    SICK its dev file *trial*), or SICK's train and trial files under eval_data; None when there are none.
    A file that copies a split the evaluation scores is refused by its content (refuse_scored_copy)."""
    if not paths:
        found = {
            split: find_file(Path(eval_data), SICK_FILES[split]) if eval_data else None for split in ("train", "dev")
        }
        if None in found.values():
            return None
        files = {split: [str(p)] for split, p in found.items()}
    else:
        files = {"train": [], "dev": []}
        for path in paths:
            name = os.path.basename(path).lower()
            if not os.path.isfile(path):
                raise InputError(f"NLI file not found: {path}")
            files["dev" if "dev" in name or "trial" in name else "train"].append(path)
        for split, found_files in files.items():
            if not found_files:
                raise InputError(
                    f"NLI files {', '.join(paths)}: no {split} file (dev files have 'dev' or 'trial' in their names)"
                )
    scored = scored_pairs(eval_data)
    for split, found_files in files.items():
        for path in found_files:
            # Selecting on a scored dev split is what it is for; training on it is not.
            refuse_scored_copy(
                path, scored, SCORED_SPLITS if split == "train" else ("test",), f"InferSent's {split} file"
            )
    return files


def scored_pairs(eval_data) -> list[tuple[StsSubset, set[frozenset[str]]]]:
    """Each STS subset the evaluation scores (test and dev splits), with its pairs as refuse_scored_copy matches
    them."""
    return [(s, {same_pair(a, b) for a, b in zip(s.sent1, s.sent2)}) for s in scored_splits(eval_data, SCORED_SPLITS)]


def refuse_scored_copy(path: str, scored: list[tuple[StsSubset, set]], splits: tuple[str, ...], what: str) -> None:
    """An NLI file is named as its author pleases (SICK's test split renamed my_nli_train.txt, a train file called
    protest_train.txt), so it is compared by content with the `scored` subsets of `splits` (scored_pairs: SICK's
    among them). The share is of the smaller of the two, so that a large file holding a whole test split (SNLI with
    SICK's test appended) is refused as a small file cut from one is."""
    scored = [(subset, held) for subset, held in scored if subset.split in splits]
    if not scored:
        return
    nli = read_nli(path)
    pairs = {same_pair(a, b) for a, b in zip(nli.premise, nli.hypothesis)}
    for subset, held in scored:
        both, smaller = len(pairs & held), min(len(pairs), len(held))
        if smaller and both / smaller > SHARED_LIMIT:
            raise NliDataError(
                f"{what} {path}: {both} of its {len(pairs)} pairs ({both / smaller:.0%} of the smaller, above "
                f"{SHARED_LIMIT:.0%}) are in the {subset.split} split {subset.task} {subset.name} the evaluation "
                "scores; a scored split is never trained or selected on"
            )
