"""TSDAE (Wang, Reimers & Gurevych, 2021): a sentence with `tsdae_deletion` (0.6, the paper's best noise) of its
words deleted is the anchor, and the sentence itself is the positive, the target its decoder rebuilds.

The noise is sentence-transformers' DenoisingAutoEncoderDataset's: the sentence split into words, each deleted
independently with that probability, one always kept, the rest joined back into text, which the model's tokenizer
then encodes. It splits and joins with NLTK's Treebank tokenizer and detokenizer; here sacremoses' Moses ones
(already the back-translation's), which split words from punctuation and contractions alike ("It", "'s", ",").
Deleting the model's byte-level pieces instead (before: VERSION 1) is another noise, finer than words. The
deletions are drawn here, per epoch from epoch_seed, not at train time: the pairs are then what `cpipe inspect`
shows, each epoch corrupts a sentence afresh, and a resumed or multi-worker run trains on the same corrupted
sentences with no random state of its own to checkpoint.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
from pydantic import Field

from pipeline.corpus.sentences import sentences
from pipeline.errors import InputError
from pipeline.objectives.base import Objective, PairsSettings
from pipeline.objectives.pairs import SentenceSettings, drawing_seed, write_epochs
from pipeline.objectives.prepare import alongside, moses_texts, spread
from pipeline.objectives.stored import stored
from pipeline.objectives.tsdae_decoder import decoder_class

if TYPE_CHECKING:
    from pipeline.train.config import TrainConfig

NAME = "tsdae"
INPUTS = {"documents": "decontaminate"}
VERSION = "2"  # 2: words deleted, not the tokenizer's pieces (in this objective's fingerprint only)
log = logging.getLogger("cpipe")


class TsdaeSettings(SentenceSettings):
    tsdae_deletion: float = Field(
        0.6,
        gt=0,
        lt=1,
        description="tsdae: the probability that each word of a "
        "sentence is deleted (one is always kept); 0.6, the TSDAE paper's best",
    )


def delete(words: list, ratio: float, rng: np.random.Generator) -> list:
    """`words` with each deleted with probability `ratio`, one (drawn at random) kept if none survived."""
    keep = rng.random(len(words)) >= ratio
    if len(words) and not keep.any():
        keep[rng.integers(len(words))] = True
    return [w for w, k in zip(words, keep) if k]


def pairs(stage: PairsSettings, settings: TsdaeSettings, inputs: dict, tok, out) -> None:
    drawn = sentences(
        inputs["documents"], out, settings.min_chars, settings.max_sentences, drawing_seed(stage), *spread(stage)
    )
    ratio = settings.tsdae_deletion
    with stored(drawn, tok, stage, words=True) as rows:
        if not len(rows):
            raise InputError(
                f"augment: no sentence of at least {settings.min_chars} characters in {inputs['documents']}"
            )

        def views(order, rng):
            def damage(chunk):
                return [delete(words, ratio, rng) for *_, words in chunk]

            chunks = rows.chunks(order, ["segment_id", "doc_id", "text", "ids", "words"])
            for chunk, _, (damaged, anchors) in alongside(chunks, damage, partial(moses_texts, tok, settings=stage)):
                for (segment_id, doc_id, text, ids, _), anchor, anchor_text in zip(chunk, anchors, damaged):
                    view = {
                        "anchor_ids": anchor,
                        "anchor_text": anchor_text,
                        "positive_ids": [ids],
                        "positive_text": [text],
                    }
                    yield segment_id, doc_id, view

        write_epochs(stage, out, NAME, stage.epochs, len(rows), views)
    log.info("augment: %d sentences x %d epochs, %.0f%% of words deleted", len(rows), stage.epochs, 100 * ratio)


def decoder(mlm_model, cfg: TrainConfig):
    """The decoder that rebuilds each sentence from its damaged copy's embedding (pipeline.objectives.tsdae_decoder)."""
    return decoder_class()(mlm_model, cfg.seed, cfg.tie_decoder)


def denoising_alone(run: TrainConfig) -> str | None:
    if run.mlm or not run.contrastive or run.momentum or run.memory_bank or run.grad_cache:
        return (
            "tsdae trains its denoising loss alone: set no mlm, momentum, memory_bank or grad_cache, and leave "
            "contrastive true (it switches the denoising loss)"
        )
    return None


OBJECTIVE = Objective(
    name=NAME,
    title="TSDAE (Wang et al., 2021): a sentence rebuilt by a decoder from the embedding of its corrupted copy",
    # TSDAE: [CLS] into a decoder that rebuilds the sentence, no contrastive loss and no MLM; the paper's (and
    # sentence-transformers' TSDAE example's) AdamW at lr 3e-5, batch 8, weight decay 0, constant schedule.
    defaults={
        "loss": "denoising",
        "projection": "none",
        "pooling": "cls",
        "mlm": False,
        "schedule": "constant",
        "lr": 3e-5,
        "batch_size": 8,
        "weight_decay": 0.0,
        "optimizer": "adamw",
        "adam_eps": 1e-8,
        "correct_bias": True,
    },
    inputs=INPUTS,
    pairs=pairs,
    settings=TsdaeSettings,
    version=VERSION,
    decoder=decoder,
    check=denoising_alone,
)
