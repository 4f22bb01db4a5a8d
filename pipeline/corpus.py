"""corpus stage: read every source into documents (doc_id, source, title_or_url, text)."""

from __future__ import annotations

import logging

import pyarrow as pa
from tqdm import tqdm

from pipeline.sources import SourceError, open_source

NAME, VERSION = "corpus", "1"
SCHEMA = pa.schema([
    ("doc_id", pa.string()),
    ("source", pa.string()),
    ("title_or_url", pa.string()),
    ("text", pa.string()),
])
log = logging.getLogger("cpipe")


def stage_config(sources: list[str], max_docs: int | None) -> dict:
    """The corpus config plus a snapshot of the sources, so edited files invalidate the cache."""
    if not sources:
        raise SourceError("no corpus given: pass --corpus PATH or set corpus.sources")
    return {"sources": list(sources), "max_docs": max_docs,
            "snapshots": [open_source(s).snapshot() for s in sources]}


def run(config: dict, inputs: dict, out) -> None:
    seen = 0
    for spec in config["sources"]:
        source = open_source(spec)
        for doc in tqdm(source.documents(), desc=f"corpus {spec}", unit="doc", mininterval=2):
            if not doc.text.strip():
                out.count("empty")
                continue
            out.write([doc.__dict__])
            seen += 1
            if config["max_docs"] and seen >= config["max_docs"]:
                break
        for reason, n in source.counts.items():
            out.count(reason, n)
        out.extra.setdefault("skipped", []).extend(source.skipped)
        if config["max_docs"] and seen >= config["max_docs"]:
            break
    if seen == 0:
        raise SourceError(f"no documents with text in {', '.join(config['sources'])}")
    out.count("documents", seen)
    log.info("corpus: %d documents from %d source(s)", seen, len(config["sources"]))
