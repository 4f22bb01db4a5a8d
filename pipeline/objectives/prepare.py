"""The objectives' per-document work, spread as the data stages spread theirs (`parallel.backend`, `parallel.workers`,
which reach the augment stage as runtime settings, outside its fingerprint): DeCLUTR's documents tokenised whole
(`document_tokens`), the sentence objectives' documents split into sentences (pipeline.corpus.sentences, on the
backend `spread` names), texts tokenised (`encode_all`, or `encoded_units` into Arrow arrays), and TSDAE's sentences
split into words and its damaged word lists joined back (`moses_words`, `moses_texts`). None of it draws at random:
the units come back in corpus order, and each objective draws its pairs from one generator in that order in the
driver (`alongside`), as a serial run does, so every backend writes the same pairs under the same fingerprint. The
tokenizer goes to each worker once.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pyarrow as pa

from pipeline.corpus.sentences import UNIT_CHARS, document_units
from pipeline.parallel import Backend, Spread, ordered_map
from pipeline.progress import Progress
from pipeline.stage import runtime_defaults
from pipeline.tokenizer.loading import collapse_whitespace, encode_whole, encoded_pieces

if TYPE_CHECKING:
    from tokenizers import Tokenizer

T = TypeVar("T")
R = TypeVar("R")
RUNTIME = runtime_defaults(Spread)  # the augment stage's runtime settings: cfg.parallel's


def spread(settings: Spread) -> tuple[Backend, int]:
    """(backend, workers) from the augment stage's settings."""
    return settings.backend, settings.workers


def whole_arrays(backend: Tokenizer, texts: list[str]) -> list[np.ndarray]:
    """Every document's token ids as int32, its pieces' joined: spans may fall anywhere in a document, so all of
    it is kept, at 4 bytes a token."""
    pieces: list[list[np.ndarray]] = [[] for _ in texts]
    for i, ids in encoded_pieces(backend, texts):
        pieces[i].append(np.asarray(ids, dtype=np.int32))
    return [np.concatenate(p) if p else np.zeros(0, np.int32) for p in pieces]


def document_tokens(documents: str, tok, collapse: bool, settings: Spread) -> tuple[list[str], list[np.ndarray]]:
    """(doc ids, each document's whole token ids) in corpus order; with `collapse`, runs of whitespace become
    one space first."""
    doc_ids: list[str] = []
    arrays: list[np.ndarray] = []
    unit = partial(_unit_tokens, collapse)
    units = ordered_map(unit, document_units(documents), *spread(settings), shared=tok.backend_tokenizer)
    with Progress("augment: tokenising", unit="documents") as progress:  # the stage's longest wait
        for ids, tokens in units:
            doc_ids += ids
            arrays += tokens
            progress.update(len(ids))
    return doc_ids, arrays


def _unit_tokens(collapse: bool, backend: Tokenizer, docs: list[tuple[str, str]]) -> tuple[list[str], list]:
    texts = [collapse_whitespace(t) if collapse else t for _, t in docs]
    return [d for d, _ in docs], whole_arrays(backend, texts)


def encode_all(tok, texts: list[str], settings: Spread) -> list[list[int]]:
    """encode_whole(texts), UNIT_CHARS characters a unit of work."""
    return _joined(ordered_map(encode_whole, _slices(texts, len), *spread(settings), shared=tok.backend_tokenizer))


def encoded_units(tok, units: Iterable[list[str]], settings: Spread) -> Iterator[pa.Array]:
    """Each unit of texts' token ids as one Arrow list<int32> array, made where the unit is encoded: far smaller
    than lists of Python ints."""
    return ordered_map(_unit_ids, units, *spread(settings), shared=tok.backend_tokenizer)


def _unit_ids(backend: Tokenizer, texts: list[str]) -> pa.Array:
    return pa.array(encode_whole(backend, texts), pa.list_(pa.int32()))


def moses_words(units: Iterable[list[str]], settings: Spread) -> Iterator[pa.Array]:
    """Each unit of texts split into words as sacremoses' Moses tokenizer splits English (TSDAE's words), as one
    Arrow list<string> array."""
    return ordered_map(_unit_words, units, *spread(settings))


def moses_texts(tok, units: Iterable[list[list[str]]], settings: Spread) -> Iterator[tuple[list[str], list[list[int]]]]:
    """Each unit of word lists joined back into texts as Moses' detokenizer joins English, and the texts' token
    ids."""
    return ordered_map(_unit_texts, units, *spread(settings), shared=tok.backend_tokenizer)


def alongside(
    items: Iterable[T], made: Callable[[T], Any], mapped: Callable[[Iterable], Iterable[R]]
) -> Iterator[tuple[T, Any, R]]:
    """(item, made(item), result) for each of `items` in order, where `mapped` (an ordered_map, which reads ahead)
    maps what `made` made of every item: `made` runs in the driver in the items' order, so it may draw at random."""
    pending: deque[tuple[T, Any]] = deque()

    def inputs():
        for item in items:
            pending.append((item, made(item)))
            yield pending[-1][1]

    for result in mapped(inputs()):
        yield *pending.popleft(), result


def _unit_words(texts: list[str]) -> pa.Array:
    from sacremoses import MosesTokenizer

    split = MosesTokenizer(lang="en")
    return pa.array([split.tokenize(t, escape=False) for t in texts], pa.list_(pa.string()))


def _unit_texts(backend: Tokenizer, words: list[list[str]]) -> tuple[list[str], list[list[int]]]:
    from sacremoses import MosesDetokenizer

    join = MosesDetokenizer(lang="en")
    texts = [join.detokenize(w) for w in words]
    return texts, encode_whole(backend, texts)


def _joined(units: Iterable[list[T]]) -> list[T]:
    joined: list[T] = []
    for unit in units:
        joined += unit
    return joined


def _slices(items: list[T], chars: Callable[[T], int]) -> Iterator[list[T]]:
    """Consecutive slices of `items` of about UNIT_CHARS characters each."""
    start, size = 0, 0
    for end, item in enumerate(items, 1):
        size += chars(item)
        if size >= UNIT_CHARS:
            yield items[start:end]
            start, size = end, 0
    if start < len(items):
        yield items[start:]
