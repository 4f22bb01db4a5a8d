"""The backtranslate stage on tiny FSMT and Marian models built here: segments that map back to their
documents, a kill -9 mid-run that resumes instead of restarting, the Ray actor pool, and CERT pairs."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from pipeline.augment import stage as augment
from pipeline.augment.config import AugmentConfig
from pipeline.backtranslate import stage as backtranslate
from pipeline.backtranslate.config import BacktranslateConfig
from pipeline.config import Config
from pipeline.corpus import stage as corpus
from pipeline.corpus.config import CorpusConfig
from pipeline.corpus.segment import segments
from pipeline.filter import stage as filter
from pipeline.filter.config import FilterConfig
from pipeline.stage import run_stage
from pipeline.tokenizer import stage as tokenizer
from pipeline.tokenizer.loading import load_tokenizer
from pipeline.train.batching import collate, special_ids
from pipeline.train.config import TrainConfig
from storage import complete, read_manifest, read_table
from tests.conftest import cpipe
from tests.translation_models import build_fsmt, build_marian, parallel_sentences

PIVOTS = {"de": build_fsmt, "zh": build_marian}  # the default pivots, one model family each: both run in the one stage


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """Documents of real English sentences (Multi30k when the shared data is there), and en<->pivot models."""
    root = tmp_path_factory.mktemp("bt")
    en, de = parallel_sentences(300)
    for pivot, build in PIVOTS.items():
        build(root / "models" / pivot / "forward", en, de, langs=("en", pivot))
        build(root / "models" / pivot / "backward", de, en, langs=(pivot, "en"), seed=1)
    docs = root / "docs"
    docs.mkdir()
    for d in range(6):  # six documents of eight sentences, one paragraph per line
        lines = [" ".join(en[d * 8 + k] for k in range(i, i + 4)) for i in (0, 4)]
        (docs / f"doc{d}.txt").write_text("\n".join(lines), encoding="utf-8")
    art = str(root / "artifacts")
    documents = run_stage(corpus.STAGE, corpus.config(Config(corpus=CorpusConfig(sources=[str(docs)]))), {}, art)
    tok = run_stage(
        tokenizer.STAGE,
        {"base": None, "vocab_size": 300, "min_frequency": 2, "max_length": 64},
        {"corpus": documents},
        art,
    )
    kept = run_stage(
        filter.STAGE,
        {**FilterConfig(min_tokens=10).model_dump(), "runtime": {}},
        {"corpus": documents, "tokenizer": tok},
        art,
    )
    config = BacktranslateConfig(
        pivots=list(PIVOTS),
        forward_model=f"{root}/models/{{pivot}}/forward",
        backward_model=f"{root}/models/{{pivot}}/backward",
        num_beams=1,
        max_new_tokens=8,
        batch_size=8,
        chunk_size=5,
        min_chars=10,
    ).model_dump()
    return {"root": root, "art": art, "documents": kept, "tokenizer": tok, "config": config}


def bt_config(setup, **changes) -> dict:
    return backtranslate.config(Config(backtranslate=BacktranslateConfig(**{**setup["config"], **changes})))


@pytest.fixture(scope="module")
def translated(setup, one_torch_thread):
    return run_stage(backtranslate.STAGE, bt_config(setup), {"documents": setup["documents"]}, setup["art"])


def test_every_sentence_goes_through_every_pivot_and_maps_back_to_its_document(setup, translated):
    table = read_table(translated)
    docs = dict(zip(*(read_table(setup["documents"]).column(c).to_pylist() for c in ("doc_id", "text"))))
    assert set(table.column("pivot_lang").to_pylist()) == set(PIVOTS)
    assert set(table.column("backend").to_pylist()) == {"hf"}
    rows = table.to_pylist()
    n_sentences = read_manifest(translated)["counts"]["sentences"]
    expected = sum(1 for text in docs.values() for s, e in segments(text) if e - s >= setup["config"]["min_chars"])
    assert len(rows) == n_sentences * len(PIVOTS) and n_sentences == expected > 6 * 2
    for row in rows:
        assert " ".join(docs[row["doc_id"]][row["start"] : row["end"]].split()) == row["text"]
        assert row["segment_id"].startswith(row["doc_id"]) and isinstance(row["bt_text"], str)
    # joining a document's segments by id gives back its text, up to whitespace
    by_doc: dict[str, list] = {}
    for row in rows:
        if row["pivot_lang"] == "de":
            by_doc.setdefault(row["doc_id"], []).append((row["segment_id"], row["text"]))
    for doc, pieces in by_doc.items():
        assert " ".join(t for _, t in sorted(pieces)) == " ".join(docs[doc].split())
    assert sum(1 for r in rows if r["bt_text"].strip()) > len(rows) // 2


@pytest.mark.slow  # a Python process, killed mid-run
def test_a_killed_run_resumes_from_its_finished_chunks(setup, translated):
    config = bt_config(setup, seed=7, do_sample=True, top_k=20)  # sampling: resumed chunks must draw the same
    inputs = {"documents": setup["documents"]}
    killer = textwrap.dedent(f"""
        import os, signal, torch
        from pipeline.backtranslate import stage as backtranslate
        from pipeline.stage import run_stage
        torch.set_num_threads(1)
        done, original = [], backtranslate.BackTranslator.translate_chunk
        def translate_then_die(self, chunk):
            if len(done) == 3:
                os.kill(os.getpid(), signal.SIGKILL)
            done.append(original(self, chunk))
            return done[-1]
        backtranslate.BackTranslator.translate_chunk = translate_then_die
        run_stage(backtranslate.STAGE, {config!r}, {inputs!r}, {setup["art"]!r})
    """)
    killed = subprocess.run([sys.executable, "-c", killer], capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr
    assert not complete(backtranslate.STAGE.path(config, inputs, setup["art"]))

    resumed = run_stage(backtranslate.STAGE, config, inputs, setup["art"])
    assert read_manifest(resumed)["counts"]["resumed_chunks"] == 3
    fresh = run_stage(backtranslate.STAGE, config, inputs, str(setup["root"] / "fresh"))
    assert read_manifest(fresh)["counts"]["resumed_chunks"] == 0
    assert read_table(resumed).equals(read_table(fresh))
    assert not list((setup["root"] / "artifacts" / "_work").iterdir())  # work files go once the dataset is done


@pytest.mark.ray
def test_ray_actor_pool_writes_what_one_process_writes(setup, translated, local_ray):
    pooled = run_stage(  # the actor count is no part of the fingerprint: other artifacts force a real run
        backtranslate.STAGE, bt_config(setup, workers=2), {"documents": setup["documents"]}, str(setup["root"] / "pool")
    )
    assert read_table(pooled).equals(read_table(translated))


@pytest.mark.slow  # cpipe inspect, a process
def test_cert_pairs_are_two_back_translations_through_two_different_pivots(setup, translated):
    config = augment.config(Config(augment=AugmentConfig(epochs=2, seed=3)), TrainConfig(objective="cert"))
    assert "min_length" not in config  # DeCLUTR's span settings do not touch CERT's pairs
    pairs = run_stage(
        augment.STAGE, config, {"backtranslations": translated, "tokenizer": setup["tokenizer"]}, setup["art"]
    )
    table = read_table(pairs)
    by_pivot: dict[str, dict[str, str]] = {}  # segment -> pivot -> back-translation
    for row in read_table(translated).to_pylist():
        by_pivot.setdefault(row["segment_id"], {})[row["pivot_lang"]] = row["bt_text"]
    usable = {s for s, bt in by_pivot.items() if len({t for t in bt.values() if t.strip()}) == 2}
    assert read_manifest(pairs)["counts"].get("too_few_translations", 0) == len(by_pivot) - len(usable)
    rows = table.to_pylist()
    assert len(rows) == 2 * len(usable) > 0 and {r["objective"] for r in rows} == {"cert"}
    orders = set()
    for row in rows:
        segment = row["pair_id"].split("-", 1)[1]
        a, b = row["sources"]
        assert a != b and {a, b} <= set(PIVOTS)
        assert row["anchor_text"] == by_pivot[segment][a] and row["positive_text"] == [by_pivot[segment][b]]
        assert row["anchor_text"] != row["positive_text"][0] and row["original_ids"] is None
        orders.add((a, b))
    assert orders == {("de", "zh"), ("zh", "de")}  # which pivot is the anchor is drawn too
    epochs = [[r["pair_id"].split("-", 1)[1] for r in rows if r["epoch"] == e] for e in (0, 1)]
    assert sorted(epochs[0]) == sorted(epochs[1]) and epochs[0] != epochs[1]  # reshuffled each epoch
    # the train stage's collate takes them as they are: one positive per anchor
    tok = load_tokenizer(setup["tokenizer"])
    batch = collate(table.slice(0, 4), special_ids(tok), 32, with_positives=True)
    assert batch["num_positives"] == 1 and batch["positives"][0].shape[0] == 4
    shown = cpipe("inspect", pairs, "--rows", "2")
    assert shown.returncode == 0 and "sources" in shown.stdout, shown.stdout + shown.stderr


@pytest.mark.slow  # cpipe run, a process
def test_a_cert_run_needs_two_pivots(tmp_path, tiny_config, tiny_corpus):
    result = cpipe(
        "run",
        "--config",
        str(tiny_config),
        "--corpus",
        str(tiny_corpus),
        "--artifacts",
        str(tmp_path / "a"),
        "--set",
        "runs={cert: {objective: cert}}",
        "--set",
        "backtranslate.pivots=[de]",
    )
    assert result.returncode == 2 and "backtranslate.pivots needs at least two" in result.stderr
    assert not (tmp_path / "a").exists()


@pytest.mark.slow  # cpipe run, a process
def test_an_unavailable_fairseq_backend_fails_before_any_work(tmp_path, tiny_config, tiny_corpus):
    result = cpipe(
        "run",
        "--config",
        str(tiny_config),
        "--corpus",
        str(tiny_corpus),
        "--artifacts",
        str(tmp_path / "a"),
        "--until",
        "augment",
        "--set",
        "runs={cert: {objective: cert}}",
        "--set",
        "backtranslate.backend=fairseq",
        "--set",
        "backtranslate.forward_model=transformer.wmt19.{source}-{pivot}",
        "--set",
        "backtranslate.backward_model=transformer.wmt19.{pivot}-{source}",
    )
    assert result.returncode == 2
    assert "backend 'hf' with model facebook/wmt19-en-de" in result.stderr
    assert not (tmp_path / "a").exists()
