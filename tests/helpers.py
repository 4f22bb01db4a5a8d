"""Helpers that several test modules (and conftest.py's fixtures) share: made-up data in real formats and tiny
models. Fixtures live in conftest.py; reference statistics in reference.py; translation models in
translation_models.py. torch and transformers are imported only where a function needs them."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import random
import tarfile
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import numpy as np

from tests.conftest import make_document

# Language identification: two languages' words and made-up sentences of them (test_langid, test_filter).

EN_WORDS = (
    "the house is small and the garden behind it was green when we walked there with our "
    "friends who said that they would come back tomorrow for dinner because weather looked nice"
).split()
DE_WORDS = (
    "das haus ist klein und der garten dahinter war grün als wir mit unseren freunden dort "
    "spazieren gingen die sagten dass sie morgen zum abendessen wiederkommen weil wetter schön aussah"
).split()


def sentence(rng: random.Random, words: list[str], n: int = 10) -> str:
    return " ".join(rng.choice(words) for _ in range(n))


# OpenWebText's release layout: urlsf_subsetNN.tar of xz tars of .txt files (test_openwebtext, the corpus stage).

# Always included, whatever the data: the real sample is single-line ASCII, and the
# reader must keep newlines and non-ASCII characters byte for byte.
UNICODE_DOC = "Zürich café — naïve façade.\n\nSecond paragraph, 東京.\n"


def txt_name(i: int, text: str) -> str:
    return f"{i:07d}-{hashlib.md5(text.encode()).hexdigest()}.txt"


def xz_tar(docs: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        for name, data in docs.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def write_subset(path, members: dict[str, bytes]):
    with tarfile.open(path, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(f"openwebtext/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


# An HTTP server's handler for files, resuming cut downloads (test_corpus_urls, test_public_defaults).


class FileHandler(BaseHTTPRequestHandler):
    """Serves server.files by path with `Range: bytes=N-`; the first request for each file is cut in half."""

    def do_GET(self) -> None:
        data = self.server.files.get(self.path)
        if data is None:
            return self.send_error(404)
        self.server.requests.append((self.path, self.headers.get("Range")))
        start = int(self.headers["Range"][len("bytes=") : -1]) if self.headers["Range"] else 0
        self.send_response(206 if start else 200)
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        first = sum(1 for path, _ in self.server.requests if path == self.path) == 1
        self.wfile.write(data[start : len(data) // 2 if first else len(data)])

    def log_message(self, *args) -> None:
        pass


# A tiny model in the init stage's export layout (test_embed, test_evaluate, test_model_card, test_st_equivalence).

MAX_LENGTH = 64


def tiny_tokenizer(model_max_length: int = MAX_LENGTH):
    """Trained as the tokenizer stage trains one: byte-level BPE with RoBERTa's specials and <s> ... </s>."""
    from tokenizers import ByteLevelBPETokenizer
    from tokenizers.processors import RobertaProcessing
    from transformers import PreTrainedTokenizerFast

    from pipeline.tokenizer.loading import SPECIAL

    rng = np.random.default_rng(0)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        [make_document(rng, 300) for _ in range(20)], vocab_size=300, special_tokens=list(SPECIAL.values())
    )
    bpe._tokenizer.post_processor = RobertaProcessing(
        ("</s>", bpe.token_to_id("</s>")), ("<s>", bpe.token_to_id("<s>"))
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer, cls_token="<s>", sep_token="</s>", model_max_length=model_max_length, **SPECIAL
    )


def tiny_model_config(**changes):
    """The tiny encoders' shape (pipeline.init.config.ModelConfig): one layer of 32, two heads, inputs of up to
    MAX_LENGTH tokens, drawn from seed 0; `changes` set other values."""
    from pipeline.init.config import ModelConfig

    return ModelConfig(
        **{
            "base": None,
            "hidden_size": 32,
            "num_layers": 1,
            "num_heads": 2,
            "intermediate_size": 64,
            "dropout": 0.0,
            "max_position_embeddings": MAX_LENGTH + 2,
            "seed": 0,
            **changes,
        }
    )


def tiny_model(out_dir: Path, pooling: str = "mean") -> Path:
    """An init-stage export (hf/ and sentence-transformers/) of a tiny RoBERTa built from scratch."""
    from pipeline.model.transformer import build_model, export

    tokenizer = tiny_tokenizer()
    model = build_model(tiny_model_config(), tokenizer)
    export(model, tokenizer, str(out_dir), pooling=pooling)
    return out_dir


def write_jsonl(path: Path, records: list[dict]) -> Path:
    text = "".join(json.dumps(r) + "\n" for r in records)
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def corpus_and_tokenizer(root: Path, n_docs: int, n_words: int) -> tuple[str, str, str]:
    """(corpus dataset, tokenizer dataset, artifacts) built by the real stages from made-up documents."""
    from pipeline.config import Config
    from pipeline.corpus import stage as corpus
    from pipeline.corpus.config import CorpusConfig
    from pipeline.stage import run_stage
    from pipeline.tokenizer import stage as tokenizer
    from tests.conftest import write_corpus

    docs = write_corpus(root / "docs", n_docs=n_docs, n_words=n_words)
    art = str(root / "artifacts")
    path = run_stage(corpus.STAGE, corpus.config(Config(corpus=CorpusConfig(sources=[str(docs)]))), {}, art)
    tok = run_stage(
        tokenizer.STAGE, {"base": None, "vocab_size": 300, "min_frequency": 2, "max_length": 64}, {"corpus": path}, art
    )
    return path, tok, art
