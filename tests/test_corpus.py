import json

import pandas as pd
import pyarrow as pa
import pyarrow.compute  # noqa: F401
import pyarrow.parquet as pq
import pytest

from pipeline.config import Config
from pipeline.corpus import stage as corpus
from pipeline.corpus.config import CorpusConfig
from pipeline.corpus.sources import SourceError
from pipeline.corpus.stage import open_source
from pipeline.stage import run_stage
from storage import read_manifest, read_table
from tests.conftest import SHARED


def corpus_config(sources, max_docs=None, workers=1) -> dict:
    parallel = {"backend": "processes", "workers": workers} if workers > 1 else {}
    return corpus.config(
        Config(corpus=CorpusConfig(sources=[str(s) for s in sources], max_docs=max_docs), parallel=parallel)
    )


def build(tmp_path, sources, max_docs=None, workers=1):
    return run_stage(corpus.STAGE, corpus_config(sources, max_docs, workers), {}, str(tmp_path / "artifacts"))


# Bad input behaves the same when parts are read on worker processes.
on_every_backend = pytest.mark.parametrize(
    "workers", [1, pytest.param(2, marks=pytest.mark.slow)], ids=["serial", "processes"]
)


def test_every_local_format_recursively(tmp_path):
    root = tmp_path / "in"
    (root / "nested" / "deeper").mkdir(parents=True)
    (root / "a.txt").write_text("plain text document")
    (root / "nested" / "b.jsonl").write_text(
        json.dumps({"text": "first json", "url": "http://x"}) + "\n\n" + json.dumps({"text": "second json"}) + "\n"
    )
    pq.write_table(pa.table({"text": ["from parquet"], "title": ["T"]}), root / "nested" / "deeper" / "c.parquet")
    (root / "wiki.raw").write_text(
        " \r\n = Lobster = \r\n \r\n It is blue . \r\n \r\n = = Biology = = \r\n"
        " Claws . \r\n = Crab = \r\n Sideways . \r\n"
    )
    (root / "ignored.csv").write_text("not a corpus file")
    table = read_table(build(tmp_path, [root]))
    docs = dict(zip(table.column("title_or_url").to_pylist(), table.column("text").to_pylist()))
    assert docs["a"] == "plain text document"
    assert docs["http://x"] == "first json" and "second json" in docs.values()
    assert docs["T"] == "from parquet"
    assert docs["Lobster"] == "It is blue .\n\n= = Biology = =\nClaws ."
    assert docs["Crab"] == "Sideways ."
    assert table.num_rows == 6 and len(set(table.column("doc_id").to_pylist())) == 6


def test_doc_ids_are_stable_across_runs(tmp_path):
    root = tmp_path / "in"
    root.mkdir()
    (root / "a.txt").write_text("one")
    (root / "b.txt").write_text("two")
    first = read_table(build(tmp_path, [root])).column("doc_id").to_pylist()
    again = [d.doc_id for d in open_source(str(root)).documents()]
    assert first == again


@on_every_backend
def test_non_utf8_file_is_skipped_counted_and_named(tmp_path, caplog, workers):
    root = tmp_path / "in"
    root.mkdir()
    (root / "good.txt").write_text("fine")
    (root / "bad.txt").write_bytes(b"caf\xe9 latin-1")
    path = build(tmp_path, [root], workers=workers)
    manifest = read_manifest(path)
    assert manifest["rows"] == 1 and manifest["counts"]["not_utf8"] == 1
    assert any("bad.txt" in s for s in manifest["skipped"])
    assert "bad.txt" in caplog.text and "not UTF-8" in caplog.text


def test_empty_directory_and_missing_path_are_clear_errors(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceError, match="no documents under .*empty"):
        build(tmp_path, [tmp_path / "empty"])
    with pytest.raises(SourceError, match="does not exist: .*nowhere"):
        corpus_config([tmp_path / "nowhere"])


@on_every_backend
def test_jsonl_without_text_names_file_and_line(tmp_path, workers):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "x.jsonl").write_text('{"text": "ok"}\n{"body": "no text"}\n')
    with pytest.raises(SourceError, match=r"x.jsonl:2: .*'text'"):
        build(tmp_path, [tmp_path / "in"], workers=workers)


def test_snapshot_changes_when_a_file_changes(tmp_path):
    root = tmp_path / "in"
    root.mkdir()
    (root / "a.txt").write_text("one")
    before = corpus_config([root])
    (root / "a.txt").write_text("one, edited")
    assert corpus_config([root]) != before


@on_every_backend
def test_max_docs_stops_early(tmp_path, workers):
    root = tmp_path / "in"
    root.mkdir()
    for i in range(9):
        (root / f"{i}.txt").write_text(f"doc {i}")
    table = read_table(build(tmp_path, [root], max_docs=3, workers=workers))
    assert table.column("text").to_pylist() == ["doc 0", "doc 1", "doc 2"]


@pytest.mark.skipif(not SHARED, reason="CPIPE_SHARED_DATA is not set (path to the team's shared data directory)")
def test_reads_the_shared_corpora_in_their_real_formats(tmp_path):
    root = f"{SHARED}/corpus"
    table = read_table(build(tmp_path, [root]))
    sources = pd.Series(table.column("source").to_pylist())
    assert sources.str.contains("/sotu/").sum() == 233
    assert sources.str.endswith(".jsonl").sum() == 10  # OpenWebText sample, one document per line
    wiki = table.filter(pa.compute.match_substring(table.column("source"), "wiki.valid.raw"))
    assert wiki.num_rows == 60 and "Homarus gammarus" in wiki.column("title_or_url").to_pylist()
