"""Tiny FSMT and Marian translation models: random weights, real tokenizer files, saved like hub models.

No translation model can be downloaded here, so tests and benchmarks build their
own: an FSMT model (the transformers port of fairseq's WMT19 models) with a
joint BPE learned the way fairseq's fastBPE files look after conversion, and a
Marian model with sentencepiece models trained on a few hundred sentences.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
import sentencepiece as spm
import torch
from sacremoses import MosesPunctNormalizer, MosesTokenizer
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import (
    FSMTConfig,
    FSMTForConditionalGeneration,
    FSMTTokenizer,
    MarianConfig,
    MarianMTModel,
    MarianTokenizer,
)

# fairseq's dictionary order, which FSMTConfig's default special ids assume.
FSMT_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]
# At the usual 0.02 a random model writes the same words whatever the input, which
# would hide a mix-up of inputs and outputs; at 1.0 the output depends on the input.
INIT_STD = 1.0
EN = """the a an man woman dog cat child girl boy people group is are runs sits walks plays stands looks holds
wears jumps rides on in at with near under over street park water ball red blue green small large old young
bike car beach snow grass shirt hat table crowd building city""".split()
DE = """der die das ein eine mann frau hund katze kind mädchen junge leute gruppe ist sind läuft sitzt geht spielt
steht schaut hält trägt springt fährt auf im am mit neben unter über straße park wasser ball rot blau grün klein
groß alt jung fahrrad auto strand schnee gras hemd hut tisch menge gebäude stadt""".split()


def parallel_sentences(n: int = 400) -> tuple[list[str], list[str]]:
    """English and German sentences: Multi30k's validation set when the shared data is there, else made here."""
    shared = os.environ.get("CPIPE_SHARED_DATA")
    multi30k = Path(shared) / "parallel" / "multi30k" if shared else None
    if multi30k and (multi30k / "val.en").is_file():
        en = (multi30k / "val.en").read_text(encoding="utf-8").splitlines()[:n]
        de = (multi30k / "val.de").read_text(encoding="utf-8").splitlines()[:n]
        return en, de
    rng = np.random.default_rng(0)
    lengths = rng.integers(4, 25, size=n)
    make = lambda words, k: " ".join(rng.choice(words, size=k)).capitalize() + "."  # noqa: E731
    return [make(EN, k) for k in lengths], [make(DE, k) for k in lengths]


def _moses(texts: list[str], lang: str) -> list[str]:
    # The same normalisation and escaping FSMTTokenizer applies before BPE.
    norm, tok = MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang)
    return [" ".join(tok.tokenize(norm.normalize(t), aggressive_dash_splits=True, escape=True)) for t in texts]


def build_fsmt(
    path: Path,
    src_texts: list[str],
    tgt_texts: list[str],
    langs: tuple[str, str] = ("en", "de"),
    bpe_vocab: int = 800,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    **config,
) -> Path:
    """An FSMT model directory; `config` overrides the tiny FSMTConfig (d_model, layers, vocab sizes...)."""
    # A joint BPE whose word-final pieces end in </w>, as in converted fairseq models.
    bpe = Tokenizer(models.BPE(unk_token="<unk>", end_of_word_suffix="</w>"))
    bpe.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    bpe.train_from_iterator(
        _moses(src_texts, langs[0]) + _moses(tgt_texts, langs[1]),
        trainers.BpeTrainer(
            vocab_size=bpe_vocab, special_tokens=FSMT_SPECIALS, end_of_word_suffix="</w>", show_progress=False
        ),
    )
    state = json.loads(bpe.to_str())["model"]
    path.mkdir(parents=True, exist_ok=True)
    for name in ("vocab-src.json", "vocab-tgt.json"):
        (path / name).write_text(json.dumps(state["vocab"], ensure_ascii=False), encoding="utf-8")
    (path / "merges.txt").write_text("".join(f"{a} {b}\n" for a, b in state["merges"]), encoding="utf-8")
    FSMTTokenizer(
        langs=list(langs),
        src_vocab_file=str(path / "vocab-src.json"),
        tgt_vocab_file=str(path / "vocab-tgt.json"),
        merges_file=str(path / "merges.txt"),
        model_max_length=config.get("max_position_embeddings", 64),
    ).save_pretrained(path)
    n = len(state["vocab"])
    settings = dict(
        langs=list(langs),
        src_vocab_size=n,
        tgt_vocab_size=n,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        max_position_embeddings=64,
        dropout=0.0,
        init_std=INIT_STD,
    )
    settings.update(config)
    torch.manual_seed(seed)
    FSMTForConditionalGeneration(FSMTConfig(**settings)).to(dtype).save_pretrained(path)
    return path


def _sentencepiece(texts: list[str], vocab_size: int) -> bytes:
    proto = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=proto,
        vocab_size=vocab_size,
        hard_vocab_limit=False,
        character_coverage=1.0,
        minloglevel=2,
    )
    return proto.getvalue()


def build_marian(
    path: Path,
    src_texts: list[str],
    tgt_texts: list[str],
    langs: tuple[str, str] = ("en", "de"),
    spm_vocab: int = 300,
    seed: int = 0,
    **config,
) -> Path:
    """A Marian model directory laid out like Helsinki-NLP/opus-mt-*: two .spm files and one shared vocab.json."""
    path.mkdir(parents=True, exist_ok=True)
    # OPUS-MT's convention: </s> is 0, <unk> 1, the pieces of both languages, then <pad> last.
    vocab = {"</s>": 0, "<unk>": 1}
    for name, texts in (("source.spm", src_texts), ("target.spm", tgt_texts)):
        proto = _sentencepiece(texts, spm_vocab)
        (path / name).write_bytes(proto)
        sp = spm.SentencePieceProcessor(model_proto=proto)
        for i in range(sp.get_piece_size()):
            if not (sp.is_control(i) or sp.is_unknown(i)):
                vocab.setdefault(sp.id_to_piece(i), len(vocab))
    vocab["<pad>"] = pad = len(vocab)
    (path / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    MarianTokenizer(
        str(path / "source.spm"),
        str(path / "target.spm"),
        str(path / "vocab.json"),
        source_lang=langs[0],
        target_lang=langs[1],
        model_max_length=config.get("max_position_embeddings", 64),
    ).save_pretrained(path)
    settings = dict(
        vocab_size=len(vocab),
        pad_token_id=pad,
        decoder_start_token_id=pad,
        eos_token_id=0,
        forced_eos_token_id=0,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        max_position_embeddings=64,
        dropout=0.0,
        init_std=INIT_STD,
    )
    settings.update(config)
    torch.manual_seed(seed)
    MarianMTModel(MarianConfig(**settings)).save_pretrained(path)
    return path
