"""The tokenizer every stage after the tokenizer stage reads, and the helpers it is used with.

A saved tokenizer holds CLEAR's deletion token (DEL_TOKEN) as a special token of its own, so a deleted run is
one id that is neither the mask token nor an MLM target. It neither truncates nor pads, whatever a base
model's files said (published sentence-transformers models often truncate at 128 and pad), and every reader
switches both off again (`untruncated`), so documents are counted and cut by their true length.

transformers and tokenizers are imported only where a function needs them: the filter's worker processes import
this module for `encoded_pieces` alone, and the objectives' modules, which the config imports, import it at their
top.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from pipeline.locate import hf_dir, resolve
from storage import local_copy

if TYPE_CHECKING:
    from tokenizers import Tokenizer

SPECIAL = {"bos_token": "<s>", "pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>", "mask_token": "<mask>"}
DEL_TOKEN = "<del>"


def untruncated(backend: Tokenizer) -> Tokenizer:
    """The fast tokenizer with truncation and padding off, whatever its files say."""
    backend.no_truncation()
    backend.no_padding()
    return backend


# The most characters the tokenizer is given at once. Its Encodings cost about 100 bytes a token (ids, offsets,
# token strings) and live until the call returns: a 30 MB document encoded whole peaked at about 3 GB. Longer
# texts are encoded in pieces cut before a space, where every pre-tokenizer (byte-level, Metaspace, BERT's)
# splits anyway, so the pieces' ids joined are the whole text's.
PIECE_CHARS = 1 << 20


def pieces(text: str, size: int) -> list[tuple[int, int]]:
    """(start, end) of consecutive pieces of `text`, each at most `size` characters, each cut before a space
    followed by a word (the space a byte-level or Metaspace pre-token starts with); where `size` characters hold
    no such space, the cut falls at `size` (a word that long is split in two)."""
    bounds, start = [], 0
    while len(text) - start > size:
        cut = text.rfind(" ", start + 1, start + size)
        while cut > start and text[cut + 1].isspace():
            cut = text.rfind(" ", start + 1, cut)
        cut = cut if cut > start else start + size
        bounds.append((start, cut))
        start = cut
    bounds.append((start, len(text)))
    return bounds


def collapse_whitespace(text: str) -> str:
    """ " ".join(text.split()), a piece at a time: the list of a long document's words is never built whole."""
    parts: list[str] = []
    for start, end in pieces(text, PIECE_CHARS):
        if not (part := " ".join(text[start:end].split())):
            continue
        # A piece cut inside a word (no space near) continues that word; one cut at whitespace starts a new one.
        if parts and (text[start].isspace() or text[start - 1].isspace()):
            parts.append(" ")
        parts.append(part)
    return "".join(parts)


def encoded_pieces(backend: Tokenizer, texts: list[str]) -> Iterator[tuple[int, list[int]]]:
    """(index of the text, ids of its next piece), in order, without special tokens: texts are encoded in the
    tokenizer's parallel Rust batch path, about PIECE_CHARS characters a call."""
    encode = getattr(untruncated(backend), "encode_batch_fast", backend.encode_batch)
    batch: list[str] = []
    owners: list[int] = []
    chars = 0
    for i, text in enumerate(texts):
        for start, end in pieces(text, PIECE_CHARS):
            batch.append(text[start:end])
            owners.append(i)
            chars += end - start
            if chars >= PIECE_CHARS:
                yield from zip(owners, (e.ids for e in encode(batch, add_special_tokens=False)))
                batch, owners, chars = [], [], 0
    if batch:
        yield from zip(owners, (e.ids for e in encode(batch, add_special_tokens=False)))


def encode_whole(backend: Tokenizer, texts: list[str]) -> list[list[int]]:
    """Every text's whole token ids, without special tokens (encoded_pieces joined)."""
    ids: list[list[int]] = [[] for _ in texts]
    for i, piece in encoded_pieces(backend, texts):
        ids[i].extend(piece)
    return ids


def base_path(base: str) -> str:
    """Where a base model's Hugging Face files are (pipeline.locate): a hub name's snapshot in the hub's
    cache, and in a sentence-transformers directory its Transformer module's folder."""
    return hf_dir(resolve(base))


def load_tokenizer(path: str):
    """Any fsspec URL: a tokenizer is read whole into memory, so a remote one's local copy can go."""
    from transformers import AutoTokenizer

    with local_copy(path) as local:
        tok = AutoTokenizer.from_pretrained(local, trust_remote_code=False)
    untruncated(tok.backend_tokenizer)
    return tok


def add_deletion_token(tok) -> None:
    """DEL_TOKEN as a special token; lstrip takes the space before it, so " <del>" is that one id."""
    from tokenizers import AddedToken

    tok.add_special_tokens(
        {
            "additional_special_tokens": [
                AddedToken(DEL_TOKEN, lstrip=True, rstrip=False, normalized=False, special=True)
            ]
        }
    )
