"""corpus stage: read every source into documents (doc_id, source, title_or_url, text)."""

from __future__ import annotations

import logging

import pyarrow as pa
from tqdm import tqdm

from pipeline.download import fetch
from pipeline.openwebtext import OpenWebTextSource, is_openwebtext
from pipeline.sources import LocalSource, Source, SourceError
from pipeline.wikipedia import WikipediaDumpSource, WikipediaParquetSource, is_wikipedia_dump

NAME, VERSION = "corpus", "1"
SCHEMA = pa.schema([
    ("doc_id", pa.string()),
    ("source", pa.string()),
    ("title_or_url", pa.string()),
    ("text", pa.string()),
])
log = logging.getLogger("cpipe")


def _remote(spec: str) -> bool:
    return "://" in spec and not spec.startswith("file://")


def open_source(spec: str, download_dir: str = "downloads", subsets: list[int] | None = None) -> Source:
    """The source for a path or URL, chosen by its name; URLs are downloaded (resumably) first."""
    path = str(fetch(spec, download_dir)) if _remote(spec) else spec.removeprefix("file://")
    if is_openwebtext(spec):
        return OpenWebTextSource(path, subsets=subsets)
    if is_wikipedia_dump(spec):
        return WikipediaDumpSource(path)
    if "wikipedia" in spec and spec.endswith(".parquet"):  # the wikimedia/wikipedia Parquet files on the hub
        return WikipediaParquetSource(path)
    return LocalSource(path)


def stage_config(corpus: dict) -> dict:
    """The corpus config plus a snapshot of each source, so edited files invalidate the cache.

    A URL stands for its own content, so validating a config downloads nothing.
    """
    if not corpus["sources"]:
        raise SourceError("no corpus given: pass --corpus PATH or set corpus.sources")
    snapshots = [s if _remote(s) else open_source(s, subsets=corpus["subsets"]).snapshot() for s in corpus["sources"]]
    return {**{k: v for k, v in corpus.items() if k != "download_dir"}, "snapshots": snapshots,
            "runtime": {"download_dir": corpus["download_dir"]}}


def run(config: dict, inputs: dict, out) -> None:
    seen = 0
    for spec in config["sources"]:
        source = open_source(spec, config["runtime"]["download_dir"], config["subsets"])
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
