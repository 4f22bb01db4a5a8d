"""Word n-grams as 64-bit hashes: the index of the evaluation text, and the window hashes of any texts.

Text is compared as words, evaluation sentences and documents normalised alike (`simplified`) by Arrow's compute
kernels, so that a sentence is found however either side was tokenised: Unicode NFKC, lower case, every apostrophe
as ', contractions and possessives split as the Penn Treebank splits them ("don't", "do n't" and SentEval's
"don ' t" all "do n t", "it's" and "it ' s" both "it s"; "do not" stays itself), SST's Treebank brackets
("-lrb-") and punctuation (everything but letters, digits and white
space) a word break, as WikiText's "well @-@ known" is "well-known", a run of digits 0 (as datatrove's
simplify_text), then split at white space with no empty words (a SentEval sentence's final " ." left one, and it
was part of the sentence's key, found only at a document's very end). A word's hash
is an 8-byte blake2b, so the index, and the fingerprint made from it, are the same in every process (Python's str
hash is salted per process). A window's hash is sum_j word[i + j] * P^j mod 2^64, for every window of a batch at
once with numpy. A word that no evaluation sentence has is 0, as is the separator after each text, and a window
holding a 0 is never looked up.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Typographic apostrophes and their stand-ins, made ' before NFKC (which makes ´ a space and an accent).
APOSTROPHES = "[\u2019\u2018\u02bc\u2032`\u00b4]"
# Split off before a contraction's apostrophe, however it is spaced: "don't", "do n't" and SentEval's "don ' t" are
# all "do n't". The spaced one joins three white-space pieces, which masking groups back (match.word_spans).
NOT = (r"(\pL)n\s*'\s*t\b", r"\1 n't")
CLITIC = (r"\s*'\s*(s|re|ve|ll|d|m)\b", r" '\1")
# The Penn Treebank's brackets as SST writes them ("-lrb- it -rrb-"): punctuation, as a typed "(" is.
BRACKETS = (r"-[lr][rsc]b-", " ")
# White space is every character Arrow's utf8_split_whitespace splits at.
PUNCTUATION = r"[^\pL\pN\pZ\s\x0b\x1c-\x1f\x{85}]+"
DIGITS = r"\p{Nd}+"
P = 0x9E3779B97F4A7C15  # odd: multiplying by it loses no bits mod 2^64
POWERS = np.array([pow(P, j, 2**64) for j in range(64)], dtype=np.uint64)  # those of n up to 128
EMPTY = np.empty(0, dtype=np.uint64)


def power(j: int) -> np.uint64:
    """P^j mod 2^64, for any j: decontaminate.n has no upper bound."""
    return POWERS[j] if j < len(POWERS) else np.uint64(pow(P, j, 2**64))


def simplified(texts: pa.Array) -> pa.Array:
    texts = pc.utf8_lower(pc.utf8_normalize(pc.replace_substring_regex(texts, APOSTROPHES, "'"), "NFKC"))
    texts = pc.replace_substring_regex(pc.replace_substring_regex(texts, *NOT), *CLITIC)
    texts = pc.replace_substring_regex(texts, *BRACKETS)
    return pc.replace_substring_regex(pc.replace_substring_regex(texts, PUNCTUATION, " "), DIGITS, "0")


def word_lists(texts: pa.Array) -> pa.ListArray:
    """Each text's words once simplified; a text with none has an empty list (Arrow's split gives [""])."""
    lists = pc.utf8_split_whitespace(simplified(texts))
    words = lists.flatten()
    keep = pc.greater(pc.binary_length(words), 0)
    counts = np.bincount(
        pc.list_parent_indices(lists).to_numpy()[keep.to_numpy(zero_copy_only=False)], minlength=len(lists)
    )
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), words.filter(keep))


def word_hash(word: str) -> int:
    return int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little") or 1


def word_ids(flat: pa.Array, words: pa.Array, hashes: np.ndarray) -> np.ndarray:
    """Each word's hash from the vocabulary (`words`, `hashes`: Index.lookup), 0 for a word not in it."""
    return hashes[pc.index_in(flat, value_set=words).fill_null(len(words)).to_numpy()]


def concatenated(lists: pa.ListArray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The texts' word ids (`ids`: the flattened lists') end to end, a 0 after each, and where each text starts."""
    offsets = lists.offsets.to_numpy().astype(np.int64)
    starts = offsets[:-1] + np.arange(len(lists))
    out = np.zeros(offsets[-1] + len(lists), dtype=np.uint64)
    out[np.arange(offsets[-1]) + np.repeat(np.arange(len(lists)), np.diff(offsets))] = ids
    return out, starts


def window_hashes(ids: np.ndarray, lengths: Iterable[int]) -> dict[int, np.ndarray]:
    """{L: the hash of the L words from each position}, each length from two shorter ones (h_L(i) = h_a(i) +
    P^a * h_(L-a)(i + a)), so 13 words take 6 passes, not 13. A window holding a 0 or running past the end has
    a hash that means nothing: `known_run` says which those are."""
    n, memo = len(ids), {1: ids}

    def h(length: int) -> np.ndarray:
        if length not in memo:
            a = 1 << (length - 1).bit_length() - 1  # the largest power of two below length
            out = h(a).copy()
            out[: max(n - a, 0)] += h(length - a)[a:] * power(a)
            memo[length] = out
        return memo[length]

    return {length: h(length) for length in sorted(set(lengths))}


def known_run(ids: np.ndarray) -> np.ndarray:
    """How many words from each position are known (not 0): a window of L words from i is one iff run[i] >= L."""
    n = len(ids)
    next_zero = np.minimum.accumulate(np.where(ids == 0, np.arange(n), n)[::-1])[::-1]
    return next_zero - np.arange(n)


@dataclass
class Index:
    """Each task's n-grams by length: the n-word windows of every sentence of at least n words, and each sentence
    of min_words to n - 1 words whole, as sorted unique hashes; `vocab` is every word's hash."""

    n: int
    min_words: int
    vocab: dict[str, int] = field(default_factory=dict)
    tasks: dict[str, dict[int, np.ndarray]] = field(default_factory=dict)
    stats: dict[str, dict[str, int]] = field(default_factory=dict)

    def lookup(self) -> tuple[pa.Array, np.ndarray]:
        """The vocabulary as Arrow strings, and their hashes with a 0 after them (for words not in it)."""
        return pa.array(list(self.vocab), pa.string()), np.array([*self.vocab.values(), 0], np.uint64)

    def add(self, task: str, texts: list[str], chunk: int = 50_000) -> None:
        stats = self.stats.setdefault(task, {"sentences": 0, "whole": 0, "too_short": 0})
        known = self.tasks.setdefault(task, {})
        for i in range(0, len(texts), chunk):
            lists = word_lists(pa.array(texts[i : i + chunk], pa.string()))
            for length, keys in self._hashes(lists, stats).items():
                known[length] = np.unique(np.concatenate([known.get(length, EMPTY), keys[keys != 0]]))

    def _hashes(self, lists: pa.ListArray, stats: dict) -> dict[int, np.ndarray]:
        sizes = pc.list_value_length(lists).to_numpy(zero_copy_only=False)
        whole = (sizes >= self.min_words) & (sizes < self.n)
        stats["sentences"] += len(sizes)
        stats["whole"] += int(whole.sum())
        stats["too_short"] += int(((sizes > 0) & (sizes < self.min_words)).sum())
        flat = lists.flatten()
        self.vocab.update((w, word_hash(w)) for w in pc.unique(flat).to_pylist() if w not in self.vocab)
        ids, starts = concatenated(lists, word_ids(flat, *self.lookup()))
        windows = window_hashes(ids, {self.n, *sizes[whole].tolist()})
        short = {int(s): windows[s][starts[whole & (sizes == s)]] for s in set(sizes[whole].tolist())}
        return {self.n: windows[self.n][known_run(ids) >= self.n], **short}

    def union(self) -> dict[int, np.ndarray]:
        lengths = sorted({length for by_length in self.tasks.values() for length in by_length})
        return {
            length: np.unique(np.concatenate([t.get(length, EMPTY) for t in self.tasks.values()])) for length in lengths
        }

    def digest(self) -> str:
        """sha256 of the sorted n-gram set: the same for the same n-grams, whatever files or order they came in."""
        h = hashlib.sha256(f"{self.n} {self.min_words}".encode())
        for length, keys in self.union().items():
            h.update(f"\n{length}:".encode() + keys.astype("<u8").tobytes())
        return h.hexdigest()[:16]
