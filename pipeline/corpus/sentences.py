"""A documents dataset's sentences as every sentence objective, the back-translation stage and the evaluate
stage's post-processing read them, and the record of which documents they were drawn from."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

from pipeline.corpus.segment import document_sentences
from storage import iter_batches

SPREAD = "spread"  # config["sampling"]: a sentence cap draws over the whole corpus, not its first documents


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
