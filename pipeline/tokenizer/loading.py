"""The tokenizer every stage after the tokenizer stage reads, and the helpers it is used with.

A saved tokenizer holds CLEAR's deletion token (DEL_TOKEN) as a special token of its own, so a deleted run is
one id that is neither the mask token nor an MLM target. It neither truncates nor pads, whatever a base
model's files said (published sentence-transformers models often truncate at 128 and pad), and every reader
switches both off again (`untruncated`), so documents are counted and cut by their true length.

transformers is imported only where a function needs it: the filter's worker processes import this
module for `encode_whole` alone.
"""

from __future__ import annotations

from tokenizers import AddedToken, Tokenizer

from pipeline.model.locate import hf_dir, resolve
from storage import local_copy

SPECIAL = {"bos_token": "<s>", "pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>", "mask_token": "<mask>"}
DEL_TOKEN = "<del>"


def untruncated(backend: Tokenizer) -> Tokenizer:
    """The fast tokenizer with truncation and padding off, whatever its files say."""
    backend.no_truncation()
    backend.no_padding()
    return backend


def encode_whole(backend: Tokenizer, texts: list[str]) -> list[list[int]]:
    """Every text's whole token ids, without special tokens, in the tokenizer's parallel Rust batch path."""
    encode = getattr(untruncated(backend), "encode_batch_fast", backend.encode_batch)
    return [e.ids for e in encode(texts, add_special_tokens=False)]


def base_path(base: str) -> str:
    """Where a base model's Hugging Face files are (pipeline.model.locate): a hub name's snapshot in the hub's
    cache, and in a sentence-transformers directory its Transformer module's folder."""
    return hf_dir(resolve(base))


def load_tokenizer(path: str):
    """Any fsspec URL: a tokenizer is read whole into memory, so a remote one's local copy can go."""
    from transformers import AutoTokenizer

    with local_copy(path) as local:
        tok = AutoTokenizer.from_pretrained(local)
    untruncated(tok.backend_tokenizer)
    return tok


def add_deletion_token(tok) -> None:
    """DEL_TOKEN as a special token; lstrip takes the space before it, so " <del>" is that one id."""
    tok.add_special_tokens({"additional_special_tokens": [
        AddedToken(DEL_TOKEN, lstrip=True, rstrip=False, normalized=False, special=True)]})
