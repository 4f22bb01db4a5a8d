"""A documents dataset's sentences as every sentence objective, the back-translation stage and the evaluate
stage's post-processing read them, and the record of which documents they were drawn from. The documents are split
into sentences a unit at a time (`document_units`) serially, on worker processes or on Ray; what is drawn at
random is drawn here, in corpus order, so every backend gives the same sentences."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from functools import partial

from pipeline.corpus.segment import drawn, unit_sentences
from pipeline.parallel import Backend, ordered_map
from storage import iter_batches

SPREAD = "spread"  # a config's `sampling` where a sentence cap draws over the whole corpus, not its first documents
# A unit of work: enough text that a worker's fixed costs stay small, small enough that a few hundred long
# documents still make units for every worker.
UNIT_CHARS, UNIT_DOCS = 1 << 20, 256


def document_units(documents: str) -> Iterator[list[tuple[str, str]]]:
    """A documents dataset's (doc_id, text) in order, in units of UNIT_CHARS characters or UNIT_DOCS documents."""
    unit, chars = [], 0
    for batch in iter_batches(documents, columns=["doc_id", "text"], batch_size=UNIT_DOCS):
        for doc in zip(batch.column("doc_id").to_pylist(), batch.column("text").to_pylist()):
            unit.append(doc)
            chars += len(doc[1])
            if chars >= UNIT_CHARS or len(unit) >= UNIT_DOCS:
                yield unit
                unit, chars = [], 0
    if unit:
        yield unit


def sentences(
    documents: str,
    out,
    min_chars: int,
    max_sentences: int | None,
    seed: int | None = None,
    backend: Backend = "serial",
    workers: int = 1,
) -> Iterator[dict]:
    """A documents dataset's sentences (doc_id, segment_id, start, end, text) of at least `min_chars` characters: all,
    or `max_sentences` of them, the first or, with a `seed` (a config's `sampling: spread`), drawn over the whole
    corpus from it (so every sentence objective of one seed draws the same ones); short and over-cap ones are
    counted, and the manifest says how many sentences of how many documents were drawn (`drawn`). The
    back-translation stage reads them so too. The documents are split into sentences on `backend`."""
    units = ordered_map(partial(unit_sentences, min_chars), document_units(documents), backend, workers)
    docs: set[str] = set()
    n = 0
    for row in drawn(_counted(units, out.count), max_sentences, out.count, seed):
        docs.add(row["doc_id"])
        n += 1
        yield row
    record_drawn(out, docs, sentences=n)


def _counted(units: Iterable[tuple[list[dict], int]], count) -> Iterator[dict]:
    """The units' sentences in order, their short ones counted."""
    for rows, short in units:
        if short:
            count("short_sentence", short)
        yield from rows


def record_drawn(out, doc_ids: set[str], **counts: int) -> None:
    """The documents a dataset's pairs come from, in its manifest: how many, and a digest of which, so that the
    leaderboard can tell rows trained on different documents."""
    digest = hashlib.sha256("\n".join(sorted(doc_ids)).encode()).hexdigest()[:16]
    out.extra["drawn"] = {"documents": len(doc_ids), **counts, "documents_digest": digest}
