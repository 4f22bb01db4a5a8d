"""Evaluation data and corpora assembled from symlinked directories are read whole (pipeline.file_snapshot.rglob):
Python 3.11's Path.rglob does not follow the links, so their tasks read as absent and their documents go missing
without an error. Without links, every search finds what rglob found, in the same order."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.corpus.openwebtext import OpenWebTextSource
from pipeline.corpus.sources import SUFFIXES, LocalSource
from pipeline.corpus.stage import open_source
from pipeline.corpus.wikitext import WikiTextParquetSource, is_wikitext_parquet
from pipeline.errors import InputError
from pipeline.evaluate import retrieval
from pipeline.file_snapshot import listing, rglob, snapshot
from pipeline.preflight import configured
from pipeline.readers.sts import find_sts


def write(path: Path, text: str = "x\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def link(at: Path, to: Path) -> Path:
    at.parent.mkdir(parents=True, exist_ok=True)
    at.symlink_to(os.path.relpath(to, at.parent), target_is_directory=True)
    return at


def test_sts_and_sick_in_a_linked_directory_are_found(tmp_path):
    senteval = tmp_path / "data" / "SentEval"
    write(senteval / "STS12-en-test" / "STS.input.MSRpar.txt", "a cat\ta dog\nrain\tsun\n")
    write(senteval / "STS12-en-test" / "STS.gs.MSRpar.txt", "4.0\n1.5\n")
    sick = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n1\ta\tb\t3.5\tNEUTRAL\n"
    write(senteval / "SICK" / "SICK_test_annotated.txt", sick)
    eval_dir = tmp_path / "eval"
    link(eval_dir / "senteval", senteval)  # ln -s ~/data/SentEval eval/senteval
    subsets, absent = find_sts(eval_dir)
    assert sorted({s.task for s in subsets}) == ["SICKR", "STS12"]
    assert "STS12" not in absent and "SICKR" not in absent


def test_a_retrieval_task_in_a_linked_directory_is_found(tmp_path):
    task = tmp_path / "data" / "beir" / "mini"
    write(task / "corpus.jsonl", '{"_id": "d1", "text": "a passage"}\n{"_id": "d2", "text": "another"}\n')
    write(task / "queries.jsonl", '{"_id": "q1", "text": "a query"}\n')
    write(task / "qrels" / "test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    link(tmp_path / "eval" / "beir", task.parent)
    assert [t.name for t in retrieval.find(tmp_path / "eval")] == ["mini"]


def test_corpus_documents_in_a_linked_subdirectory_are_read(tmp_path):
    corpus = tmp_path / "corpus"
    write(corpus / "a.txt")
    write(tmp_path / "more" / "b.txt")
    write(tmp_path / "more" / "deeper" / "c.jsonl", '{"text": "x"}\n')
    link(corpus / "more", tmp_path / "more")
    want = [corpus / "a.txt", corpus / "more" / "b.txt", corpus / "more" / "deeper" / "c.jsonl"]
    assert LocalSource(str(corpus)).files() == want
    assert [name for name, _, _ in snapshot(str(corpus))] == ["a.txt", "more/b.txt", "more/deeper/c.jsonl"]


def test_parquet_openwebtext_and_wikitext_in_linked_directories_are_found(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    pq.write_table(pa.table({"text": ["a line"]}), real / "train-00000.parquet")
    write(real / "urlsf_subset00.tar", "")
    root = link(tmp_path / "wikitext" / "linked", real).parent
    assert WikiTextParquetSource(str(root)).files() == [root / "linked" / "train-00000.parquet"]
    assert is_wikitext_parquet("wikitext", str(root))
    assert OpenWebTextSource(str(root)).files() == [root / "linked" / "urlsf_subset00.tar"]
    assert isinstance(open_source(str(root)), OpenWebTextSource)


def test_a_symlink_loop_is_walked_once(tmp_path):
    a = tmp_path / "a"
    write(a / "x.txt")
    write(a / "b" / "y.txt")
    write(tmp_path / "c" / "z.txt")
    link(a / "b" / "up", a)  # a/b/up/b/up/... would never end
    link(a / "self", a)
    link(a / "c", tmp_path / "c")
    link(a / "c2", tmp_path / "c")  # two links to one directory: its files once
    assert list(rglob(a, "*.txt")) == [a / "x.txt", a / "b" / "y.txt", a / "c" / "z.txt"]
    assert LocalSource(str(a)).files() == [a / "b" / "y.txt", a / "c" / "z.txt", a / "x.txt"]


def test_without_links_the_search_finds_what_rglob_found_in_its_order(tmp_path):
    for rel in (
        "b.txt",
        "a/z.jsonl",
        "a/.hidden.txt",
        ".dot/c.txt",
        "a/b/c/d.parquet",
        "a/b/c.txt",
        "B/e.raw",
        "a-b/f.txt",
        "a.b/g.txt",
        "x.TXT",
        "a/b/urlsf_subset01.tar",
        "urlsf_subset00.tar",
    ):
        write(tmp_path / rel)
    for pattern in ("*", "*.txt", "c.txt", "urlsf_subset*.tar", "*.parquet", "c", "nothing"):
        assert sorted(rglob(tmp_path, pattern)) == sorted(tmp_path.rglob(pattern)), pattern
    assert LocalSource(str(tmp_path)).files() == sorted(
        p for p in tmp_path.rglob("*") if p.is_file() and p.suffix in SUFFIXES
    )
    # The baseline snapshot's old listing, so no dataset's fingerprint moves.
    old = sorted(os.path.join(d, f) for d, _, names in os.walk(str(tmp_path) + "/") for f in names)
    assert snapshot(str(tmp_path) + "/") == listing(old, str(tmp_path) + "/")


def test_a_link_that_points_nowhere_is_an_error_naming_it_not_a_missing_task_or_lost_documents(tmp_path):
    """An unmounted disk or a moved dataset leaves links to nothing. A task directory's link read as the task
    being absent; a document's link was skipped, its text lost without a word; a baseline's snapshot failed
    with os.stat's FileNotFoundError."""
    eval_dir = tmp_path / "eval"
    link(eval_dir / "STSBenchmark", tmp_path / "unmounted" / "STSBenchmark")
    linked = re.escape(str(eval_dir / "STSBenchmark"))
    with pytest.raises(InputError, match=rf"^{linked} is a broken symlink: .*unmounted/STSBenchmark"):
        find_sts(eval_dir)
    corpus = tmp_path / "corpus"
    write(corpus / "a.txt")
    (corpus / "b.txt").symlink_to(tmp_path / "moved" / "b.txt")
    link_to, target = re.escape(str(corpus / "b.txt")), re.escape(str(tmp_path / "moved" / "b.txt"))
    broken = rf"^{link_to} is a broken symlink: {target} "
    for read in (lambda: LocalSource(str(corpus)).files(), lambda: snapshot(str(corpus))):
        with pytest.raises(InputError, match=broken):
            read()
    # A name the search does not ask for is not its business: the tasks in a directory beside it are read.
    write(
        eval_dir / "SICK" / "SICK_test_annotated.txt",
        "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n1\ta\tb\t3.5\tNEUTRAL\n",
    )
    (eval_dir / "STSBenchmark").unlink()
    (eval_dir / "notes.txt").symlink_to(tmp_path / "gone.txt")
    subsets, _ = find_sts(eval_dir)
    assert [s.task for s in subsets] == ["SICKR"]


def test_a_symlink_loop_is_an_error_naming_the_loop_not_a_missing_path(tmp_path):
    """Links that lead back to themselves (a -> b -> a) fail os.stat with ELOOP, which os.path.exists reads as "no such
    file": the user was told a path was missing, or a link broken, that is there."""
    corpus = tmp_path / "corpus"
    write(corpus / "a.txt")
    (corpus / "b.txt").symlink_to("c.txt")
    (corpus / "c.txt").symlink_to("b.txt")
    b = re.escape(str(corpus / "b.txt"))
    loop = rf"^{b} is a symlink loop: {b} -> .*c\.txt -> .*b\.txt$"
    for read in (
        lambda: LocalSource(str(corpus)).files(),
        lambda: snapshot(str(corpus)),
        lambda: snapshot(str(corpus / "b.txt")),
    ):
        with pytest.raises(InputError, match=loop):
            read()
    (tmp_path / "eval").symlink_to("eval")  # a path given on the command line: Path.resolve's RuntimeError before
    for given in (
        dict(corpus=str(tmp_path / "eval")),
        dict(corpus=str(corpus / "a.txt"), eval_data=str(tmp_path / "eval")),
    ):
        with pytest.raises(InputError, match=rf"{re.escape(str(tmp_path / 'eval'))} is a symlink loop: "):
            configured(**given, artifacts=str(tmp_path / "art"))
