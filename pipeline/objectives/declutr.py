"""DeCLUTR (Giorgi et al., 2021): anchor spans and nearby positive spans from the same long document, an
NT-Xent loss between each anchor and its positives' mean, plus MLM on the anchors.

Each epoch draws fresh spans, as DeCLUTR resamples every epoch. Documents shorter than the sampler
needs (pipeline.objectives.spans.min_document_tokens) are dropped and counted (`too_short`). With
`collapse_whitespace`, runs of whitespace become one space before tokenising, as the reference does,
so newlines and indentation do not take up span tokens. Documents are
shuffled per epoch but a document's anchors stay adjacent, so a batch of N * A
rows holds N whole documents, as in the paper.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np
from pydantic import Field, model_validator

from pipeline.corpus.sentences import record_drawn
from pipeline.objectives.base import Objective, PairsSettings, Settings
from pipeline.objectives.pairs import epoch_seed, pair
from pipeline.objectives.prepare import document_tokens
from pipeline.objectives.spans import TooShort, min_document_tokens, sample_spans
from pipeline.progress import tracked

if TYPE_CHECKING:
    from pipeline.config import Config
    from pipeline.train.config import TrainConfig

NAME = "declutr"
INPUTS = {"documents": "decontaminate"}
log = logging.getLogger("cpipe")


class DeclutrSettings(Settings):
    """DeCLUTR's spans (pipeline.objectives.spans)."""

    num_anchors: int = Field(2, ge=1)
    num_positives: int = Field(2, ge=1)
    min_length: int = Field(32, ge=1)
    max_length: int = Field(512, ge=2, description="l_max: also the least gap between two anchors of a document")
    collapse_whitespace: bool = Field(
        True,
        description="declutr: runs of whitespace (newlines included) become "
        "one space before tokenising, as DeCLUTR's reference does",
    )

    @model_validator(mode="after")
    def _lengths(self) -> DeclutrSettings:
        if self.min_length >= self.max_length:
            raise ValueError(f"min_length ({self.min_length}) must be below max_length ({self.max_length})")
        return self


def pairs(stage: PairsSettings, settings: DeclutrSettings, inputs: dict, tok, out) -> None:
    doc_ids, token_ids = document_tokens(inputs["documents"], tok, settings.collapse_whitespace, stage)
    needed = min_document_tokens(settings.num_anchors, settings.max_length)
    eligible = [d for d, ids in enumerate(token_ids) if len(ids) >= needed]
    out.count("too_short", len(doc_ids) - len(eligible))
    if not eligible:
        longest = max((len(ids) for ids in token_ids), default=0)
        raise TooShort(
            f"no document is long enough for {settings.num_anchors} anchors of up to "
            f"{settings.max_length} tokens, {settings.max_length} apart: needs {needed} tokens, "
            f"the longest of "
            f"{len(doc_ids)} has {longest}"
        )
    for epoch in tracked(range(stage.epochs), "augment declutr", "epochs"):
        seed = epoch_seed(stage.seed, epoch)
        rng = np.random.default_rng(seed)
        for d in rng.permutation(eligible):
            ids = token_ids[d]
            spans = sample_spans(
                len(ids),
                settings.num_anchors,
                settings.num_positives,
                settings.min_length,
                settings.max_length,
                rng,
            )
            for a, (anchor, positives) in enumerate(spans):
                anchor_ids = ids[anchor.start : anchor.end].tolist()
                positive_ids = [ids[p.start : p.end].tolist() for p in positives]
                texts = tok.batch_decode([anchor_ids, *positive_ids])
                out.write(
                    [
                        pair(
                            f"{epoch}-{doc_ids[d]}-{a}",
                            doc_ids[d],
                            NAME,
                            epoch,
                            seed,
                            anchor_ids,
                            texts[0],
                            positive_ids,
                            texts[1:],
                            anchor.start,
                            [p.start for p in positives],
                        )
                    ]
                )
    record_drawn(out, {doc_ids[d] for d in eligible})
    log.info(
        "augment: %d documents x %d epochs; %d too short", len(eligible), stage.epochs, len(doc_ids) - len(eligible)
    )


def whole_documents(cfg: Config, run: TrainConfig) -> str | None:
    """A batch holds whole documents, each with its num_anchors anchors (their rows are adjacent)."""
    if run.batch_size % cfg.augment.num_anchors:
        return (
            f"train.batch_size ({run.batch_size}) must be a multiple of augment.num_anchors "
            f"({cfg.augment.num_anchors}) so batches hold whole documents"
        )
    return None


OBJECTIVE = Objective(
    name=NAME,
    title="DeCLUTR (Giorgi et al., 2021): an anchor span and positive spans sampled from the same document",
    # DeCLUTR's declutr_small.jsonnet: HF AdamW (eps 1e-6, correct_bias false), lr 5e-5, weight decay 0.1,
    # AllenNLP's slanted triangular schedule (ULMFiT's), spans up to 512 tokens.
    defaults={
        "loss": "nt-xent",
        "projection": "none",
        "pooling": "mean",
        "mlm": True,
        "temperature": 0.05,
        "schedule": "slanted-triangular",
        "lr": 5e-5,
        "batch_size": 16,
        "max_length": 512,
        "weight_decay": 0.1,
        "optimizer": "adamw",
        "adam_eps": 1e-6,
        "correct_bias": False,
    },
    inputs=INPUTS,
    pairs=pairs,
    settings=DeclutrSettings,
    check_config=whole_documents,
)
