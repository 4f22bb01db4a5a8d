"""Any base model (issue #14): tiny BERT (WordPiece, [CLS]/[SEP]) and RoBERTa (byte-level BPE, <s>/</s>)
architectures and a sentence-transformers directory, all made here, whose tokenizer.json truncates at 16
tokens and pads to 16 as published models ship. Documents of thousands of tokens must be counted and cut
whole, and training must stay inside the model's position table."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from pipeline.augment import stage as augment
from pipeline.augment.config import AugmentConfig
from pipeline.config import Config
from pipeline.corpus import stage as corpus
from pipeline.corpus.config import CorpusConfig
from pipeline.filter import stage as filter
from pipeline.filter.config import FilterConfig
from pipeline.init import stage as init
from pipeline.init.config import ModelConfig
from pipeline.model.transformer import HF_DIR, ST_DIR, SpanEncoder, build_model, export
from pipeline.stage import run_stage
from pipeline.tokenizer import stage as tokenizer
from pipeline.tokenizer.loading import load_tokenizer
from pipeline.train.batching import collate, special_ids
from pipeline.train.config import TrainConfig
from pipeline.train.loop import WorkerConfig
from storage import read_manifest, read_table
from tests.conftest import WORDS, make_document
from tests.test_precision import run_train_loop

CUT = 16  # what the bases' tokenizer.json truncate and pad to
N_WORDS = 2500  # words per document: with the full stops, ~2,800 tokens each
MIN_TOKENS = 2048
SPANS = {"num_anchors": 2, "num_positives": 2, "min_length": 24, "max_length": 60}
FRESH_HEAD = "has no masked-LM head"


@pytest.fixture(scope="module")
def documents(tmp_path_factory) -> tuple[Path, list[str]]:
    rng = np.random.default_rng(3)
    texts = [make_document(rng, N_WORDS) for _ in range(4)] + [make_document(rng, 300)]  # the last is too short
    root = tmp_path_factory.mktemp("base-docs") / "docs"
    root.mkdir()
    for i, text in enumerate(texts):
        (root / f"doc{i}.txt").write_text(text, encoding="utf-8")
    return root, texts


def truncating(tok: Tokenizer, pad: str) -> Tokenizer:
    """A copy of `tok` that truncates at CUT tokens and pads to CUT, as the bases' files will say."""
    cut = Tokenizer.from_str(tok.to_str())
    cut.enable_truncation(CUT)
    cut.enable_padding(length=CUT, pad_id=tok.token_to_id(pad), pad_token=pad)
    return cut


def wordpiece(texts: list[str]) -> Tokenizer:
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(
        texts, trainers.WordPieceTrainer(vocab_size=400, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    )
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))],
    )
    return tok


def byte_bpe(texts: list[str]) -> Tokenizer:
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(texts, vocab_size=400, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    tok = bpe._tokenizer
    tok.post_processor = processors.RobertaProcessing(
        ("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>"))
    )
    return tok


def tiny(config_class, vocab_size: int, **kwargs):
    return config_class(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        **kwargs,
    )


@pytest.fixture(scope="module")
def bases(tmp_path_factory, documents) -> dict:
    """name -> (base directory, the base's tokenizer with truncation and padding off, for expectations)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers import models as st_models
    from transformers import (
        BertConfig,
        BertForMaskedLM,
        BertModel,
        BertTokenizerFast,
        RobertaConfig,
        RobertaForMaskedLM,
        RobertaTokenizerFast,
    )

    root = tmp_path_factory.mktemp("bases")
    texts = documents[1]
    torch.manual_seed(0)
    wp, bpe = wordpiece(texts), byte_bpe(texts)
    bert_tok = BertTokenizerFast(tokenizer_object=truncating(wp, "[PAD]"), model_max_length=128)
    bert_config = tiny(BertConfig, wp.get_vocab_size(), max_position_embeddings=64)
    BertForMaskedLM(bert_config).save_pretrained(root / "bert")
    bert_tok.save_pretrained(root / "bert")
    roberta_tok = RobertaTokenizerFast(tokenizer_object=truncating(bpe, "<pad>"), model_max_length=128)
    RobertaForMaskedLM(
        tiny(
            RobertaConfig,
            bpe.get_vocab_size(),
            max_position_embeddings=66,
            pad_token_id=1,
            bos_token_id=0,
            eos_token_id=2,
            type_vocab_size=1,
        )
    ).save_pretrained(root / "roberta")
    roberta_tok.save_pretrained(root / "roberta")
    # A sentence-transformers model: a bare BertModel (no MLM head) as its Transformer module, in the root.
    BertModel(bert_config).save_pretrained(root / "bare")
    bert_tok.save_pretrained(root / "bare")
    word = st_models.Transformer(str(root / "bare"), max_seq_length=CUT)
    SentenceTransformer(modules=[word, st_models.Pooling(32)], device="cpu").save(str(root / "st"))
    # The older layout: the Transformer module in its own folder, named in modules.json.
    old = root / "st-folder"
    (old / "0_Transformer").mkdir(parents=True)
    shutil.copytree(root / "st" / "1_Pooling", old / "1_Pooling")
    for f in (root / "st").iterdir():
        if f.is_file() and f.name != "modules.json":
            shutil.copy(f, old / ("0_Transformer" if f.name != "config_sentence_transformers.json" else "") / f.name)
    modules = json.loads((root / "st" / "modules.json").read_text())
    modules[0]["path"] = "0_Transformer"
    (old / "modules.json").write_text(json.dumps(modules))
    assert json.loads((root / "bert" / "tokenizer.json").read_text())["truncation"]["max_length"] == CUT
    return {
        "bert": (root / "bert", wp),
        "roberta": (root / "roberta", bpe),
        "st": (root / "st", wp),
        "st-folder": (old, wp),
    }


@pytest.fixture(scope="module")
def corpus_path(tmp_path_factory, documents) -> tuple[str, str]:
    art = str(tmp_path_factory.mktemp("base-artifacts"))
    return run_stage(
        corpus.STAGE, corpus.config(Config(corpus=CorpusConfig(sources=[str(documents[0])]))), {}, art
    ), art


def stages(base: Path, corpus_path) -> dict:
    """tokenizer, filter and DeCLUTR's augment stages from `base`."""
    docs, art = corpus_path
    tok = run_stage(
        tokenizer.STAGE,
        {"base": str(base), "vocab_size": 400, "min_frequency": 2, "max_length": 128},
        {"corpus": docs},
        art,
    )
    kept = run_stage(
        filter.STAGE,
        {**FilterConfig(min_tokens=MIN_TOKENS).model_dump(), "runtime": {}},
        {"corpus": docs, "tokenizer": tok},
        art,
    )
    cfg, run = Config(augment=AugmentConfig(**SPANS)), TrainConfig(objective="declutr")
    pairs = run_stage(
        augment.STAGE,
        augment.config(cfg, run),
        augment.inputs(cfg, {"decontaminate": kept, "tokenizer": tok}, run),
        art,
    )
    return {"tokenizer": tok, "filter": kept, "augment": pairs, "artifacts": art}


def whole_ids(tok: Tokenizer, text: str) -> list[int]:
    assert tok.truncation is None and tok.padding is None
    return tok.encode(text, add_special_tokens=False).ids


@pytest.mark.parametrize("name", ["bert", "roberta"])
def test_the_filter_counts_and_declutr_cuts_whole_documents(name, bases, corpus_path, documents):
    base, plain = bases[name]
    built = stages(base, corpus_path)
    saved = json.loads(Path(built["tokenizer"], "tokenizer.json").read_text())
    assert saved["truncation"] is None and saved["padding"] is None
    texts = documents[1]
    kept = read_table(built["filter"])
    expected = {text: len(whole_ids(plain, text)) for text in texts}
    assert kept.num_rows == 4 and read_manifest(built["filter"])["counts"]["too_short"] == 1
    for text, n_tokens in zip(kept.column("text").to_pylist(), kept.column("n_tokens").to_pylist()):
        assert n_tokens == expected[text] > MIN_TOKENS
    pairs = read_table(built["augment"]).to_pylist()
    by_doc = dict(zip(kept.column("doc_id").to_pylist(), kept.column("text").to_pylist()))
    lengths = []
    for row in pairs:
        ids = whole_ids(plain, " ".join(by_doc[row["doc_id"]].split()))
        spans = [(row["anchor_start"], row["anchor_ids"])] + list(zip(row["positive_starts"], row["positive_ids"]))
        for start, span in spans:
            assert span == ids[start : start + len(span)]  # a piece of the whole document, not of its first 16
            lengths.append(len(span))
    assert SPANS["min_length"] <= min(lengths) and max(lengths) <= SPANS["max_length"]
    assert sum(n > CUT for n in lengths) > len(lengths) / 2


def test_wordpiece_counts_are_the_words_and_full_stops(bases, documents):
    """A hand count for the BERT base: every made-up word is one WordPiece and so is each full stop."""
    _, plain = bases["bert"]
    assert all(len(whole_ids(plain, w)) == 1 for w in WORDS)
    from pipeline.filter.docstats import count_tokens
    from pipeline.filter.docstats import tokenizer as read_tokenizer

    texts = documents[1]
    counted = count_tokens(read_tokenizer(str(bases["bert"][0])), texts)  # the base's own, truncating file
    assert counted == [len(t.split()) + t.count(".") for t in texts]


def train_and_export(built: dict, base: Path, tmp_path, max_length: int) -> tuple[Path, list[dict]]:
    init_dir = run_stage(
        init.STAGE,
        ModelConfig(base=str(base), seed=5).model_dump(),
        {"tokenizer": built["tokenizer"]},
        built["artifacts"],
    )
    hf = f"{init_dir}/{HF_DIR}"
    tok = load_tokenizer(hf)
    cfg = TrainConfig(
        objective="declutr", batch_size=4, lr=1e-3, max_length=max_length, checkpoint_every=2, torch_threads=1
    )
    config = WorkerConfig(train=cfg, init=hf, total_steps=2, special=special_ids(tok, max_length))
    reports = run_train_loop(config, read_table(built["augment"]))
    encoder = SpanEncoder(build_model(ModelConfig(base=hf), tok), cfg.pooling, cfg.projection)
    encoder.load_state_dict(reports[-1]["model"])
    export(encoder.mlm_model, tok, str(tmp_path), cfg.pooling)
    return tmp_path, reports[-1]["metrics"]


def test_training_from_a_bert_base_cuts_spans_to_its_positions(bases, corpus_path, tmp_path, caplog):
    from sentence_transformers import SentenceTransformer

    base, _ = bases["bert"]
    built = stages(base, corpus_path)
    with caplog.at_level(logging.INFO, logger="cpipe"):
        out, metrics = train_and_export(built, base, tmp_path, max_length=500)
    assert [m["step"] for m in metrics] == [1, 2] and all(np.isfinite(m["loss"]) for m in metrics)
    assert any("beyond the model's 64 positions" in r.getMessage() for r in caplog.records)
    assert not any(FRESH_HEAD in r.getMessage() for r in caplog.records)  # this base has its MLM head
    st = SentenceTransformer(str(out / ST_DIR), device="cpu")
    assert st.max_seq_length == 64 and st.encode(["kabar lodos mifen"]).shape == (1, 32)


def init_stage(base, corpus_path):
    """The init stage's export of `base` after the data stages, and its tokenizer as training loads it."""
    built = stages(base, corpus_path)
    init_dir = run_stage(
        init.STAGE, ModelConfig(base=str(base)).model_dump(), {"tokenizer": built["tokenizer"]}, built["artifacts"]
    )
    return init_dir, load_tokenizer(f"{init_dir}/{HF_DIR}")


def test_bert_spans_are_cls_sep_wrapped_segment_zero_and_cut_to_the_position_table(bases, corpus_path):
    base, _ = bases["bert"]
    init_dir, tok = init_stage(base, corpus_path)
    special = special_ids(tok, 1000)
    assert (special["bos"], special["eos"], special["pad"]) == tuple(
        tok.convert_tokens_to_ids(t) for t in ("[CLS]", "[SEP]", "[PAD]")
    )
    long_span = {"anchor_ids": [list(range(5, 300))], "positive_ids": [[list(range(5, 40))]]}
    batch = collate(pa.Table.from_pydict(long_span), special, 1000, True)
    ids, mask = batch["anchors"]
    assert ids.shape == (1, 64) and ids[0, 0] == special["bos"] and ids[0, -1] == special["eos"]
    assert ids[0, 1:-1].tolist() == list(range(5, 67))
    model = build_model(ModelConfig(base=f"{init_dir}/{HF_DIR}"), tok).eval()
    assert model.config.type_vocab_size == 2
    with torch.no_grad():  # no token_type_ids means segment A everywhere, as for a single sentence
        implicit = model.base_model(input_ids=ids, attention_mask=mask).last_hidden_state
        explicit = model.base_model(
            input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids)
        ).last_hidden_state
    torch.testing.assert_close(implicit, explicit)


def test_roberta_position_limit_leaves_the_padding_offset(bases, corpus_path):
    from pipeline.model.transformer import position_limit

    base, _ = bases["roberta"]
    init_dir, tok = init_stage(base, corpus_path)
    model = build_model(ModelConfig(base=f"{init_dir}/{HF_DIR}"), tok).eval()
    assert position_limit(model) == 64 == tok.model_max_length  # 66 positions, two before the first token
    special = special_ids(tok, 512)
    assert (special["bos"], special["eos"]) == (tok.convert_tokens_to_ids("<s>"), tok.convert_tokens_to_ids("</s>"))
    batch = collate(pa.Table.from_pydict({"anchor_ids": [list(range(5, 300))]}), special, 512, False)
    with torch.no_grad():
        pooled, _ = SpanEncoder(model)(*batch["anchors"])
    assert batch["anchors"][0].shape == (1, 64) and torch.isfinite(pooled).all()


def test_a_sentence_transformers_base_trains_a_fresh_mlm_head_and_says_so_once(
    bases, corpus_path, tmp_path, caplog, capfd
):
    from transformers.utils import logging as hf_logging

    base, _ = bases["st"]
    built = stages(base, corpus_path)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_warning()  # as a fresh process has it: the library's own report must not show
    try:
        with caplog.at_level(logging.INFO, logger="cpipe"):
            _, metrics = train_and_export(built, base, tmp_path, max_length=64)
    finally:
        hf_logging.set_verbosity(verbosity)
    assert [m["step"] for m in metrics] == [1, 2] and all(m["mlm_loss"] > 0 for m in metrics)
    assert sum(FRESH_HEAD in r.getMessage() for r in caplog.records) == 1
    captured = capfd.readouterr()
    assert "LOAD REPORT" not in captured.err + captured.out and "newly initialized" not in captured.err


@pytest.mark.parametrize("name", ["st", "st-folder"])
def test_a_sentence_transformers_directory_in_either_layout_is_a_base(name, bases, corpus_path):
    from pipeline.model.transformer import load_base

    base, _ = bases[name]
    built = stages(base, corpus_path)
    assert read_table(built["filter"]).num_rows == 4
    heads = []
    for _ in range(2):  # the fresh head comes from the seed
        torch.manual_seed(7)
        heads.append(load_base(str(base)).cls.predictions.transform.dense.weight.detach().clone())
    torch.testing.assert_close(heads[0], heads[1], rtol=0, atol=0)
    from transformers import BertModel

    loaded = load_base(str(base)).bert.embeddings.word_embeddings.weight
    torch.testing.assert_close(
        loaded,
        BertModel.from_pretrained(bases["bert"][0].parent / "bare").embeddings.word_embeddings.weight,
        rtol=0,
        atol=0,
    )  # the encoder is the base's


class Rows:
    """What an objective's pairs() writes to: rows, counts, extras."""

    def __init__(self):
        self.rows, self.counts, self.extra = [], {}, {}

    def write(self, rows):
        self.rows.extend(rows)

    def count(self, name, n=1):
        self.counts[name] = self.counts.get(name, 0) + n


def test_sentence_objectives_encode_whole_sentences_whatever_the_tokenizer_says(bases, corpus_path):
    """SimCSE and CLEAR handed a tokenizer that still truncates and pads (one not read by load_tokenizer)."""
    from transformers import AutoTokenizer

    from pipeline.objectives import clear, simcse

    base, plain = bases["bert"]
    built = stages(base, corpus_path)
    tok = AutoTokenizer.from_pretrained(built["tokenizer"])
    tok.backend_tokenizer.enable_truncation(CUT)
    tok.backend_tokenizer.enable_padding(length=CUT, pad_id=tok.pad_token_id, pad_token="[PAD]")
    for objective in (simcse, clear):
        run = TrainConfig(objective=objective.NAME, augmentation="del-span+reorder" if objective is clear else None)
        settings = augment.STAGE.settings_of(augment.config(Config(augment=AugmentConfig(max_sentences=30)), run))
        out = Rows()
        objective.pairs(settings, settings.own, {"documents": built["filter"]}, tok, out)
        text = "original_text" if objective is clear else "anchor_text"
        ids = "original_ids" if objective is clear else "anchor_ids"
        assert out.rows and all(r[ids] == whole_ids(plain, r[text]) for r in out.rows), objective.NAME
        assert tok.pad_token_id not in {i for r in out.rows for i in r[ids]}


def test_tsdae_from_a_sentence_transformers_base_exports_an_encoder_sentence_transformers_loads(
    bases, corpus_path, tmp_path
):
    """TSDAE's pairs, the training loop and the train stage's export, from a sentence-transformers directory
    (a bare BertModel: the decoder takes the encoder's layers and a fresh MLM head as its LM head)."""
    from safetensors import safe_open
    from sentence_transformers import SentenceTransformer

    from pipeline.train.step import make_encoder

    base, _ = bases["st"]
    built = stages(base, corpus_path)
    cfg, run = Config(augment=AugmentConfig(epochs=1, max_sentences=8)), TrainConfig(objective="tsdae")
    pairs = run_stage(
        augment.STAGE,
        augment.config(cfg, run),
        augment.inputs(cfg, {"decontaminate": built["filter"], "tokenizer": built["tokenizer"]}, run),
        built["artifacts"],
    )
    init_dir = run_stage(
        init.STAGE,
        ModelConfig(base=str(base), seed=5).model_dump(),
        {"tokenizer": built["tokenizer"]},
        built["artifacts"],
    )
    hf = f"{init_dir}/{HF_DIR}"
    tok = load_tokenizer(hf)
    train = TrainConfig(objective="tsdae", batch_size=4, lr=1e-3, max_length=64, checkpoint_every=2, torch_threads=1)
    reports = run_train_loop(
        WorkerConfig(train=train, init=hf, total_steps=2, special=special_ids(tok, 64)), read_table(pairs)
    )
    assert [m["step"] for m in reports[-1]["metrics"]] == [1, 2]
    assert all(np.isfinite(m["reconstruction_loss"]) and m["reconstruction_loss"] > 0 for m in reports[-1]["metrics"])
    encoder = make_encoder(build_model(ModelConfig(base=hf), tok), train)  # as the train stage exports
    encoder.load_state_dict(reports[-1]["model"])
    export(encoder.mlm_model, tok, str(tmp_path), train.pooling)
    with safe_open(str(tmp_path / HF_DIR / "model.safetensors"), "pt") as f:
        assert not any("crossattention" in name for name in f.keys())
    st = SentenceTransformer(str(tmp_path / ST_DIR), device="cpu")
    assert st[1].get_config_dict()["pooling_mode"] == "cls"
    sentence = ["kabar lodos mifen"]
    ids = tok(sentence, return_tensors="pt")
    with torch.no_grad():
        cls = encoder.eval().mlm_model.base_model(**ids).last_hidden_state[:, 0]
    torch.testing.assert_close(torch.as_tensor(st.encode(sentence)), cls, rtol=1e-4, atol=1e-5)
