"""The objective registry and the sentence objectives' pairs, on documents and a tokenizer made here."""

from __future__ import annotations

import pandas as pd
import pytest

from pipeline import augment, corpus, tokenizer
from pipeline.config import OBJECTIVES, AugmentConfig, CorpusConfig
from pipeline.objectives import OBJECTIVES as REGISTRY
from pipeline.segment import sentences
from pipeline.stage import run_stage
from pipeline.tokenizer import load_tokenizer
from storage import list_datasets, read_manifest, read_table
from tests.conftest import cpipe, write_corpus
from tests.translation_models import build_fsmt, parallel_sentences


def test_the_config_names_every_registered_objective():
    assert set(OBJECTIVES) == set(REGISTRY)
    for module in REGISTRY.values():
        assert set(module.SETTINGS) <= set(AugmentConfig.model_fields)
        assert set(module.INPUTS.values()) <= {"filter", "backtranslate"}


def test_each_objective_is_fingerprinted_on_its_own_settings_only():
    base = AugmentConfig().model_dump()
    longer = {**base, "max_length": 256}
    assert augment.stage_config(base, "declutr") != augment.stage_config(longer, "declutr")
    assert augment.stage_config(base, "simcse") == augment.stage_config(longer, "simcse")
    assert augment.stage_config(base, "cert") == augment.stage_config({**longer, "min_chars": 5}, "cert")


@pytest.fixture(scope="module")
def documents(tmp_path_factory):
    root = tmp_path_factory.mktemp("objectives")
    docs = write_corpus(root / "docs", n_docs=4, n_words=120)
    art = str(root / "artifacts")
    path = run_stage(corpus, corpus.stage_config(CorpusConfig(sources=[str(docs)]).model_dump()), {}, art)
    tok = run_stage(tokenizer, {"base": None, "vocab_size": 300, "min_frequency": 2, "max_length": 64},
                    {"corpus": path}, art)
    return path, tok, art


def test_simcse_pairs_a_sentence_with_itself_every_epoch(documents):
    docs, tok, art = documents
    config = augment.stage_config(AugmentConfig(epochs=3, min_chars=10, max_sentences=12).model_dump(), "simcse")
    path = run_stage(augment, config, {"documents": docs, "tokenizer": tok}, art)
    rows = read_table(path).to_pylist()
    assert len(rows) == 3 * 12
    for row in rows:
        assert row["objective"] == "simcse" and row["positive_text"] == [row["anchor_text"]]
        assert row["positive_ids"] == [row["anchor_ids"]] and len(row["anchor_ids"]) > 2
    texts = [s for t in read_table(docs).column("text").to_pylist() for s in sentences(t) if len(s) >= 10]
    assert {r["anchor_text"] for r in rows} == set(texts[:12])
    counts = read_manifest(path)["counts"]
    assert counts["over_max_sentences"] == len(texts) - 12
    orders = [[r["pair_id"].split("-", 1)[1] for r in rows if r["epoch"] == e] for e in range(3)]
    assert orders[0] != orders[1] and sorted(orders[0]) == sorted(orders[2])


def test_clear_pairs_are_two_augmented_views_of_one_sentence(documents):
    docs, tok, art = documents
    clear = {"word_share": 0.5}
    config = augment.stage_config(AugmentConfig(epochs=2, min_chars=10, clear=clear).model_dump(), "clear",
                                  "del-word+reorder")
    rows = read_table(run_stage(augment, config, {"documents": docs, "tokenizer": tok}, art)).to_pylist()
    mask = load_tokenizer(tok).mask_token
    originals = {s for t in read_table(docs).column("text").to_pylist() for s in sentences(t) if len(s) >= 10}
    assert len(rows) == 2 * len(originals)
    for row in rows:
        views = [row["anchor_text"], row["positive_text"][0]]
        assert all(mask in v for v in views)  # deleted runs became the mask token
        words = [w for v in views for w in v.split() if w != mask]
        assert words and all(w in " ".join(originals) for w in words)
    assert sum(r["anchor_text"] != r["positive_text"][0] for r in rows) > 0.8 * len(rows)  # views drawn apart


def test_clear_substitution_draws_synonyms_from_vectors_trained_on_the_corpus(documents):
    docs, tok, art = documents
    clear = {"subs_share": 1.0, "synonym_vectors": "corpus", "synonym_threshold": -1.0}
    config = augment.stage_config(AugmentConfig(epochs=1, min_chars=10, clear=clear).model_dump(), "clear", "subs")
    path = run_stage(augment, config, {"documents": docs, "tokenizer": tok}, art)
    rows = read_table(path).to_pylist()
    assert read_manifest(path)["counts"]["synonym_entries"] > 0
    changed = [r for r in rows if r["anchor_text"].split() != r["positive_text"][0].split()]
    assert len(changed) > len(rows) // 2
    for row in changed:  # substitution keeps the length and changes words only
        assert len(row["anchor_text"].split()) == len(row["positive_text"][0].split())


def test_one_run_per_objective_trains_and_ranks_on_one_leaderboard(tmp_path, tiny_config, tiny_corpus, tiny_sts):
    en, de = parallel_sentences(200)
    build_fsmt(tmp_path / "mt" / "forward", en, de)
    build_fsmt(tmp_path / "mt" / "backward", de, en, langs=("de", "en"), seed=1)
    runs = ("{declutr: {}, cert: {objective: cert}, simcse: {objective: simcse, pooling: cls, projection: mlp}, "
            "clear: {objective: clear, augmentation: del-word+reorder, projection: linear, memory_bank: 8}}")
    result = cpipe("run", "--config", str(tiny_config), "--corpus", str(tiny_corpus), "--eval-data", str(tiny_sts),
                   "--artifacts", str(tmp_path / "a"), "--set", f"runs={runs}",
                   "--set", f"backtranslate.forward_model={tmp_path}/mt/forward",
                   "--set", f"backtranslate.backward_model={tmp_path}/mt/backward",
                   "--set", "backtranslate.num_beams=1", "--set", "backtranslate.max_new_tokens=8",
                   "--set", "backtranslate.max_sentences=40", "--set", "augment.max_sentences=40",
                   "--set", "augment.min_chars=10")
    assert result.returncode == 0, result.stderr[-3000:]
    board = pd.read_csv(tmp_path / "a" / "leaderboard.csv")
    assert {"declutr", "cert", "simcse", "clear", "untrained"} <= set(board["model"])
    assert board.loc[board["model"] != "fasttext-bow", "STSB cosine"].notna().all()
    pairs = {read_table(d["path"]).column("objective")[0].as_py()
             for d in list_datasets(str(tmp_path / "a")) if d["stage"] == "augment"}
    assert pairs == {"declutr", "cert", "simcse", "clear"}
