"""The corpus stage on URLs: an OpenWebText tarball and a Wikipedia dump served from 127.0.0.1,
read through the same download path as a real URL, with a connection cut mid-file."""

from __future__ import annotations

from pipeline.config import Config
from pipeline.corpus import stage as corpus
from pipeline.corpus.config import CorpusConfig
from pipeline.stage import run_stage
from storage import read_manifest, read_table
from tests.test_wikipedia import expected_articles, write_dump


def test_corpus_stage_reads_openwebtext_and_wikipedia_urls_resuming_cut_downloads(
    file_server, release, tmp_path, paras
):
    owt_dir, expected_owt = release
    dump = write_dump(tmp_path / "enwiki-20240501-pages-articles-multistream.xml.bz2", paras, streams=2)
    file_server.files = {
        "/owt/urlsf_subset00.tar": (owt_dir / "urlsf_subset00.tar").read_bytes(),
        f"/dumps/{dump.name}": dump.read_bytes(),
    }
    base = f"http://127.0.0.1:{file_server.server_port}"
    cfg = CorpusConfig(
        sources=[f"{base}/owt/urlsf_subset00.tar", f"{base}/dumps/{dump.name}"],
        download_dir=str(tmp_path / "downloads"),
    )
    path = run_stage(corpus.STAGE, corpus.config(Config(corpus=cfg)), {}, str(tmp_path / "artifacts"))

    table = read_table(path)
    docs = dict(zip(table.column("title_or_url").to_pylist(), table.column("text").to_pylist()))
    owt = {name: text for name, (key, text) in expected_owt.items() if key.startswith("urlsf_subset00.tar/")}
    assert {name: docs[name] for name in owt} == owt
    assert {title: docs[title] for title in expected_articles(paras)} == expected_articles(paras)
    assert table.num_rows == len(owt) + len(expected_articles(paras))
    assert read_manifest(path)["counts"]["redirect"] == 2  # the dump's drops are counted in the manifest
    # each file: a first request cut in half, then one range request for the rest
    for url_path, data in file_server.files.items():
        ranges = [r for p, r in file_server.requests if p == url_path]
        assert ranges == [None, f"bytes={len(data) // 2}-"]
