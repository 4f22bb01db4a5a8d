"""Where documents come from. A Source yields Documents and can say whether it changed.

This module holds the contract and local files; OpenWebText and Wikipedia live
beside it, and `pipeline.corpus.open_source` picks one by the path or URL's name.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pyarrow.parquet as pq

from pipeline.errors import InputError

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


class Source(ABC):
    """Yields documents; tallies what it skipped and why in `counts`, naming skipped files in `skipped`."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.skipped: list[str] = []

    @abstractmethod
    def snapshot(self) -> str:
        """A short string that changes whenever the source's content may have changed."""

    @abstractmethod
    def documents(self) -> Iterator[Document]:
        ...

    def skip(self, what: str, reason: str) -> None:
        log.warning("corpus: skipping %s: %s", what, reason)
        self.skipped.append(f"{what}: {reason}")


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
        return sorted(p for p in self.root.rglob("*") if p.is_file() and p.suffix in SUFFIXES)

    def snapshot(self) -> str:
        """Changes when any file is added, removed or modified: part of the corpus fingerprint."""
        listing = [(str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in self.files()]
        return hashlib.sha256(json.dumps(listing).encode()).hexdigest()[:16]

    def documents(self) -> Iterator[Document]:
        for path in self.files():
            rel = str(path.relative_to(self.root)) if path != self.root else path.name
            try:
                yield from self._read(path, rel)
            except UnicodeDecodeError as e:
                self.skip(str(path), f"not UTF-8 (byte {e.start})")
                self.counts["not_utf8"] += 1

    def _read(self, path: Path, rel: str) -> Iterator[Document]:
        src = str(path)
        if path.suffix == ".txt":
            text = path.read_text(encoding="utf-8")
            yield Document(doc_id(rel), src, path.stem, text)
        elif path.suffix == ".raw":
            for i, (title, text) in enumerate(_wikitext_articles(path.read_text(encoding="utf-8"))):
                yield Document(doc_id(f"{rel}#{i}"), src, title, text)
        elif path.suffix == ".jsonl":
            with path.open(encoding="utf-8") as f:
                for line_no, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        record = json.loads(line)
                        text = record["text"]
                    except (json.JSONDecodeError, KeyError, TypeError):
                        raise SourceError(f"{path}:{line_no}: expected a JSON object with a 'text' field") from None
                    title = str(record.get("title") or record.get("url") or f"{path.stem}:{line_no}")
                    yield Document(doc_id(f"{rel}:{line_no}"), src, title, text)
        elif path.suffix == ".parquet":
            pf = pq.ParquetFile(path)
            if "text" not in pf.schema_arrow.names:
                raise SourceError(f"{path}: no 'text' column (columns: {', '.join(pf.schema_arrow.names)})")
            title_col = next((c for c in ("title", "url") if c in pf.schema_arrow.names), None)
            row = 0
            for batch in pf.iter_batches(columns=["text"] + ([title_col] if title_col else [])):
                records = batch.to_pylist()
                for record in records:
                    title = str(record.get(title_col) or f"{path.stem}:{row}")
                    yield Document(doc_id(f"{rel}:{row}"), src, title, record["text"] or "")
                    row += 1


def _wikitext_articles(raw: str) -> Iterator[tuple[str, str]]:
    title, lines = None, []
    for line in raw.replace("\r\n", "\n").split("\n"):
        m = _WIKITEXT_TITLE.match(line)
        if m:
            if title is not None:
                yield title, "\n".join(lines).strip()
            title, lines = m.group(1).strip(), []
        elif title is not None:
            lines.append(line.strip())
    if title is not None:
        yield title, "\n".join(lines).strip()
