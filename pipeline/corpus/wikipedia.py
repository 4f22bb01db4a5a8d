"""Wikipedia as documents: the MediaWiki `pages-articles` XML dump, or the `wikimedia/wikipedia` Parquet files.

The dump is streamed with ElementTree.iterparse and each <page> is dropped once
read, so memory stays flat over a multi-gigabyte dump; bz2 handles the
multistream dumps, which are bz2 streams laid end to end.

Wikitext is cleaned with mwparserfromhell rather than wikiextractor.
wikiextractor is a command-line, multiprocess script that writes its own output
files, while mwparserfromhell is a maintained library that parses one page at a
time in-process, which is what a streaming Source needs.
"""

from __future__ import annotations

import bz2
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import mwparserfromhell
import pyarrow.parquet as pq

from pipeline.corpus.sources import Document, ParquetFilesSource, Part, Read, Source, SourceError, doc_id
from pipeline.file_snapshot import listing_digest
from pipeline.parquet_files import reading_parquet

# Split dumps are named like enwiki-...-pages-articles1.xml-p1p41242.bz2.
_DUMP_NAME = re.compile(r"pages-articles.*\.xml(-p\d+p\d+)?(\.bz2)?$")
_DISAMBIGUATION = {"disambiguation", "disambig", "dab", "hndis", "geodis"}
_DROPPED_LINKS = {"file", "image", "category"}
_DROPPED_TAGS = {"ref", "table"}  # references and tables are not running text
_MAGIC_WORD = re.compile(r"__[A-Z]+__")  # __NOTOC__ and friends survive strip_code as text
PARQUET_COLUMNS = ["id", "url", "title", "text"]


def is_wikipedia_dump(spec: str) -> bool:
    """True for a path or URL naming a pages-articles dump (single, multistream or split), plain or bz2."""
    return bool(_DUMP_NAME.search(spec.split("?", 1)[0]))


def clean_wikitext(code: mwparserfromhell.wikicode.Wikicode) -> str:
    """Running text of a parsed page: headings become plain lines; templates, refs, tables, files and categories go."""
    # strip_code drops templates and comments by itself, but keeps the text of refs,
    # tables and file/category links, so those are removed from the tree first.
    unwanted = [n for n in code.ifilter_tags() if str(n.tag).strip().lower() in _DROPPED_TAGS]
    unwanted += [n for n in code.ifilter_wikilinks() if str(n.title).strip().split(":", 1)[0].lower() in _DROPPED_LINKS]
    for node in unwanted:
        try:
            code.remove(node)
        except ValueError:
            pass  # nested inside a node removed just before (a file link in a table, say)
    lines = (_MAGIC_WORD.sub("", line).strip() for line in code.strip_code(normalize=True, collapse=True).splitlines())
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _is_disambiguation(title: str, code: mwparserfromhell.wikicode.Wikicode) -> bool:
    if title.endswith("(disambiguation)"):
        return True
    names = (str(t.name).strip().replace("_", " ").lower() for t in code.ifilter_templates(recursive=False))
    return any(n in _DISAMBIGUATION or n.endswith(" disambiguation") for n in names)


class WikipediaDumpSource(Source):
    """One `*pages-articles*.xml[.bz2]` dump; keeps articles (namespace 0) and counts what it drops and why.

    The XML is read in this process (it is one stream); the costly part, parsing and
    cleaning wikitext, happens in parts of PAGES_PER_PART articles that any worker can take.
    """

    PAGES_PER_PART = 64

    def __init__(self, path: str):
        super().__init__()
        self.path = Path(path)
        if not self.path.is_file():
            raise SourceError(f"Wikipedia dump does not exist: {path}")

    def snapshot(self) -> str:
        return listing_digest([self.path])

    def parts(self) -> Iterator[Part]:
        opener = bz2.open if self.path.suffix == ".bz2" else open
        pages: list[tuple[str, str, str]] = []
        try:
            with opener(self.path, "rb") as f:
                for page in self._articles(f):
                    pages.append(page)
                    if len(pages) == self.PAGES_PER_PART:
                        yield WikiPages(str(self.path), tuple(pages))
                        pages = []
        except ET.ParseError as e:
            raise SourceError(f"{self.path}: malformed XML ({e})") from None
        except (OSError, EOFError) as e:  # bad or cut bz2 data
            raise SourceError(f"{self.path}: cannot read ({e})") from None
        if pages:
            yield WikiPages(str(self.path), tuple(pages))

    def _articles(self, f) -> Iterator[tuple[str, str, str]]:
        """(page id, title, wikitext) of each page in the article namespace that is not a redirect."""
        root, ns = None, ""
        for event, elem in ET.iterparse(f, events=("start", "end")):
            if root is None:
                # The export namespace changes with the schema version (export-0.10, 0.11, ...).
                root, ns = elem, elem.tag[: elem.tag.index("}") + 1] if elem.tag.startswith("{") else ""
            elif event == "end" and elem.tag == f"{ns}page":
                page = (
                    elem.findtext(f"{ns}id", "").strip(),
                    elem.findtext(f"{ns}title", ""),
                    elem.findtext(f"{ns}ns", "0").strip(),
                    elem.find(f"{ns}redirect") is not None,
                    elem.findtext(f"{ns}revision/{ns}text") or "",
                )  # pages-articles holds only the latest revision
                root.clear()  # drop the page (and any siteinfo) so memory stays flat
                page_id, title, namespace, redirect, wikitext = page
                if namespace != "0":
                    self.counts["non_article_namespace"] += 1
                elif redirect or wikitext.lstrip().upper().startswith("#REDIRECT"):
                    self.counts["redirect"] += 1
                else:
                    yield page_id, title, wikitext


@dataclass(frozen=True)
class WikiPages(Part):
    path: str
    pages: tuple[tuple[str, str, str], ...]

    def read(self) -> Read:
        result, name = Read(), Path(self.path).name
        for page_id, title, wikitext in self.pages:
            code = mwparserfromhell.parse(wikitext)
            if _is_disambiguation(title, code):
                result.counts["disambiguation"] += 1
                continue
            text = clean_wikitext(code)
            if not text:
                result.counts["empty_after_cleaning"] += 1
                continue
            result.documents.append(Document(doc_id(f"{name}/{page_id}"), self.path, title, text))
        return result


class WikipediaParquetSource(ParquetFilesSource):
    """`wikimedia/wikipedia` Parquet files (id, url, title, text): one file or a directory of them."""

    KIND = "Wikipedia"

    def parts(self) -> Iterator[Part]:
        for path in self.files():
            with reading_parquet(path, SourceError):
                pf = pq.ParquetFile(path)
            missing = [c for c in PARQUET_COLUMNS if c not in pf.schema_arrow.names]
            if missing:
                raise SourceError(f"{path}: not a wikimedia/wikipedia file, missing column(s) {', '.join(missing)}")
            for group in range(pf.metadata.num_row_groups):  # a part is bounded by a row group
                yield ParquetRowGroup(str(path), group)


@dataclass(frozen=True)
class ParquetRowGroup(Part):
    path: str
    row_group: int

    def read(self) -> Read:
        with reading_parquet(self.path, SourceError):
            table = pq.ParquetFile(self.path).read_row_group(self.row_group, columns=PARQUET_COLUMNS)
        name = Path(self.path).name
        return Read(
            [
                Document(doc_id(f"{name}/{row['id']}"), self.path, row["url"] or row["title"] or "", row["text"] or "")
                for row in table.to_pylist()
            ]
        )
