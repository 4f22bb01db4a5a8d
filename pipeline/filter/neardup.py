"""Near-duplicate detection: MinHash signatures over word n-gram shingles, indexed by LSH bands.

A document is a near-duplicate when a document kept before it has estimated
Jaccard similarity >= threshold over their sets of lowercase word n-grams.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterator

import numpy as np

from pipeline.tokenizer import loading

MERSENNE = (1 << 61) - 1
_P = np.uint64(MERSENNE)
_LOW32 = np.uint64(0xFFFFFFFF)
_LOW29 = np.uint64((1 << 29) - 1)
# Shingles per block: the (num_perm x block) uint64 temporaries (512 KB at
# num_perm=128) stay in cache, 3x faster than 4096; memory stays bounded for any document.
_CHUNK = 512


def words(text: str) -> Iterator[list[str]]:
    """The text's lowercase words, a block at a time: one per piece of pipeline.tokenizer.loading.pieces, a word
    that a piece's cut split joined again, so a long document's words are never all listed at once."""
    held: list[str] = []  # the words of the piece before, whose last may go on in the next
    for start, end in loading.pieces(text, loading.PIECE_CHARS):
        block = text[start:end].lower().split()
        if held and block and not (text[start].isspace() or text[start - 1].isspace()):
            block[0] = held.pop() + block[0]
        if held:
            yield held
        held = block
    if held:
        yield held


def shingle_hashes(text: str, ngram: int) -> Iterator[np.ndarray]:
    """Stable 64-bit hashes (blake2b; Python's hash() is salted per process) of the text's word n-grams, a block
    of words at a time; a text of fewer than `ngram` words is one shingle, its words."""
    tail: list[str] = []  # the last ngram - 1 words seen, which begin the next block's first shingles
    hashed = False
    for block in words(text):
        window = tail + block
        if len(window) >= ngram:
            yield _hashes([" ".join(window[i : i + ngram]) for i in range(len(window) - ngram + 1)])
            hashed = True
        tail = window[len(window) - ngram + 1 :] if ngram > 1 else []
    if not hashed:
        yield _hashes([" ".join(tail)])


def _hashes(shingles: list[str]) -> np.ndarray:
    digests = b"".join(hashlib.blake2b(s.encode(), digest_size=8).digest() for s in shingles)
    return np.frombuffer(digests, dtype="<u8")


def _mod_mersenne(v: np.ndarray) -> np.ndarray:
    """v mod 2**61-1 for any uint64 v, since 2**61 = 1 (mod 2**61-1)."""
    v = (v & _P) + (v >> np.uint64(61))  # < 2**61 + 8
    # Where v < P, v - P wraps around to a huge value and the minimum keeps v.
    return np.minimum(v, v - _P)


def minhash(hashes: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per permutation k, min over x of (a[k]*x + b[k]) mod 2**61-1, exactly, in uint64.

    a*x needs 122 bits, so a and x are split into 32-bit halves (hi < 2**29)
    and the four partial products are folded with 2**61 = 1 (mod p): each term
    stays below 2**61 (or 2**64 before folding) and their sum below 2**64.
    """
    a, b = a[:, None], b[:, None]
    a_hi, a_lo = a >> np.uint64(32), a & _LOW32
    signature = np.full(len(a), MERSENNE, dtype=np.uint64)
    for start in range(0, len(hashes), _CHUNK):
        x = _mod_mersenne(hashes[start : start + _CHUNK])
        x_hi, x_lo = x >> np.uint64(32), x & _LOW32
        high = (a_hi * x_hi) << np.uint64(3)  # * 2**64 = * 8
        mid = a_hi * x_lo + a_lo * x_hi  # * 2**32: its bits from 29 up wrap past 2**61
        low = a_lo * x_lo
        total = (
            high + (mid >> np.uint64(29)) + ((mid & _LOW29) << np.uint64(32)) + (low & _P) + (low >> np.uint64(61)) + b
        )
        signature = np.minimum(signature, _mod_mersenne(total).min(axis=1))
    return signature


@functools.cache
def lsh_params(threshold: float, num_perm: int, fp_weight: float = 0.1, fn_weight: float = 0.9) -> tuple[int, int]:
    """Bands b and rows r (b*r <= num_perm) minimising the weighted false-positive and false-negative areas.

    datasketch's `_optimal_param`: a pair of Jaccard s shares a band with
    probability 1-(1-s**r)**b; integrate that below the threshold (false
    positives) and its complement above (false negatives). The weights favour
    recall: every candidate is confirmed against the full signature, so a false
    positive costs one comparison while a false negative is a missed duplicate.
    """
    grid = (np.arange(1000) + 0.5) / 1000  # midpoint rule on [0, 1]
    below, above = grid * threshold, threshold + grid * (1 - threshold)
    best, best_error = (1, 1), float("inf")
    for bands in range(1, num_perm + 1):
        for rows in range(1, num_perm // bands + 1):
            fp = (1 - (1 - below**rows) ** bands).mean() * threshold
            fn = ((1 - above**rows) ** bands).mean() * (1 - threshold)
            error = fp_weight * fp + fn_weight * fn
            if error < best_error:
                best, best_error = (bands, rows), error
    return best


class NearDuplicates:
    """Streaming near-duplicate filter: the first document of a near-duplicate group is kept."""

    def __init__(self, threshold: float = 0.8, num_perm: int = 128, ngram: int = 5, seed: int = 0):
        if not 0 < threshold <= 1:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        if num_perm < 1 or ngram < 1:
            raise ValueError(f"num_perm and ngram must be >= 1, got {num_perm} and {ngram}")
        self.threshold, self.num_perm, self.ngram = threshold, num_perm, ngram
        self.bands, self.rows = lsh_params(threshold, num_perm)
        rng = np.random.default_rng(seed)
        self.a = rng.integers(1, MERSENNE, size=num_perm, dtype=np.uint64)
        self.b = rng.integers(0, MERSENNE, size=num_perm, dtype=np.uint64)
        self.signatures: list[np.ndarray] = []
        # One dict per band: band bytes -> first kept document with them. Later
        # documents with the same band are not recorded: they were either
        # duplicates (not kept) or confirmed different from the recorded one.
        self.buckets: list[dict[bytes, int]] = [{} for _ in range(self.bands)]

    def signature(self, text: str) -> np.ndarray:
        return np.minimum.reduce([minhash(hashes, self.a, self.b) for hashes in shingle_hashes(text, self.ngram)])

    def seen(self, signature: np.ndarray) -> bool:
        """True if a kept document is a near-duplicate of the one with this signature (computed here or on a
        worker with the same parameters); otherwise keep that document and return False."""
        return self.match(signature) is not None

    def match(self, signature: np.ndarray) -> tuple[int, float] | None:
        """`seen`, saying which: (the kept document's number, counted from 0 in the order kept, and the two's
        estimated Jaccard similarity) for a near-duplicate, else None, the document kept."""
        keys = [signature[i * self.rows : (i + 1) * self.rows].tobytes() for i in range(self.bands)]
        candidates = sorted({bucket[key] for bucket, key in zip(self.buckets, keys) if key in bucket})
        for doc in candidates:
            # Confirming on the whole signature drops band collisions of dissimilar documents.
            agree = int(np.count_nonzero(self.signatures[doc] == signature))
            if agree >= self.threshold * self.num_perm:
                return doc, agree / self.num_perm
        doc = len(self.signatures)
        self.signatures.append(signature)
        for bucket, key in zip(self.buckets, keys):
            bucket.setdefault(key, doc)
        return None
