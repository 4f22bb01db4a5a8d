"""corpus stage: read every source into documents (doc_id, source, title_or_url, text).

Each source splits into parts (files, xz members, batches of wiki pages) that
`ordered_map` reads serially, on worker processes or on Ray, and hands back in
order, so every backend writes the same dataset.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from contextlib import closing
from itertools import islice
from typing import TYPE_CHECKING

import pyarrow as pa
from pydantic import Field

from pipeline.corpus.config import CorpusConfig
from pipeline.corpus.download import LOCAL_COPIES, fetch
from pipeline.corpus.openwebtext import OpenWebTextSource, is_openwebtext
from pipeline.corpus.sources import LocalSource, Source, SourceError, read_part
from pipeline.corpus.wikipedia import WikipediaDumpSource, WikipediaParquetSource, is_wikipedia_dump
from pipeline.corpus.wikitext import WikiTextParquetSource, is_wikitext_parquet
from pipeline.file_snapshot import rglob
from pipeline.parallel import Spread, ordered_map
from pipeline.progress import tracked
from pipeline.stage import AT_RUNTIME, Stage, stage_config

if TYPE_CHECKING:
    from pipeline.config import Config
    from storage import DatasetWriter

SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()),
        ("source", pa.string()),
        ("title_or_url", pa.string()),
        ("text", pa.string()),
    ]
)
log = logging.getLogger("cpipe")


def _remote(spec: str) -> bool:
    return "://" in spec and not spec.startswith("file://")


def open_source(spec: str, download_dir: str = "downloads", subsets: list[int] | None = None) -> Source:
    """The source for a path or URL, chosen by its name; URLs are downloaded (resumably) first."""
    path = str(fetch(spec, download_dir, hint=LOCAL_COPIES)) if _remote(spec) else spec.removeprefix("file://")
    if is_openwebtext(spec) or os.path.isdir(path) and next(rglob(path, "urlsf_subset*.tar"), None):
        return OpenWebTextSource(path, subsets=subsets)  # a tarball, or a directory holding the release
    if is_wikipedia_dump(spec):
        return WikipediaDumpSource(path)
    if "wikipedia" in spec and spec.endswith(".parquet"):  # the wikimedia/wikipedia Parquet files on the hub
        return WikipediaParquetSource(path)
    if is_wikitext_parquet(spec, path):  # Salesforce/wikitext on the hub: a line a row
        return WikiTextParquetSource(path)
    return LocalSource(path)


def _sources(cfg: Config) -> dict[str, Source | None]:
    """Each source opened (which checks it exists and holds documents), None for a URL."""
    if not cfg.corpus.sources:
        raise SourceError("no corpus given: pass --corpus PATH or set corpus.sources")
    return {s: None if _remote(s) else open_source(s, subsets=cfg.corpus.subsets) for s in cfg.corpus.sources}


def check(cfg: Config) -> None:
    """Before any work: every local source is readable. A URL stands for its own content, so this downloads
    nothing."""
    _sources(cfg)


class CorpusSettings(CorpusConfig, Spread):
    """The corpus stage's config: its section plus a snapshot of each source (a URL stands for itself), so edited
    files invalidate the cache; where the downloads go and how the work is spread (`parallel`) are runtime."""

    snapshots: list[str] = []
    download_dir: str = Field("downloads", json_schema_extra=AT_RUNTIME)


def config(cfg: Config, key: None = None) -> dict:
    snapshots = [spec if source is None else source.snapshot() for spec, source in _sources(cfg).items()]
    return stage_config(CorpusSettings(**cfg.corpus.model_dump(), **cfg.parallel.model_dump(), snapshots=snapshots))


def needs_ray(settings: CorpusSettings) -> bool:
    return settings.backend == "ray"


def run(settings: CorpusSettings, inputs: dict[str, str], out: DatasetWriter) -> None:
    opened = []

    def documents():
        for spec in settings.sources:
            # Opened one at a time, so a URL is not downloaded when max_docs was reached before it.
            source = open_source(spec, settings.download_dir, settings.subsets)
            opened.append(source)
            if not _remote(spec):
                out.built_from(
                    spec.removeprefix("file://"), *(map(str, source.files()) if isinstance(source, LocalSource) else ())
                )
            reads = ordered_map(read_part, source.parts(), settings.backend, settings.workers)
            for read in tracked(reads, f"corpus {spec}", "parts"):
                for doc in source.take(read):
                    if doc.text.strip():
                        yield doc
                    else:
                        out.count("empty")

    seen = 0
    with closing(documents()) as docs:  # closing stops the workers when max_docs cuts reading short
        for doc in islice(docs, settings.max_docs or None):
            out.write([doc.__dict__])
            seen += 1
    for source in opened:
        for reason, n in source.counts.items():
            out.count(reason, n)
        out.extra.setdefault("skipped", []).extend(source.skipped)
    if seen == 0:
        counts = sum((Counter(source.counts) for source in opened), Counter())
        skipped = [what for source in opened for what in source.skipped]
        why = (
            f": {len(skipped)} skipped ({', '.join(f'{n} {r}' for r, n in sorted(counts.items()))}; "
            f"first: {skipped[0]})"
            if skipped
            else ""
        )
        raise SourceError(f"no documents with text in {', '.join(settings.sources)}{why}")
    out.count("documents", seen)
    log.info("corpus: %d documents from %d source(s)", seen, len(opened))


# 2: a WikiText Parquet file (one line a row) reads as its articles, not one document per row.
STAGE = Stage(
    name="corpus",
    version="2",
    flow="data",
    section="corpus",
    config=config,
    run=run,
    settings=CorpusSettings,
    schema=SCHEMA,
    check=check,
    needs_ray=needs_ray,
)
