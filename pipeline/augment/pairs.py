"""What every objective's pair builder shares: the row it writes, and sentences read from documents."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

from pipeline.augment.segment import document_sentences
from storage import iter_batches

SPREAD = "spread"  # config["sampling"]: a sentence cap draws over the whole corpus, not its first documents


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


def sentences(documents: str, config: dict, out) -> Iterator[dict]:
    """A documents dataset's sentences (doc_id, segment_id, start, end, text), per `config`'s min_chars and
    max_sentences, drawn over the whole corpus from its seed with `sampling: spread` (so every sentence objective
    of one seed draws the same ones); short and over-cap ones are counted, and the manifest says how many
    sentences of how many documents were drawn (`drawn`). The back-translation stage reads them so too."""
    docs = (
        (d, t)
        for batch in iter_batches(documents, columns=["doc_id", "text"])
        for d, t in zip(batch.column("doc_id").to_pylist(), batch.column("text").to_pylist())
    )
    seed = config["seed"] if config.get("sampling") == SPREAD else None
    drawn: set[str] = set()
    n = 0
    for row in document_sentences(docs, config["min_chars"], config["max_sentences"], out.count, seed):
        drawn.add(row["doc_id"])
        n += 1
        yield row
    record_drawn(out, drawn, sentences=n)


def record_drawn(out, doc_ids: set[str], **counts: int) -> None:
    """The documents a dataset's pairs come from, in its manifest: how many, and a digest of which, so that the
    leaderboard can tell rows trained on different documents."""
    digest = hashlib.sha256("\n".join(sorted(doc_ids)).encode()).hexdigest()[:16]
    out.extra["drawn"] = {"documents": len(doc_ids), **counts, "documents_digest": digest}


def epoch_seed(config: dict, epoch: int) -> int:
    """Each epoch draws afresh, reproducibly."""
    return config["seed"] * 1_000_003 + epoch
