"""Where documents come from. A Source splits itself into parts, and a part reads into Documents.

A part is a small, picklable unit of work (a file, an xz member of an
OpenWebText tarball, a batch of Wikipedia pages) whose reading needs nothing
from the Source, so the corpus stage can read parts on worker processes or Ray
nodes and merge them in order; `documents()` is the same code run serially.

This module holds the contract and local files; OpenWebText and Wikipedia live
beside it, and `pipeline.corpus.stage.open_source` picks one by the path or URL's name.
"""

from __future__ import annotations

import hashlib
import logging
import re
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from pipeline.errors import InputError
from pipeline.file_snapshot import listing_digest, rglob
from pipeline.jsonlines import json_objects
from pipeline.parquet_files import reading_parquet

log = logging.getLogger("cpipe")

SUFFIXES = (".txt", ".jsonl", ".parquet", ".raw")
# WikiText marks an article with a level-1 heading " = Title = " on its own line;
# deeper headings (" = = Section = = ") stay inside the article.
_WIKITEXT_TITLE = re.compile(r"^ = ([^=].*?) = $")


class SourceError(InputError):
    """Bad corpus input, phrased for the user."""


@dataclass(frozen=True)
class Document:
    doc_id: str
    source: str
    title_or_url: str
    text: str


def doc_id(key: str) -> str:
    """Stable across runs and machines: derived from where the document sits, not from when it was read."""
    return hashlib.sha1(key.encode()).hexdigest()[:16]


@dataclass
class Read:
    """What reading one part gave: its documents, and what it dropped (counted) or skipped (named)."""

    documents: list[Document] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    skipped: list[str] = field(default_factory=list)

    def skip(self, what: str, reason: str, count: str) -> None:
        self.counts[count] += 1
        self.skipped.append(f"{what}: {reason}")


class Part(ABC):
    """One independent unit of a source; pickled to whichever process or node reads it."""

    @abstractmethod
    def read(self) -> Read: ...


def read_part(part: Part) -> Read:
    # A module-level function, so process pools and Ray can ship it.
    return part.read()


class Source(ABC):
    """Splits into parts; tallies what it skipped and why in `counts`, naming skipped items in `skipped`."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.skipped: list[str] = []

    @abstractmethod
    def snapshot(self) -> str:
        """A short string that changes whenever the source's content may have changed."""

    @abstractmethod
    def parts(self) -> Iterator[Part]:
        """The source's parts in corpus order."""

    def documents(self) -> Iterator[Document]:
        for part in self.parts():
            yield from self.take(part.read())

    def take(self, read: Read) -> list[Document]:
        """Fold a part's counts into the source's and log what it skipped; returns its documents."""
        self.counts.update(read.counts)
        for item in read.skipped:
            log.warning("corpus: skipping %s", item)
        self.skipped.extend(read.skipped)
        return read.documents


class ParquetFilesSource(Source):
    """One .parquet file or a directory of them, in name order; KIND names them in errors."""

    KIND = "Parquet"

    def __init__(self, path: str):
        super().__init__()
        self.root = Path(path)
        if not self.root.exists():
            raise SourceError(f"{self.KIND} Parquet path does not exist: {path}")
        if not self.files():
            raise SourceError(f"no .parquet files under {path}")

    def files(self) -> list[Path]:
        return [self.root] if self.root.is_file() else sorted(rglob(self.root, "*.parquet"))

    def snapshot(self) -> str:
        return listing_digest(self.files())


class LocalSource(Source):
    """A file or a directory (searched recursively) of .txt, .jsonl, .parquet and WikiText .raw files."""

    def __init__(self, path: str):
        super().__init__()
        self.root = Path(path)
        if not self.root.exists():
            raise SourceError(f"corpus path does not exist: {path}")
        if not self.files():
            raise SourceError(f"no documents under {path} (looked for {', '.join(SUFFIXES)} files)")

    def files(self) -> list[Path]:
        if self.root.is_file():
            return [self.root]
        return sorted(p for p in rglob(self.root) if p.is_file() and p.suffix in SUFFIXES)

    def snapshot(self) -> str:
        return listing_digest(self.files(), self.root)

    def parts(self) -> Iterator[Part]:
        for path in self.files():
            rel = str(path.relative_to(self.root)) if path != self.root else path.name
            if path.suffix != ".parquet":
                yield LocalFile(str(path), rel)
                continue
            # One part per row group: a multi-gigabyte Parquet file neither sits in one worker's
            # memory nor serialises the stage.
            with reading_parquet(path, SourceError):
                meta, first_row = pq.ParquetFile(path).metadata, 0
            for group in range(meta.num_row_groups):
                yield LocalFile(str(path), rel, group, first_row)
                first_row += meta.row_group(group).num_rows


@dataclass(frozen=True)
class LocalFile(Part):
    path: str
    rel: str  # the doc_id key: relative to the source root, so moving the corpus keeps ids
    row_group: int = 0  # Parquet only
    first_row: int = 0

    def read(self) -> Read:
        result = Read()
        try:
            for doc in self._documents(Path(self.path)):
                result.documents.append(doc)
        except UnicodeDecodeError as e:  # documents before the bad byte are kept
            result.skip(self.path, f"not UTF-8 (byte {e.start})", "not_utf8")
        return result

    def _documents(self, path: Path) -> Iterator[Document]:
        src, rel = str(path), self.rel
        if path.suffix == ".txt":
            text = path.read_text(encoding="utf-8")
            yield Document(doc_id(rel), src, path.stem, text)
        elif path.suffix == ".raw":
            lines = path.read_text(encoding="utf-8").replace("\r\n", "\n").split("\n")
            for i, (title, text) in enumerate(wikitext_articles(lines)):
                yield Document(doc_id(f"{rel}#{i}"), src, title, text)
        elif path.suffix == ".jsonl":
            with path.open(encoding="utf-8") as f:
                for line_no, record in json_objects(f, path, SourceError):
                    if "text" not in record:
                        raise SourceError(f"{path}:{line_no}: expected a JSON object with a 'text' field")
                    text = record["text"]
                    title = str(record.get("title") or record.get("url") or f"{path.stem}:{line_no}")
                    yield Document(doc_id(f"{rel}:{line_no}"), src, title, text)
        elif path.suffix == ".parquet":
            with reading_parquet(path, SourceError):
                pf = pq.ParquetFile(path)
                if "text" not in pf.schema_arrow.names:
                    raise SourceError(f"{path}: no 'text' column (columns: {', '.join(pf.schema_arrow.names)})")
                title_col = next((c for c in ("title", "url") if c in pf.schema_arrow.names), None)
                table = pf.read_row_group(self.row_group, columns=["text"] + ([title_col] if title_col else []))
            for row, record in enumerate(table.to_pylist(), self.first_row):
                title = str(record.get(title_col) or f"{path.stem}:{row}")
                yield Document(doc_id(f"{rel}:{row}"), src, title, record["text"] or "")


def wikitext_articles(raw_lines: Iterable[str]) -> Iterator[tuple[str, str]]:
    """(title, text) of each article in WikiText's lines; lines before the first title belong to none."""
    title, lines = None, []
    for line in raw_lines:
        m = _WIKITEXT_TITLE.match(line)
        if m:
            if title is not None:
                yield title, "\n".join(lines).strip()
            title, lines = m.group(1).strip(), []
        elif title is not None:
            lines.append(line.strip())
    if title is not None:
        yield title, "\n".join(lines).strip()
