"""The objectives' per-document work, spread as the data stages spread theirs (`parallel.backend`, `parallel.workers`,
which reach the augment stage as runtime settings, outside its fingerprint): DeCLUTR's documents tokenised whole
(`document_tokens`), the sentence objectives' documents split into sentences (pipeline.corpus.sentences, on the
backend `spread` names) and texts tokenised (`encoded`). None of it draws at random: the units come back in corpus
order, and each objective draws its pairs from one generator in that order in the driver, as a serial run does,
so every backend writes the same pairs under the same fingerprint. The tokenizer goes to each worker once.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from pipeline.corpus.sentences import UNIT_CHARS, document_units
from pipeline.parallel import Backend, Spread, ordered_map
from pipeline.stage import runtime, runtime_defaults
from pipeline.tokenizer.loading import collapse_whitespace, encode_whole, encoded_pieces

if TYPE_CHECKING:
    from tokenizers import Tokenizer

RUNTIME = runtime_defaults(Spread)  # the augment stage's runtime settings: cfg.parallel's


def spread(config: dict) -> tuple[Backend, int]:
    """(backend, workers) from the augment stage's config."""
    settings = runtime(config, RUNTIME)
    return settings["backend"], settings["workers"]


def whole_arrays(backend: Tokenizer, texts: list[str]) -> list[np.ndarray]:
    """Every document's token ids as int32, its pieces' joined: spans may fall anywhere in a document, so all of
    it is kept, at 4 bytes a token."""
    pieces: list[list[np.ndarray]] = [[] for _ in texts]
    for i, ids in encoded_pieces(backend, texts):
        pieces[i].append(np.asarray(ids, dtype=np.int32))
    return [np.concatenate(p) if p else np.zeros(0, np.int32) for p in pieces]


def document_tokens(documents: str, tok, collapse: bool, config: dict) -> tuple[list[str], list[np.ndarray]]:
    """(doc ids, each document's whole token ids) in corpus order; with `collapse`, runs of whitespace become
    one space first."""
    doc_ids: list[str] = []
    arrays: list[np.ndarray] = []
    unit = partial(_unit_tokens, collapse)
    for ids, tokens in ordered_map(unit, document_units(documents), *spread(config), shared=tok.backend_tokenizer):
        doc_ids += ids
        arrays += tokens
    return doc_ids, arrays


def _unit_tokens(collapse: bool, backend: Tokenizer, docs: list[tuple[str, str]]) -> tuple[list[str], list]:
    texts = [collapse_whitespace(t) if collapse else t for _, t in docs]
    return [d for d, _ in docs], whole_arrays(backend, texts)


def encode_all(tok, texts: list[str], config: dict) -> list[list[int]]:
    """encode_whole(texts), UNIT_CHARS characters a unit of work."""
    ids: list[list[int]] = []
    for unit in ordered_map(encode_whole, _slices(texts), *spread(config), shared=tok.backend_tokenizer):
        ids += unit
    return ids


def _slices(texts: list[str]) -> Iterator[list[str]]:
    start, chars = 0, 0
    for end, text in enumerate(texts, 1):
        chars += len(text)
        if chars >= UNIT_CHARS:
            yield texts[start:end]
            start, chars = end, 0
    if start < len(texts):
        yield texts[start:]
