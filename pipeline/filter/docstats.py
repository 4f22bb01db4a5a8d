"""Per-document statistics for the filter: token count, language, duplicate key, MinHash signature.

Kept apart from the filter stage so that worker processes import only what
this needs (tokenizers, fastText, numpy), not transformers and torch.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

import fsspec
from tokenizers import Tokenizer

from pipeline.filter.langid import LanguageIdentifier
from pipeline.filter.neardup import NearDuplicates
from pipeline.tokenizer.loading import collapse_whitespace, encoded_pieces


def text_key(text: str) -> bytes:
    """Exact-duplicate key: case and whitespace differences do not make a new document."""
    return hashlib.sha1(collapse_whitespace(text.lower()).encode()).digest()


def count_tokens(backend: Tokenizer, texts: list[str]) -> list[int]:
    """Whole documents' token counts without special tokens: never cut at the tokenizer's truncation, and
    counted piece by piece, so a long document's ids are never all held at once."""
    counts = [0] * len(texts)
    for i, ids in encoded_pieces(backend, texts):
        counts[i] += len(ids)
    return counts


@lru_cache(maxsize=2)
def tokenizer(path: str) -> Tokenizer:
    """The fast tokenizer saved by the tokenizer stage (tokenizer.json, on any fsspec URL), without transformers."""
    with fsspec.open(f"{path}/tokenizer.json", "r", encoding="utf-8") as f:
        return Tokenizer.from_str(f.read())


@lru_cache(maxsize=2)
def _identifier(path: str) -> LanguageIdentifier:
    return LanguageIdentifier(path)


@lru_cache(maxsize=2)
def minhasher(threshold: float) -> NearDuplicates:
    return NearDuplicates(threshold=threshold)  # seeded: every process computes the same signatures


def analyse(job: tuple[list[str], str, str | None, float | None]) -> dict:
    """Work on one batch that needs no other batch; runs in any process (models load once per process)."""
    texts, tokenizer_path, langid_model, near_threshold = job
    langs = _identifier(langid_model).predict(texts) if langid_model else [(None, None)] * len(texts)
    return {
        "n_tokens": count_tokens(tokenizer(tokenizer_path), texts),
        "keys": [text_key(t) for t in texts],
        "lang": [lang for lang, _ in langs],
        "lang_score": [score for _, score in langs],
        "signatures": [minhasher(near_threshold).signature(t) for t in texts] if near_threshold else None,
    }
