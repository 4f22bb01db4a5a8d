"""WikiText-103 / WikiText-2 as the Hugging Face hub serves them (`Salesforce/wikitext`, Parquet): articles rebuilt
from lines.

Each Parquet row is one line of the `.raw` release, so a row is not a document: an article starts at a level-1
heading line " = Title = " and runs to the next one, as `LocalSource` splits a `.raw` file. Articles span row
groups, so the file is read in order here, in batches, and handed out in parts of ARTICLES_PER_PART articles
that any worker can turn into documents; memory holds one part, not the file.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from pipeline.corpus.sources import Document, ParquetFilesSource, Part, Read, SourceError, doc_id, wikitext_articles
from pipeline.file_snapshot import rglob
from pipeline.parquet_files import reading_parquet

ARTICLES_PER_PART = 64
BATCH_ROWS = 65_536


def is_wikitext_parquet(spec: str, path: str) -> bool:
    """A path or URL that names WikiText and is a .parquet file, or a directory of them."""
    name = spec.split("?", 1)[0].lower()
    return "wikitext" in name and (
        name.endswith(".parquet") or Path(path).is_dir() and next(rglob(path, "*.parquet"), None) is not None
    )


class WikiTextParquetSource(ParquetFilesSource):
    """One WikiText Parquet file (a `text` column, a line a row) or a directory of them, in name order."""

    KIND = "WikiText"

    def snapshot(self) -> str:
        # "wikitext" keeps this reading's fingerprint apart from the same files read a row a document.
        return "wikitext-" + super().snapshot()

    def parts(self) -> Iterator[Part]:
        for path in self.files():
            articles: list[tuple[int, str, str]] = []
            for i, (title, text) in enumerate(wikitext_articles(self._lines(path))):
                articles.append((i, title, text))
                if len(articles) == ARTICLES_PER_PART:
                    yield WikiTextArticles(str(path), tuple(articles))
                    articles = []
            if articles:
                yield WikiTextArticles(str(path), tuple(articles))

    @staticmethod
    def _lines(path: Path) -> Iterator[str]:
        with reading_parquet(path, SourceError):
            pf = pq.ParquetFile(path)
            if "text" not in pf.schema_arrow.names:
                raise SourceError(
                    f"{path}: not a WikiText file, no 'text' column (columns: {', '.join(pf.schema_arrow.names)})"
                )
            for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=["text"]):
                for row in batch.column(0).to_pylist():
                    yield (row or "").removesuffix("\n")


@dataclass(frozen=True)
class WikiTextArticles(Part):
    path: str
    articles: tuple[tuple[int, str, str], ...]  # (index of the article in its file, title, text)

    def read(self) -> Read:
        name = Path(self.path).name
        return Read([Document(doc_id(f"{name}#{i}"), self.path, title, text) for i, title, text in self.articles])
