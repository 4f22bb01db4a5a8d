"""Word-vector baselines: the average of pretrained vectors (GloVe, fastText), and of random vectors.

Sentences are split on whitespace and words looked up as they are, the way
SentEval's bow.py baseline does; a sentence with no known word gets the zero
vector. Both encoders follow pipeline.model.exported.Encoder's interface.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from pipeline.errors import InputError


class VectorsError(InputError):
    """A word-vector file is malformed; the message names the file and line."""


def _float_row(fields: list[str], path: Path, lineno: int) -> np.ndarray:
    try:
        row = np.asarray(fields, dtype=np.float32)
    except ValueError:
        raise VectorsError(f"{path}:{lineno}: a vector component is not a number") from None
    if not np.isfinite(row).all():
        raise VectorsError(f"{path}:{lineno}: the vector has a non-finite component")
    return row


def read_vectors(
    path: str | Path, words: Iterable[str] | None = None, dim: int | None = None
) -> tuple[dict[str, int], np.ndarray]:
    """(word -> row, matrix) from a GloVe .txt or fastText .vec file.

    A fastText "<count> <dim>" header line is detected and skipped (its count is
    not checked: truncated files are common). Without a header the dimension is
    that of the first row unless `dim` is given. The last `dim` fields of a row
    are the vector and the rest, re-joined, the word, since GloVe 840B has words
    with spaces. `words`, if given, keeps only those (SentEval loads only a
    task's vocabulary). A repeated word keeps its first vector.
    """
    path = Path(path)
    wanted = None if words is None else set(words)
    vocab: dict[str, int] = {}
    rows: list[np.ndarray] = []
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise VectorsError(f"{path}:{lineno}: not valid UTF-8") from None
            # Split on the space only: GloVe 840B words contain other whitespace (U+00A0).
            fields = line.rstrip("\r\n").rstrip(" ").split(" ")
            if fields == [""]:
                continue
            if lineno == 1 and len(fields) == 2 and all(x.isdigit() for x in fields):
                dim = int(fields[1]) if dim is None else dim
                continue
            if dim is None:
                dim = len(fields) - 1
            if len(fields) < dim + 1:
                raise VectorsError(f"{path}:{lineno}: expected a word and {dim} numbers, got {len(fields)} fields")
            word = " ".join(fields[:-dim])
            if (wanted is None or word in wanted) and word not in vocab:
                vocab[word] = len(rows)
                rows.append(_float_row(fields[-dim:], path, lineno))
    if dim is None or dim < 1:
        raise VectorsError(f"{path}: no word vectors")
    return vocab, np.stack(rows) if rows else np.zeros((0, dim), dtype=np.float32)


def _average(sentences: list[str], dim: int, lookup) -> np.ndarray:
    out = np.zeros((len(sentences), dim), dtype=np.float32)
    for i, sentence in enumerate(sentences):
        vectors = [v for v in map(lookup, sentence.split()) if v is not None]
        if vectors:
            out[i] = np.mean(vectors, axis=0)
    return out


class WordVectorEncoder:
    """Sentence vector = mean of the pretrained vectors of its known words."""

    def __init__(self, path: str | Path, words: Iterable[str] | None = None, lowercase: bool = False):
        """`lowercase` looks words up lowercased, for vectors trained on lowercased text (fastText wiki)."""
        self.vocab, self.matrix = read_vectors(path, words)
        self.dim = self.matrix.shape[1]
        self.lowercase = lowercase

    @property
    def parameters(self) -> int:
        return int(self.matrix.size)

    def _lookup(self, word: str) -> np.ndarray | None:
        row = self.vocab.get(word.lower() if self.lowercase else word)
        return None if row is None else self.matrix[row]

    def encode(self, sentences: list[str], batch_size: int | None = None) -> np.ndarray:
        """`batch_size` is accepted for a common encoder interface; lookups need no batching."""
        return _average(sentences, self.dim, self._lookup)


class RandomEncoder:
    """Sentence vector = mean of random word vectors: the floor any trained encoder must clear.

    Each word's vector is drawn from N(0, 1/dim) by a generator seeded with a
    hash of (seed, word), so it is the same in every process and run, for any
    vocabulary, with nothing stored or trained (`parameters` is 0).
    """

    def __init__(self, dim: int = 300, seed: int = 0):
        self.dim, self.seed = dim, seed
        self._cache: dict[str, np.ndarray] = {}

    @property
    def parameters(self) -> int:
        return 0

    def _lookup(self, word: str) -> np.ndarray:
        vector = self._cache.get(word)
        if vector is None:
            digest = hashlib.blake2b(f"{self.seed}\0{word}".encode(), digest_size=8).digest()
            rng = np.random.default_rng(int.from_bytes(digest, "little"))
            vector = self._cache[word] = rng.standard_normal(self.dim).astype(np.float32) / np.sqrt(self.dim)
        return vector

    def encode(self, sentences: list[str], batch_size: int | None = None) -> np.ndarray:
        """`batch_size` is accepted for a common encoder interface; lookups need no batching."""
        return _average(sentences, self.dim, self._lookup)
