"""Unsupervised SimCSE (Gao et al., 2021): a sentence is its own positive; the two forward passes'
independent dropout masks are the only augmentation, so nothing is materialised but the sentence twice. The loss
is cl_forward's InfoNCE (one direction, N-1 negatives) over a Linear+Tanh head on [CLS], used in training only."""

from __future__ import annotations

import logging

from pipeline.corpus.sentences import sentences
from pipeline.errors import InputError
from pipeline.objectives.base import Objective, PairsSettings
from pipeline.objectives.pairs import SentenceSettings, drawing_seed, write_epochs
from pipeline.objectives.prepare import spread
from pipeline.objectives.stored import stored

NAME = "simcse"
INPUTS = {"documents": "decontaminate"}
log = logging.getLogger("cpipe")


def pairs(stage: PairsSettings, settings: SentenceSettings, inputs: dict, tok, out) -> None:
    drawn = sentences(
        inputs["documents"], out, settings.min_chars, settings.max_sentences, drawing_seed(stage), *spread(stage)
    )
    with stored(drawn, tok, stage) as rows:
        if not len(rows):
            raise InputError(
                f"augment: no sentence of at least {settings.min_chars} characters in {inputs['documents']}"
            )

        def views(order, rng):
            for segment_id, doc_id, text, ids in rows.read(order, ["segment_id", "doc_id", "text", "ids"]):
                yield (
                    segment_id,
                    doc_id,
                    {"anchor_ids": ids, "anchor_text": text, "positive_ids": [ids], "positive_text": [text]},
                )

        write_epochs(stage, out, NAME, stage.epochs, len(rows), views)
    log.info("augment: %d sentences x %d epochs", len(rows), stage.epochs)


OBJECTIVE = Objective(
    name=NAME,
    title="unsupervised SimCSE (Gao et al., 2021): a sentence and itself, two dropout masks apart",
    # SimCSE's cl_forward, its MLPLayer (Linear + Tanh) over [CLS], trained with mlp_only_train; its
    # run_unsup_example.sh (lr 3e-5, batch 64, max_seq_length 32) under the HF Trainer's defaults, which its
    # train.py keeps: torch AdamW (eps 1e-8), weight decay 0, linear decay to 0, no warmup.
    defaults={
        "loss": "info-nce",
        "projection": "tanh",
        "pooling": "cls",
        "mlm": False,
        "temperature": 0.05,
        "schedule": "linear",
        "lr": 3e-5,
        "batch_size": 64,
        "max_length": 32,
        "weight_decay": 0.0,
        "optimizer": "adamw",
        "adam_eps": 1e-8,
        "correct_bias": True,
    },
    inputs=INPUTS,
    pairs=pairs,
    settings=SentenceSettings,
)
