"""Evaluation inputs judged by their content (issue 41, items 8 and 9): a retrieval folder missing a part, entries of
the evaluation directory no task reads, qrels naming passages the corpus lacks, empty queries and labels, STS gold
scores off their task's scale or all alike; and (issue 47) sets every model scores alike, qrels of queries the
queries lack, table rows of other fields than their header's. Each case is tiny hand-built files in a temporary
directory; an error is one line naming the file (and row), a warning one line naming the file."""

from __future__ import annotations

import json
import logging
import re

import pytest

from pipeline.errors import InputError
from pipeline.evaluate import clustering, kinds, reranking, retrieval
from pipeline.readers.sts import find_sts, read_pair_file
from tests.conftest import write_sts
from tests.helpers import write_jsonl
from tests.test_sts import SICK_TEST, write_sick
from tests.test_task_kinds import write_beir

# --- item 2: what no task reads is named; a retrieval folder missing a part is an error ---


def test_a_retrieval_folder_without_its_corpus_beside_other_tasks_is_an_error_naming_it(tmp_path):
    data = write_sts(tmp_path / "eval")
    beir = write_beir(data / "scifact", [("d0", "", "kabar")], [("q0", "lodos")], [("q0", "d0", 1)])
    (beir / "corpus.jsonl.gz").unlink()
    with pytest.raises(InputError, match=r"scifact: a retrieval task \(BEIR's layout\) without corpus.jsonl$"):
        kinds.find_all(data)


def test_entries_no_task_reads_are_named_in_one_warning_line(tmp_path, caplog):
    data = write_sts(tmp_path / "eval")
    write_beir(data / "nfcorpus", [("d0", "", "kabar"), ("d1", "", "meltem")], [("q0", "lodos")], [("q0", "d0", 1)])
    (data / "quora.pairclass.txt").write_text("sentence1\tsentence2\tlabel\n")  # .txt: no table suffix
    (data / "queries-only").mkdir()
    write_jsonl(data / "queries-only" / "queries.jsonl", [{"_id": "q0", "text": "lodos"}])
    (data / ".DS_Store").write_text("")
    with caplog.at_level(logging.WARNING, logger="cpipe"):
        tasks = kinds.find_all(data)
        kinds.find_all(data)  # found again (the check, the fingerprint, the scoring): said once
    assert [t.name for t in tasks] == ["nfcorpus"]
    lines = [r.getMessage() for r in caplog.records if "no task reads" in r.getMessage()]
    assert lines == [f"{data}: 2 entries no task reads: queries-only/, quora.pairclass.txt"]


# --- item 3: qrels naming passages the corpus lacks ---


def test_qrels_naming_passages_absent_from_the_corpus_are_counted_in_a_warning(tmp_path, caplog):
    passages = [("d0", "", "kabar"), ("d1", "", "lodos")]
    qrels = [("q0", "d0", 1), ("q0", "x7", 1), ("q1", "x8", 2), ("q1", "d1", 0)]
    write_beir(tmp_path / "t", passages, [("q0", "kabar"), ("q1", "lodos")], qrels)
    with caplog.at_level(logging.WARNING, logger="cpipe"):
        [task] = retrieval.find(tmp_path)
    assert task.data.relevant == {"q0": {"d0", "x7"}, "q1": {"x8"}}  # still counted, as the evaluator counts them
    [line] = [r.getMessage() for r in caplog.records]
    assert line == (
        f"{tmp_path / 't' / 'qrels' / 'test.tsv'}: 2 of its 3 relevant corpus-ids are not in the corpus "
        "(e.g. 'x7', 'x8'); they count as relevant passages never retrieved, lowering the scores"
    )


def test_qrels_of_another_corpus_are_an_error(tmp_path):
    write_beir(tmp_path / "t", [("d0", "", "kabar")], [("q0", "kabar")], [("q0", "x1", 1), ("q0", "x2", 1)])
    with pytest.raises(
        InputError,
        match=r"test.tsv: none of its 2 relevant corpus-ids is in the corpus "
        r"\(e.g. 'x1', 'x2'\)",
    ):
        retrieval.find(tmp_path)


# --- item 4: empty queries and labels ---


def test_an_empty_retrieval_query_is_an_error_naming_file_and_line(tmp_path):
    write_beir(tmp_path / "t", [("d0", "", "kabar")], [("q0", "kabar"), ("q1", "  ")], [("q0", "d0", 1)])
    with pytest.raises(InputError, match=r"queries.jsonl:2: query 'q1' has an empty text$"):
        retrieval.find(tmp_path)


def test_an_empty_reranking_query_is_an_error_naming_file_and_line(tmp_path):
    path = write_jsonl(
        tmp_path / "rr.reranking.jsonl",
        [{"query": "kabar", "positive": ["a"], "negative": ["b"]}, {"query": "", "positive": ["a"], "negative": ["b"]}],
    )
    with pytest.raises(InputError, match=f"{path}:2: an empty query$"):
        reranking.find(tmp_path)


@pytest.mark.parametrize(
    "name, content, where",
    [
        ("topics.clustering.csv", "text,label\nkabar,a\nlodos,\nmeltem,b\n", ":3: "),
        ("topics.clustering.jsonl", json.dumps({"sentences": ["kabar", "lodos"], "labels": ["a", " "]}) + "\n", ":1: "),
    ],
)
def test_an_empty_clustering_label_is_an_error_naming_file_and_row(tmp_path, name, content, where):
    (tmp_path / name).write_text(content)
    with pytest.raises(InputError, match=f"{tmp_path / name}{where}an empty label$"):
        clustering.find(tmp_path)


# --- item 5: STS gold scores off their task's scale ---


def test_stsb_and_sts12_scores_off_the_0_to_5_scale_are_errors_naming_file_line_value_and_range(tmp_path):
    data = write_sts(tmp_path / "eval", n_pairs=5)
    test = data / "STSBenchmark" / "sts-test.csv"
    lines = test.read_text().splitlines()
    fields = lines[2].split("\t")
    test.write_text("\n".join(lines[:2] + ["\t".join(fields[:4] + ["100"] + fields[5:])] + lines[3:]) + "\n")
    with pytest.raises(InputError, match=f"{test}:3: gold score 100 is outside the task's range 0 to 5$"):
        find_sts(data)
    (data / "STSBenchmark" / "sts-test.csv").unlink()
    (data / "STSBenchmark" / "sts-dev.csv").rename(test)
    gold = data / "STS12-en-test" / "STS.gs.MSRvid.txt"
    gold.write_text("1\n-3\n2\n4\n5\n")
    with pytest.raises(InputError, match=f"{gold}:2: gold score -3 is outside the task's range 0 to 5$"):
        find_sts(data)


def test_a_sick_relatedness_score_off_its_1_to_5_scale_is_an_error(tmp_path):
    test = [*SICK_TEST[:2], (*SICK_TEST[2][:3], "0.5", SICK_TEST[2][4])]
    path = write_sick(tmp_path / "sick2014", test=test) / "SICK_test_annotated.txt"
    with pytest.raises(InputError, match=f"{path}:4: gold score 0.5 is outside the task's range 1 to 5$"):
        find_sts(tmp_path)


# --- item 6: a constant gold score, and NaN in MTEB's files ---


def test_an_sts_pair_file_of_one_score_is_an_error(tmp_path):
    path = write_jsonl(
        tmp_path / "flat.jsonl", [{"sentence1": f"a {i}", "sentence2": f"b {i}", "score": 3} for i in range(4)]
    )
    with pytest.raises(InputError, match=f"{path}: all 4 pairs have the gold score 3; a correlation needs scores"):
        read_pair_file(path)


# --- issue 47, items 4 and 7: sets every model scores alike, qrels of absent queries, rows of other widths ---


@pytest.mark.parametrize(
    "name, content, message",
    [
        (
            "one.clustering.jsonl",
            json.dumps({"sentences": ["kabar"], "labels": ["a"]}) + "\n",
            ":1: one label \\('a'\\) for all 1 sentence\\(s\\): any model clusters it perfectly; ",
        ),
        (
            "one.clustering.jsonl",
            json.dumps({"sentences": ["kabar", "lodos", "meltem"], "labels": [0, 0, 1]})
            + "\n"
            + json.dumps({"sentences": ["kabar", "lodos"], "labels": [1, 1]})
            + "\n",
            ":2: one label \\('1'\\) for all 2 sentence\\(s\\): any model clusters it perfectly; ",
        ),
        (
            "one.clustering.csv",
            "text,label\nkabar,a\nlodos,a\nmeltem,a\n",
            ": one label \\('a'\\) for all 3 sentence\\(s\\): any model clusters it perfectly; ",
        ),
        (
            "own.clustering.tsv",
            "text\tlabel\nkabar\ta\nlodos\tb\nmeltem\tc\n",
            ": each of its 3 sentences has a label of its own: any model clusters it perfectly; ",
        ),
    ],
)
def test_a_clustering_set_any_model_clusters_perfectly_is_an_error_naming_it(tmp_path, name, content, message):
    """V-measure was 100.00 for any model on a set of one label (one sentence, say), and is on one of a label per
    sentence: such a set scores nothing."""
    (tmp_path / name).write_text(content)
    with pytest.raises(InputError) as e:
        clustering.find(tmp_path)
    assert re.match(re.escape(str(tmp_path / name)) + message, str(e.value)), str(e.value)
    assert "\n" not in str(e.value)


def test_a_retrieval_corpus_whose_every_passage_is_relevant_to_every_query_is_an_error(tmp_path):
    """A corpus of one passage: every ranking, so every model, scored nDCG@10 1.0."""
    write_beir(
        tmp_path / "t", [("d0", "", "kabar")], [("q0", "lodos"), ("q1", "meltem")], [("q0", "d0", 1), ("q1", "d0", 2)]
    )
    with pytest.raises(InputError, match=r"t/corpus.jsonl.gz: all 1 of its passages are relevant to every query"):
        retrieval.find(tmp_path)
    # One passage more, relevant to no query: a ranking can be wrong, and the task is read.
    write_beir(tmp_path / "u", [("d0", "", "kabar"), ("d1", "", "sirocco")], [("q0", "lodos")], [("q0", "d0", 1)])
    assert [t.name for t in retrieval.find(tmp_path / "u")] == ["u"]


def test_qrels_of_queries_absent_from_the_queries_are_counted_in_a_warning(tmp_path, caplog):
    passages = [("d0", "", "kabar"), ("d1", "", "lodos")]
    qrels = [("q0", "d0", 1), ("q7", "d0", 1), ("q8", "d1", 2), ("q9", "d1", 0)]  # q9: judged, none relevant
    write_beir(tmp_path / "t", passages, [("q0", "kabar"), ("q1", "lodos")], qrels)
    with caplog.at_level(logging.WARNING, logger="cpipe"):
        [task] = retrieval.find(tmp_path)
    assert task.data.query_ids == ["q0"]
    [line] = [r.getMessage() for r in caplog.records]
    assert line == (
        f"{tmp_path / 't' / 'qrels' / 'test.tsv'}: 2 of its 3 query-ids with a relevant passage are not in "
        "queries.jsonl (e.g. 'q7', 'q8'); their judgements are left out"
    )


@pytest.mark.parametrize(
    "name, rows, line, fields",
    [
        ("pairs.tsv", "sentence1\tsentence2\tscore\na\tb\t1\nc\td\t2\textra\ne\tf\t3\n", 3, 4),
        ("pairs.csv", "sentence1,sentence2,score\na,b,1\nc,2\ne,f,3\n", 3, 2),
        ("dupes.pairclass.tsv", "sentence1\tsentence2\tlabel\na\tb\t1\nc\td\t0\te\n", 3, 4),
        ("topics.clustering.tsv", "text\tlabel\na\t1\nb\t1\t2\nc\t2\n", 3, 3),
    ],
)
def test_a_table_row_of_other_fields_than_its_header_is_an_error_naming_its_line(tmp_path, name, rows, line, fields):
    """A fourth field of a TSV pair row was ignored, and a missing one read as None."""
    path = tmp_path / name
    path.write_text(rows)
    header = len(rows.splitlines()[0].split("\t" if name.endswith(".tsv") else ","))
    with pytest.raises(InputError) as e:
        kinds.search(tmp_path, {})
    assert str(e.value) == f"{path}:{line}: {fields} fields, but the header names {header}"
