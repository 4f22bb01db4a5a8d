"""Supervised SimCSE (Gao et al., 2021, section 4): NLI triplets. A premise is the anchor, a hypothesis it
entails the positive, and a hypothesis it contradicts the hard negative.

The triplets come from SNLI / MultiNLI JSONL or SICK files (augment.simcse_sup.nli), else from SICK's train
split under evaluate.data. Rows are grouped by premise (its exact text): each entailment of a premise makes
one triplet, with the premise's contradictions taken in turn as negatives (the k-th entailment with the
(k mod C)-th of its C contradictions); a premise lacking an entailment or a contradiction makes none, and is
counted. Neutral pairs are not used, as SimCSE uses none.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field, field_validator

from pipeline.config_base import Strict, absolute
from pipeline.errors import InputError
from pipeline.file_snapshot import snapshot
from pipeline.objectives.base import Objective, PairsSettings, Settings
from pipeline.objectives.pairs import write_epochs
from pipeline.objectives.prepare import encode_all
from pipeline.readers.nli import LABELS, read_nli, refuse_scored_copy, scored_pairs
from pipeline.readers.sts import SCORED_SPLITS, SICK_FILES, find_file

if TYPE_CHECKING:
    from pipeline.config import Config
    from pipeline.train.config import TrainConfig

NAME = "simcse-sup"
INPUTS: dict[str, str] = {}
log = logging.getLogger("cpipe")


class SimcseSupConfig(Strict):
    """Supervised SimCSE's triplets (premise, entailment, contradiction) and their epochs (`augment.simcse_sup`)."""

    nli: list[str] = Field(
        default_factory=list,
        description=(
            "SNLI / MultiNLI .jsonl or SICK .txt train files (as evaluate.baselines.infersent.nli; dev, trial and "
            "test files are refused); [] = SICK_train.txt under evaluate.data"
        ),
    )
    epochs: int = Field(3, ge=1, description="in place of augment.epochs: SimCSE's run_sup_example.sh trains 3")

    @field_validator("nli")
    @classmethod
    def _absolute_nli(cls, v: list[str]) -> list[str]:
        return [absolute(p) for p in v]


class SimcseSupSettings(Settings):
    simcse_sup: SimcseSupConfig = Field(default_factory=SimcseSupConfig)


def files(cfg: Config) -> dict:
    """The NLI files the triplets are read from, with their snapshot (an edited file rebuilds the pairs):
    augment.simcse_sup.nli, else SICK_train.txt under evaluate.data. None may copy a test or dev split the
    evaluation scores, whatever its name (pipeline.readers.nli.refuse_scored_copy)."""
    paths = cfg.augment.simcse_sup.nli
    if not paths:
        data = cfg.evaluate.data  # a directory, or pair files that hold no SICK
        found = find_file(Path(data), SICK_FILES["train"]) if isinstance(data, str) and os.path.isdir(data) else None
        if found is None:
            raise InputError(
                "augment: simcse-sup needs NLI triplets: set augment.simcse_sup.nli to SNLI / MultiNLI "
                f".jsonl files, or put {SICK_FILES['train']} under evaluate.data"
            )
        paths = [str(found)]
    scored = scored_pairs(cfg.evaluate.data)
    for path in paths:
        if not os.path.isfile(path):
            raise InputError(f"augment.simcse_sup.nli: no such file: {path}")
        refuse_scored_copy(path, scored, SCORED_SPLITS, "augment.simcse_sup.nli:")
    return {"nli": paths, "snapshot": {path: snapshot(path) for path in paths}}


def given_files(cfg: Config) -> dict[str, list[str]]:
    return {"augment.simcse_sup.nli": cfg.augment.simcse_sup.nli}


def triplets(premises: list[str], hypotheses: list[str], labels: list[int]) -> tuple[list[tuple[str, str, str]], dict]:
    """(premise, entailment, contradiction) triplets in the premises' first-seen order, and the counts of
    premises left out for lacking an entailment or a contradiction."""

    entailment, contradiction = LABELS.index("entailment"), LABELS.index("contradiction")
    groups: dict[str, tuple[list[str], list[str]]] = {}
    for premise, hypothesis, label in zip(premises, hypotheses, labels):
        entailed, contradicted = groups.setdefault(premise, ([], []))
        if label == entailment:
            entailed.append(hypothesis)
        elif label == contradiction:
            contradicted.append(hypothesis)
    out, dropped = [], {"premise_without_entailment": 0, "premise_without_contradiction": 0}
    for premise, (entailed, contradicted) in groups.items():
        if not entailed:
            dropped["premise_without_entailment"] += 1
        elif not contradicted:
            dropped["premise_without_contradiction"] += 1
        else:
            out += [(premise, e, contradicted[k % len(contradicted)]) for k, e in enumerate(entailed)]
    return out, dropped


def pairs(stage: PairsSettings, settings: SimcseSupSettings, inputs: dict, tok, out) -> None:
    read = [read_nli(path) for path in stage.files["nli"]]
    rows, dropped = triplets(*(sum((getattr(r, f) for r in read), []) for f in ("premise", "hypothesis", "labels")))
    for reason, n in {**dropped, "no_gold_label": sum(r.dropped for r in read)}.items():
        if n:
            out.count(reason, n)
    if not rows:
        raise InputError(
            f"augment: no premise with both an entailment and a contradiction in {', '.join(stage.files['nli'])}"
        )
    texts = sorted({t for row in rows for t in row})
    ids = dict(zip(texts, encode_all(tok, texts, stage)))
    epochs = settings.simcse_sup.epochs

    def views(order, rng):
        for k in order:
            premise, entailed, contradicted = rows[k]
            yield (
                str(k),
                f"triplet-{k}",
                {
                    "anchor_ids": ids[premise],
                    "anchor_text": premise,
                    "positive_ids": [ids[entailed]],
                    "positive_text": [entailed],
                    "negative_ids": ids[contradicted],
                    "negative_text": contradicted,
                },
            )

    write_epochs(stage, out, NAME, epochs, len(rows), views)
    out.extra["triplets"] = len(rows)
    log.info("augment: %d NLI triplets x %d epochs", len(rows), epochs)


def hard_negatives_scored(run: TrainConfig) -> str | None:
    if run.contrastive and run.loss != "info-nce":
        return f"simcse-sup's hard negatives are scored by info-nce (SimCSE's cl_forward); loss {run.loss!r} takes none"
    return None


OBJECTIVE = Objective(
    name=NAME,
    title="supervised SimCSE (Gao et al., 2021): an NLI premise, a hypothesis it entails, and one it "
    "contradicts as the hard negative",
    # Supervised SimCSE (run_sup_example.sh, pooler_type cls): as unsupervised, but its `cls` pooler keeps the
    # MLP at evaluation, so the head is exported; lr 5e-5, batch 512 (on a small machine through grad_cache:
    # configs/simcse-sup.yaml), max_seq_length 32, the HF Trainer's AdamW with weight decay 0.
    defaults={
        "loss": "info-nce",
        "projection": "tanh",
        "pooling": "cls",
        "mlm": False,
        "temperature": 0.05,
        "schedule": "linear",
        "keep_head": True,
        "lr": 5e-5,
        "batch_size": 512,
        "max_length": 32,
        "weight_decay": 0.0,
        "optimizer": "adamw",
        "adam_eps": 1e-8,
        "correct_bias": True,
    },
    inputs=INPUTS,
    pairs=pairs,
    settings=SimcseSupSettings,
    files=files,
    reads=given_files,
    hard_negatives=True,
    check=hard_negatives_scored,
)
