"""The decontaminate stage (issue 27, item 5): documents holding an evaluation sentence's word 13-grams (or a
shorter sentence whole) are dropped, masked or counted, per evaluation task; the fingerprint follows the n-grams,
not the files. Hand-built documents and evaluation files; the expected documents and texts are written out here."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from rich.console import Console

from pipeline.config import Config
from pipeline.decontaminate import stage as decontaminate
from pipeline.decontaminate.evalsets import eval_texts
from pipeline.decontaminate.ngrams import POWERS, window_hashes
from pipeline.filter.stage import SCHEMA
from pipeline.stage import run_stage
from storage import DatasetWriter, dataset_path, read_manifest, read_table
from storage.inspection import show

LONG = "A man is playing a large flute in the middle of the old town square today."  # 16 words
SHORT = "The senate voted on the new budget bill late Thursday."  # 10 words: looked for whole
OTHER = "A woman is slicing an onion on a wooden board in her kitchen at home."  # 15 words
FILLER = "Rain fell on the quiet harbour while gulls circled over fishing boats and nets. " * 3
DOCS = {
    "clean-1": FILLER,
    "clean-2": "Nothing here comes from any evaluation file at all, only filler. " + FILLER,
    "pasted-long": FILLER
    + "Then: A MAN is playing a large flute, in the middle of the old town square today! "
    + FILLER,
    "pasted-short": FILLER + "the Senate voted on the new budget bill late thursday -- " + FILLER,
    "pasted-test-2": "We read that a woman is slicing an onion on a wooden board in her kitchen at home. " + FILLER,
    "twelve-words": FILLER + "A man is playing a large flute in the middle of the " + FILLER,
    "nine-of-short": FILLER + "The senate voted on the new budget bill late. " + FILLER,
}
DIRTY = {"pasted-long", "pasted-short", "pasted-test-2"}


def write_stsb(root, rows) -> str:
    """SentEval's STSBenchmark/sts-test.csv (and a train split, which no score is taken on) under root."""
    stsb = root / "STSBenchmark"
    stsb.mkdir(parents=True, exist_ok=True)
    lines = [f"main-captions\tMSRvid\t2012test\t{i:04d}\t{score}\t{a}\t{b}" for i, (a, b, score) in enumerate(rows)]
    (stsb / "sts-test.csv").write_text("\n".join(lines) + "\n")
    (stsb / "sts-train.csv").write_text(f"main-captions\tMSRvid\t2012train\t0000\t1.0\t{FILLER.split('. ')[0]}\tx\n")
    return str(root)


STSB_ROWS = [
    (LONG, "A man plays the flute.", 3.8),
    (OTHER, "A person cuts a vegetable.", 3.0),
    (SHORT, "Budget passed.", 1.0),
]


def filtered(art, docs: dict[str, str]) -> tuple[str, str]:
    """(artifacts, the filter stage's dataset of `docs` there, in its schema, as the stage reads it)."""
    with DatasetWriter(str(art), "filter", "f" * 16, config={}, inputs={}, schema=SCHEMA) as out:
        out.write(
            [
                {
                    "doc_id": k,
                    "source": "hand",
                    "title_or_url": k,
                    "text": v,
                    "n_tokens": 0,
                    "lang": None,
                    "lang_score": None,
                }
                for k, v in docs.items()
            ]
        )
    return str(art), dataset_path(str(art), "filter", "f" * 16)


@pytest.fixture(scope="module")
def documents(tmp_path_factory):
    return filtered(tmp_path_factory.mktemp("decont"), DOCS)


def build(documents, tmp_path, mode="drop", rows=STSB_ROWS, tokenizer=None):
    art, docs = documents
    cfg = Config(evaluate={"data": write_stsb(tmp_path / "eval", rows)}, decontaminate={"mode": mode})
    inputs = {"documents": docs, **({"tokenizer": tokenizer} if tokenizer else {})}
    return run_stage(decontaminate.STAGE, decontaminate.config(cfg), inputs, art)


def test_pasted_stsb_test_sentences_drop_exactly_their_documents_and_the_manifest_names_stsb(documents, tmp_path):
    built = build(documents, tmp_path)
    kept = read_table(built).column("doc_id").to_pylist()
    assert set(kept) == set(DOCS) - DIRTY  # 12 of 13 words, and 9 of a 10-word sentence, are no match
    manifest = read_manifest(built)
    assert manifest["counts"] == {"contaminated": 3, "kept": len(DOCS) - 3}
    assert manifest["contaminated_by_task"] == {"STSB": 3}
    assert manifest["index"]["STSB"]["sentences"] == 6 and manifest["index"]["STSB"]["whole"] == 1
    console = Console(record=True, width=200)
    show(built, console=console)
    shown = console.export_text()
    assert '"contaminated_by_task": {' in shown and '"STSB": 3' in shown


def test_mask_cuts_the_matched_words_and_report_keeps_everything(documents, tmp_path, tokenizer):
    tok = tmp_path / "art" / "tokenizer" / ("t" * 16)
    tokenizer.save_pretrained(tok)
    masked = {r["doc_id"]: r for r in read_table(build(documents, tmp_path, "mask", tokenizer=str(tok))).to_pylist()}
    assert set(masked) == set(DOCS)
    assert masked["pasted-long"]["text"] == FILLER + "Then:   " + FILLER
    assert masked["pasted-short"]["text"] == FILLER + "  -- " + FILLER
    assert masked["pasted-test-2"]["text"] == "We read that   " + FILLER
    assert masked["pasted-long"]["n_tokens"] == len(
        tokenizer(masked["pasted-long"]["text"], add_special_tokens=False)["input_ids"]
    )
    assert all(masked[k]["text"] == DOCS[k] and masked[k]["n_tokens"] == 0 for k in set(DOCS) - DIRTY)
    reported = build(documents, tmp_path, "report")
    assert read_table(reported).column("text").to_pylist() == list(DOCS.values())
    assert read_manifest(reported)["contaminated_by_task"] == {"STSB": 3}


def _fingerprint(tmp_path, name: str, rows) -> str:
    cfg = Config(evaluate={"data": write_stsb(tmp_path / name, rows)})
    return decontaminate.STAGE.fingerprint(decontaminate.config(cfg), {"documents": "/a/filter/" + "f" * 16})


def test_the_fingerprint_follows_the_ngrams_not_the_files(tmp_path):
    base = _fingerprint(tmp_path, "a", STSB_ROWS)
    assert _fingerprint(tmp_path, "b", STSB_ROWS[::-1]) == base  # rows reordered, in another directory
    swapped = [(b, a, s) for a, b, s in STSB_ROWS]  # the same sentences, the scores changed too
    assert _fingerprint(tmp_path, "c", [(a, b, 5.0 - s) for a, b, s in swapped]) == base
    added = [*STSB_ROWS, ("Seven new words make a sentence here today.", "Short.", 2.0)]  # 8 words: indexed
    assert _fingerprint(tmp_path, "d", added) != base
    too_short = [*STSB_ROWS, ("Seven words are not enough here.", "x", 2.0)]  # below min_words: not indexed
    assert _fingerprint(tmp_path, "e", too_short) == base
    shutil.rmtree(tmp_path / "a")
    assert _fingerprint(tmp_path, "a", [*STSB_ROWS[:2], (SHORT.lower(), "Budget passed!", 1.0)]) == base


def test_every_task_kind_and_every_scored_split_is_read(tmp_path):
    data = tmp_path / "eval"
    write_stsb(data, STSB_ROWS)
    (data / "STSBenchmark" / "sts-dev.csv").write_text("g\tf\ty\t0\t2.0\tdev one\tdev two\n")
    (data / "mine").mkdir()
    (data / "mine" / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": i, "title": "T", "text": t}) + "\n" for i, t in (("d1", "passage"), ("d2", "other")))
    )
    (data / "mine" / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "query"}) + "\n")
    (data / "mine" / "qrels").mkdir()
    (data / "mine" / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    (data / "topics.clustering.jsonl").write_text(
        json.dumps({"sentences": ["c1", "c2", "c3"], "labels": [0, 0, 1]}) + "\n"
    )
    (data / "dups.pairclass.csv").write_text("sentence1,sentence2,label\np1,p2,1\np3,p4,0\n")
    (data / "ranks.reranking.jsonl").write_text(
        json.dumps({"query": "r", "positive": ["r+"], "negative": ["r-"]}) + "\n"
    )
    texts = eval_texts(str(data), True, [])
    assert texts["STSB"] == [LONG, OTHER, SHORT, *(b for _, b, _ in STSB_ROWS), "dev one", "dev two"]  # never train
    assert texts["mine"] == ["T passage", "T other", "query"] and texts["topics"] == ["c1", "c2", "c3"]
    assert texts["dups"] == ["p1", "p3", "p2", "p4"] and texts["ranks"] == ["r", "r+", "r-"]


def test_window_hashes_are_the_polynomial_computed_word_by_word():
    ids = np.random.default_rng(0).integers(1, 2**64 - 1, 40, dtype=np.uint64)
    windows = window_hashes(ids, range(1, 14))
    for length in range(1, 14):
        for i in range(len(ids) - length + 1):
            expected = sum(int(ids[i + j]) * int(POWERS[j]) for j in range(length)) % 2**64
            assert int(windows[length][i]) == expected, (length, i)
