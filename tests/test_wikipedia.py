"""Wikipedia sources on files built here in the real formats: a pages-articles export XML
(plain, bz2, two-stream multistream bz2) and wikimedia/wikipedia-style Parquet."""

import bz2
import shutil
import tracemalloc
from xml.sax.saxutils import escape

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.corpus.sources import SourceError, doc_id
from pipeline.corpus.wikipedia import WikipediaDumpSource, WikipediaParquetSource, is_wikipedia_dump

EXPORT = "http://www.mediawiki.org/xml/export-{v}/"
HEADER = """<mediawiki xmlns="{ns}" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" \
xsi:schemaLocation="{ns} {ns}.xsd" version="{v}" xml:lang="en">
  <siteinfo>
    <sitename>Wikipedia</sitename>
    <dbname>enwiki</dbname>
    <base>https://en.wikipedia.org/wiki/Main_Page</base>
    <generator>MediaWiki 1.43.0-wmf.5</generator>
    <case>first-letter</case>
    <namespaces>
      <namespace key="-2" case="first-letter">Media</namespace>
      <namespace key="0" case="first-letter" />
      <namespace key="1" case="first-letter">Talk</namespace>
      <namespace key="6" case="first-letter">File</namespace>
      <namespace key="14" case="first-letter">Category</namespace>
    </namespaces>
  </siteinfo>
"""
FOOTER = "</mediawiki>\n"


def page_xml(title: str, page_id: int, wikitext: str, ns: int = 0, redirect: str | None = None) -> str:
    redirect_el = f'    <redirect title="{escape(redirect, {chr(34): "&quot;"})}" />\n' if redirect else ""
    return f"""  <page>
    <title>{escape(title)}</title>
    <ns>{ns}</ns>
    <id>{page_id}</id>
{redirect_el}    <revision>
      <id>{page_id * 1000 + 7}</id>
      <timestamp>2024-05-01T12:00:00Z</timestamp>
      <contributor>
        <username>Editor</username>
        <id>42</id>
      </contributor>
      <model>wikitext</model>
      <format>text/x-wiki</format>
      <text bytes="{len(wikitext.encode())}" xml:space="preserve">{escape(wikitext)}</text>
      <sha1>phoiac9h4m842xq45sp7s6u21eteeq1</sha1>
    </revision>
  </page>
"""


def pages(paras: list[str]) -> tuple[list[str], list[str]]:
    """Pages for the first and the second bz2 stream; 'Shrimp' is only in the second."""
    lobster = (
        f"{{{{Infobox animal|name=Lobster|image=[[File:Lobster.jpg]]}}}}\n__NOTOC__\n"
        f"{paras[0]} The [[Target page XYZ|shown words]] are '''bold phrase''' and [[Plain link]]."
        f"{{{{cite web|url=http://example.org|title=Hidden cite}}}}<ref>Hidden reference text</ref>\n"
        f"[[File:Lobster claw.jpg|thumb|Hidden caption with [[Link in caption]]]]\n\n"
        f"== Description ==\n{paras[1]}\n"
        '{| class="wikitable"\n|-\n! Hidden head !! Other head\n|-\n| hidden cell [[File:Cell.png|Hidden cell image]] || other cell\n|}\n'
        f"[[Category:Hidden category]]\n"
    )
    crab = f'{paras[2]}<ref name="a" />\n\n=== Sub heading ===\n{paras[3]} {{{{citation needed|date=May 2024}}}}\n'
    first = [
        page_xml("Lobster", 10, lobster),
        page_xml("Crab", 12, crab),
        page_xml("Homarus", 13, "#REDIRECT [[Lobster]]\n{{R from scientific name}}", redirect="Lobster"),
        page_xml("Crabs", 14, "#redirect [[Crab]]"),  # old dumps: no <redirect> element
        page_xml("Claw", 15, "'''Claw''' may refer to:\n* [[Claw (anatomy)]]\n{{Disambiguation}}"),
        page_xml("Smith", 16, "'''Smith''' may refer to:\n* [[John Smith]]\n{{hndis|Smith}}"),
    ]
    second = [
        page_xml("Mercury (disambiguation)", 17, "'''Mercury''' may be:\n* [[Mercury (planet)]]"),
        page_xml("A1", 21, "'''A1''' may mean:\n* [[A1 road]]\n{{Letter-number combination disambiguation}}"),
        page_xml("Talk:Lobster", 18, f"Discussion. {paras[4]}", ns=1),
        page_xml("Lobster stub", 19, "{{stub}}\n[[Category:Stubs]]<ref>only a ref</ref>"),
        page_xml("Shrimp", 20, f"'''Shrimp''' {paras[4]}\n\n==References==\n{{{{reflist}}}}\n\n{paras[5]}"),
    ]
    return first, second


DROPPED = {"redirect": 2, "disambiguation": 4, "non_article_namespace": 1, "empty_after_cleaning": 1}


def write_dump(path, paras, version="0.11", streams=1):
    first, second = pages(paras)
    head = HEADER.format(ns=EXPORT.format(v=version), v=version)
    parts = [head + "".join(first), "".join(second) + FOOTER]
    if path.suffix != ".bz2":
        path.write_text("".join(parts), encoding="utf-8")
    elif streams == 1:
        path.write_bytes(bz2.compress("".join(parts).encode()))
    else:  # multistream: independent bz2 streams laid end to end, as Wikimedia publishes
        path.write_bytes(b"".join(bz2.compress(p.encode()) for p in parts))
    return path


def expected_articles(paras):
    return {
        "Lobster": f"{paras[0]} The shown words are bold phrase and Plain link.\n\nDescription\n{paras[1]}",
        "Crab": f"{paras[2]}\n\nSub heading\n{paras[3]}",
        "Shrimp": f"Shrimp {paras[4]}\n\nReferences\n\n{paras[5]}",
    }


@pytest.mark.parametrize(
    "name,version,streams",
    [
        ("enwiki-20240501-pages-articles.xml", "0.11", 1),
        ("enwiki-20240501-pages-articles.xml.bz2", "0.10", 1),
        ("enwiki-20240501-pages-articles-multistream.xml.bz2", "0.11", 2),
    ],
)
def test_dump_yields_clean_articles_and_counts_every_drop(tmp_path, paras, name, version, streams):
    path = write_dump(tmp_path / name, paras, version, streams)
    src = WikipediaDumpSource(str(path))
    docs = list(src.documents())
    assert {d.title_or_url: d.text for d in docs} == expected_articles(paras)
    for d in docs:
        for markup in ("[[", "]]", "{{", "}}", "<ref", "'''", "{|", "Hidden", "Category", "thumb", "__"):
            assert markup not in d.text, (d.title_or_url, markup)
    assert dict(src.counts) == DROPPED
    assert [d.doc_id for d in docs] == [doc_id(f"{name}/{i}") for i in (10, 12, 20)]
    assert {d.source for d in docs} == {str(path)}


def test_multistream_file_really_has_two_streams_and_is_read_to_the_end(tmp_path, paras):
    path = write_dump(tmp_path / "enwiki-pages-articles-multistream.xml.bz2", paras, streams=2)
    decompressor = bz2.BZ2Decompressor()
    decompressor.decompress(path.read_bytes())
    assert decompressor.eof and decompressor.unused_data  # a single-stream reader would stop here
    titles = [d.title_or_url for d in WikipediaDumpSource(str(path)).documents()]
    assert titles == ["Lobster", "Crab", "Shrimp"]  # Shrimp is in the second stream


def test_ids_are_stable_across_runs_and_locations(tmp_path, paras):
    (tmp_path / "a").mkdir()
    path = write_dump(tmp_path / "a" / "x-pages-articles.xml.bz2", paras)
    ids = [d.doc_id for d in WikipediaDumpSource(str(path)).documents()]
    assert ids == [d.doc_id for d in WikipediaDumpSource(str(path)).documents()]
    moved = shutil.copy(path, tmp_path / path.name)
    assert ids == [d.doc_id for d in WikipediaDumpSource(str(moved)).documents()]
    assert len(set(ids)) == 3


def test_memory_stays_flat_as_the_dump_grows(tmp_path):
    """Pages are dropped once read: peak memory for 6x the pages stays about the same (kept pages would grow it ~6x)."""

    def peak(n_pages: int) -> int:
        path = tmp_path / f"n{n_pages}-pages-articles.xml"
        body = "".join(page_xml(f"T{i}", i, f"Some '''text''' about [[thing {i}]]. " * 5) for i in range(n_pages))
        path.write_text(HEADER.format(ns=EXPORT.format(v="0.11"), v="0.11") + body + FOOTER)
        tracemalloc.start()
        try:
            assert sum(1 for _ in WikipediaDumpSource(str(path)).documents()) == n_pages
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    assert peak(600) < 2 * peak(100)


def test_malformed_or_damaged_dump_raises_naming_the_file(tmp_path, paras):
    bad_xml = tmp_path / "bad-pages-articles.xml"
    bad_xml.write_text(HEADER.format(ns=EXPORT.format(v="0.11"), v="0.11") + "  <page><title>X</title>\n" + FOOTER)
    with pytest.raises(SourceError, match=r"bad-pages-articles\.xml: malformed XML"):
        list(WikipediaDumpSource(str(bad_xml)).documents())
    cut = write_dump(tmp_path / "cut-pages-articles.xml.bz2", paras)
    cut.write_bytes(cut.read_bytes()[:-100])
    with pytest.raises(SourceError, match=r"cut-pages-articles\.xml\.bz2: cannot read"):
        list(WikipediaDumpSource(str(cut)).documents())


def test_snapshot_changes_with_the_file(tmp_path, paras):
    path = write_dump(tmp_path / "x-pages-articles.xml", paras)
    before = WikipediaDumpSource(str(path)).snapshot()
    assert WikipediaDumpSource(str(path)).snapshot() == before
    path.write_text(path.read_text() + "\n")
    assert WikipediaDumpSource(str(path)).snapshot() != before


def test_is_wikipedia_dump_by_name():
    for yes in (
        "enwiki-20240501-pages-articles.xml.bz2",
        "/d/enwiki-latest-pages-articles-multistream.xml.bz2",
        "https://dumps.wikimedia.org/enwiki/latest/enwiki-latest-pages-articles1.xml-p1p41242.bz2",
        "simplewiki-pages-articles.xml",
    ):
        assert is_wikipedia_dump(yes), yes
    for no in (
        "enwiki-latest-pages-articles-multistream-index.txt.bz2",
        "enwiki-latest-abstract.xml.gz",
        "wiki.valid.raw",
        "train-00000-of-00041.parquet",
    ):
        assert not is_wikipedia_dump(no), no


def test_parquet_streams_rows_from_files_and_row_groups(tmp_path, paras):
    root = tmp_path / "20231101.en"
    for sub in ("a", "b"):
        (root / sub).mkdir(parents=True)
    rows = [
        {"id": str(i), "url": f"https://en.wikipedia.org/wiki?curid={i}", "title": f"T{i}", "text": p}
        for i, p in enumerate(paras)
    ]
    pq.write_table(pa.Table.from_pylist(rows[:4]), root / "a" / "train-00000-of-00002.parquet", row_group_size=2)
    pq.write_table(pa.Table.from_pylist(rows[4:]), root / "b" / "train-00001-of-00002.parquet")
    src = WikipediaParquetSource(str(root))
    assert len(list(src.parts())) == 3  # two row groups in the first file, one in the second
    docs = list(src.documents())
    assert [(d.title_or_url, d.text) for d in docs] == [(r["url"], r["text"]) for r in rows]
    assert docs[0].doc_id == doc_id("train-00000-of-00002.parquet/0")
    assert docs[5].doc_id == doc_id("train-00001-of-00002.parquet/5")
    assert docs[5].source == str(root / "b" / "train-00001-of-00002.parquet")
    pq.write_table(pa.table({"id": ["1"], "text": ["no url or title"]}), root / "bad.parquet")
    with pytest.raises(SourceError, match=r"bad\.parquet: .*missing column\(s\) url, title"):
        list(WikipediaParquetSource(str(root / "bad.parquet")).documents())
