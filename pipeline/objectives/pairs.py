"""What every objective's pair builder shares: the row it writes, each epoch's seed, and the loop over epochs
that writes one pair per sentence (`write_epochs`); the sentence objectives' settings (`SentenceSettings`). The
sentences they read from documents are pipeline.corpus.sentences'."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from pydantic import Field

from pipeline.corpus.segment import MIN_SENTENCE_CHARS
from pipeline.corpus.sentences import SPREAD
from pipeline.objectives.base import PairsSettings, Settings
from pipeline.progress import tracked


class SentenceSettings(Settings):
    """The sentence objectives' settings (simcse, clear, tsdae): which sentences of the documents they pair, as
    pipeline.corpus.sentences draws them; each sentence objective's settings are these or extend them."""

    min_chars: int = Field(
        MIN_SENTENCE_CHARS,
        ge=1,
        description="sentence objectives (simcse, clear, tsdae): shorter sentences are left out",
    )
    max_sentences: int | None = Field(
        None,
        ge=1,
        description="sentence objectives: cap on sentences per epoch, drawn "
        "uniformly over the whole corpus from augment.seed (the same for each)",
    )


def pair(
    pair_id: str,
    doc_id: str,
    objective: str,
    epoch: int,
    seed: int,
    anchor_ids: list[int],
    anchor_text: str,
    positive_ids: list[list[int]],
    positive_text: list[str],
    anchor_start: int | None = None,
    positive_starts: list[int] | None = None,
    original_ids: list[int] | None = None,
    original_text: str | None = None,
    sources: list[str] | None = None,
    negative_ids: list[int] | None = None,
    negative_text: str | None = None,
) -> dict:
    """One row of the augment stage's schema. `original_*`: the sentence CLEAR's views were made from
    (its MLM input); `sources`: what made the anchor and each positive (CERT: their pivot languages);
    `negative_*`: the anchor's hard negative (supervised SimCSE: a contradiction of the premise)."""
    return {
        "pair_id": pair_id,
        "doc_id": doc_id,
        "objective": objective,
        "epoch": epoch,
        "anchor_start": anchor_start,
        "anchor_ids": anchor_ids,
        "anchor_text": anchor_text,
        "positive_starts": positive_starts,
        "positive_ids": positive_ids,
        "positive_text": positive_text,
        "original_ids": original_ids,
        "original_text": original_text,
        "sources": sources,
        "negative_ids": negative_ids,
        "negative_text": negative_text,
        "seed": seed,
    }


def drawing_seed(stage: PairsSettings) -> int | None:
    """The seed a sentence cap draws from over the whole corpus (`sampling: spread`), None where it takes the
    first sentences (pipeline.corpus.sentences)."""
    return stage.seed if stage.sampling == SPREAD else None


def epoch_seed(seed: int, epoch: int) -> int:
    """Each epoch draws afresh from the stage's seed, reproducibly."""
    return seed * 1_000_003 + epoch


def write_epochs(
    stage: PairsSettings,
    out,
    objective: str,
    epochs: int,
    items: int,
    views: Callable[[np.ndarray, np.random.Generator], Iterable[tuple[str, str, dict[str, Any]]]],
    label: str | None = None,
) -> None:
    """`epochs` epochs of one pair per item, in an order each epoch draws afresh from its seed. `views(order,
    rng)` yields, in that order, each item's id, its document's id and its pair's other columns (`pair`'s
    keywords: anchor, positives, ...), drawing what it draws from the same generator after the order; it is read
    as the pairs are written, so the items need not all be in memory. An item's pair is `{epoch}-{its id}`.
    `label` names the progress bar (default: the objective)."""
    for epoch in tracked(range(epochs), f"augment {label or objective}", "epochs"):
        seed = epoch_seed(stage.seed, epoch)
        rng = np.random.default_rng(seed)
        for item, doc_id, view in views(rng.permutation(items), rng):
            out.write([pair(f"{epoch}-{item}", doc_id, objective, epoch, seed, **view)])
