"""What every objective's pair builder shares: the row it writes, and each epoch's seed. The sentences they read
from documents are pipeline.corpus.sentences'."""

from __future__ import annotations


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


def epoch_seed(config: dict, epoch: int) -> int:
    """Each epoch draws afresh, reproducibly."""
    return config["seed"] * 1_000_003 + epoch
