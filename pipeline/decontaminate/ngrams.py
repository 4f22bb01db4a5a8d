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

Documents are simplified a piece (what lies between two spaces) at a time (`Pieces`): the same words, each distinct
piece simplified once per process.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import repeat

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
# Where NOT could join two pieces of a text split at its spaces, as `unified` leaves them: one ends in "n" (ENDS,
# matched on the piece backwards: anchored patterns cost less), with the apostrophe or not, and the next starts with
# the rest (STARTS); a piece of white space alone ("" between two spaces, a newline) may be any part (BLANK).
ENDS = (r"^\s*n", r"^\s*'\s*n")
STARTS = (r"^\s*'\s*(t\b|$)", r"^\s*t\b")
BLANK = r"^\s*$"
P = 0x9E3779B97F4A7C15  # odd: multiplying by it loses no bits mod 2^64, and it has an inverse
EMPTY = np.empty(0, dtype=np.uint64)
# White space to Arrow's split and to no pattern of simplified(): the pieces joined by it stay apart. A piece's own
# is made the next one down, which is all that too.
SEPARATOR, STAND_IN = "\x1f", "\x1e"


def _powers(base: int, n: int) -> np.ndarray:
    """base^j mod 2^64 for j < n (numpy's unsigned products wrap)."""
    factors = np.full(n, base, dtype=np.uint64)
    factors[0] = 1
    return np.cumprod(factors, dtype=np.uint64)


POWERS, INVERSES = _powers(P, 64), _powers(pow(P, -1, 2**64), 64)


def powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """P^j and P^-j mod 2^64 for j < n: decontaminate.n has no upper bound, and a batch's words none either."""
    global POWERS, INVERSES
    if len(POWERS) < n:
        POWERS, INVERSES = _powers(P, 2 * n), _powers(pow(P, -1, 2**64), 2 * n)
    return POWERS[:n], INVERSES[:n]


def unified(texts: pa.Array) -> pa.Array:
    """The texts with one apostrophe, NFKC, lower case: what `simplified` does within each character."""
    return pc.utf8_lower(pc.utf8_normalize(pc.replace_substring_regex(texts, APOSTROPHES, "'"), "NFKC"))


def simplified(texts: pa.Array, unify: bool = True) -> pa.Array:
    texts = unified(texts) if unify else texts
    texts = pc.replace_substring_regex(pc.replace_substring_regex(texts, *NOT), *CLITIC)
    texts = pc.replace_substring_regex(texts, *BRACKETS)
    return pc.replace_substring_regex(pc.replace_substring_regex(texts, PUNCTUATION, " "), DIGITS, "0")


def word_lists(texts: pa.Array) -> pa.ListArray:
    """Each text's words once simplified; a text with none has an empty list (Arrow's split gives [""])."""
    return _split(simplified(texts))


def split_whitespace(texts: pa.Array) -> pa.ListArray:
    """Arrow's utf8_split_whitespace, with one more text after the texts: the kernel reads past a text's end, and
    where that is the end of the array's data it may take the text's last white space for part of its last piece
    (pyarrow 26 splits ["σ" + 61 * "a" + " "] either way, run after run)."""
    return pc.utf8_split_whitespace(pa.concat_arrays([texts, pa.array(["."], texts.type)]))[:-1]


def _split(texts: pa.Array) -> pa.ListArray:
    lists = split_whitespace(texts)
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
    out = np.zeros(offsets[-1] + len(lists), dtype=ids.dtype)
    out[np.arange(offsets[-1]) + np.repeat(np.arange(len(lists)), np.diff(offsets))] = ids
    return out, starts


class Windows:
    """The hash of any L words of `ids`, from one prefix sum: c[k] = sum_(j<k) ids[j] * P^j, so the L words from
    i hash to (c[i + L] - c[i]) * P^-i. A window holding a 0 has a hash that means nothing: `holes` says which."""

    def __init__(self, ids: np.ndarray):
        self.n = len(ids)
        up, self.down = powers(self.n + 1)
        self.c = np.zeros(self.n + 1, dtype=np.uint64)
        np.cumsum(ids * up[: self.n], out=self.c[1:])

    def every(self, length: int) -> np.ndarray:
        """The hashes of the windows from each position i <= len(ids) - length (two passes)."""
        h = self.c[length:] - self.c[: max(self.n + 1 - length, 0)]
        return np.multiply(h, self.down[: len(h)], out=h)

    def at(self, starts: np.ndarray, length: int) -> np.ndarray:
        """The hashes of the windows from `starts` (each at most len(ids) - length)."""
        return (self.c[starts + length] - self.c[starts]) * self.down[starts]


def window_hashes(ids: np.ndarray, lengths: Iterable[int]) -> dict[int, np.ndarray]:
    """{L: the hash of the L words from each position i <= len(ids) - L}."""
    windows = Windows(ids)
    return {length: windows.every(length) for length in sorted(set(lengths))}


def holes(ids: np.ndarray) -> np.ndarray:
    """How many 0s come before each position (and after the last): the L words from i are all known (not 0) iff
    holes[i + L] == holes[i]."""
    out = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum(ids == 0, out=out[1:])
    return out


@dataclass
class Index:
    """Each task's n-grams by length: the n-word windows of every sentence of at least n words, and each sentence
    of min_words to n - 1 words whole, as sorted unique hashes; `vocab` is every word's hash; `prefixes` the hashes
    of every n-gram's first `shortest()` words (a document's windows are looked up from those: `match.Matcher`)."""

    n: int
    min_words: int
    vocab: dict[str, int] = field(default_factory=dict)
    tasks: dict[str, dict[int, np.ndarray]] = field(default_factory=dict)
    stats: dict[str, dict[str, int]] = field(default_factory=dict)
    prefixes: np.ndarray = field(default_factory=lambda: EMPTY)

    def shortest(self) -> int:
        """The fewest words an n-gram has."""
        return min(self.n, self.min_words)

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
        """The sentences' n-grams by length (and their prefixes added to `prefixes`)."""
        sizes = pc.list_value_length(lists).to_numpy(zero_copy_only=False)
        whole = (sizes >= self.min_words) & (sizes < self.n)
        stats["sentences"] += len(sizes)
        stats["whole"] += int(whole.sum())
        stats["too_short"] += int(((sizes > 0) & (sizes < self.min_words)).sum())
        flat = lists.flatten()
        self.vocab.update((w, word_hash(w)) for w in pc.unique(flat).to_pylist() if w not in self.vocab)
        ids, starts = concatenated(lists, word_ids(flat, *self.lookup()))
        windows, zeros = Windows(ids), holes(ids)
        at = {self.n: np.flatnonzero(zeros[self.n :] == zeros[: max(len(zeros) - self.n, 0)])}  # none when shorter
        at.update({int(s): starts[whole & (sizes == s)] for s in set(sizes[whole].tolist())})
        prefixes = windows.at(np.concatenate(list(at.values())), self.shortest())
        self.prefixes = np.unique(np.concatenate([self.prefixes, prefixes]))
        return {length: windows.at(starts, length) for length, starts in at.items()}

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


class Pieces:
    """Texts' word hashes (`Index.lookup`'s, 0 for a word not in it) with a 0 after each text, simplified a piece
    (what lies between two spaces) at a time.

    A piece's words are the words it gives alone: NFKC and lower case keep a space a space and work within the
    pieces (no character composes with a space), and of simplified()'s patterns only NOT and CLITIC span white
    space, CLITIC changing no word (the apostrophe it moves is a word break either way). So each distinct piece is
    simplified once, its words' hashes remembered (up to LIMIT pieces, then all forgotten), and a text's words are
    its pieces'. Where NOT could join neighbouring pieces (ENDS, BLANKs, STARTS: "don ' t", "goin' to"), they are
    simplified together, as one piece with spaces in it (`_runs`)."""

    LIMIT = 500_000  # pieces remembered, then all forgotten (about 130 MB); their words, up to 8 times as many
    LONGEST = 100  # characters of a piece remembered: a longer one (a text with no space) is seldom seen again

    def __init__(self, lookup: tuple[pa.Array, np.ndarray]):
        self.lookup = lookup
        self._forget()

    def _forget(self) -> None:
        self.codes: dict[str, int] = {}
        # By code: where its words' hashes start in `hashes` (a 0 after each piece's), how many, and whether it
        # may end a join (bit 0: before the apostrophe, bit 1: after it) or go on with one (bits 2 and 3).
        self.at, self.count = np.zeros(0, np.int64), np.zeros(0, np.int64)
        self.flags, self.hashes = np.zeros(0, np.uint8), EMPTY

    def ids(self, texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """The texts' word hashes end to end, a 0 after each, and where each text starts."""
        if len(self.codes) > self.LIMIT or len(self.hashes) > 8 * self.LIMIT:
            self._forget()
        lists = pc.split_pattern(texts.fill_null(""), " ")  # a piece in every text: "" gives [""]
        flat = lists.flatten()
        pieces = flat.dictionary_encode()
        offsets = lists.offsets.to_numpy()
        p, last = pieces.indices.to_numpy().astype(np.intp), offsets[1:] - 1
        codes, unseen = self._number(pieces.dictionary)  # unseen: unified
        runs, run_codes = [], np.zeros(0, np.int64)
        if ((flags := self.flags[codes]) >> 2).any():  # a piece here may go on with a join: where, after an end?
            then = np.flatnonzero((flags >> 2)[p[1:]]) + 1
            joins = then[(flags[p[then - 1]] & (flags[p[then]] >> 2) & 3) != 0] - 1
            if runs := _runs(np.setdiff1d(joins, last), offsets):  # not across texts
                joined = pa.array([" ".join(flat[j : end + 1].to_pylist()) for j, end in runs], pa.string())
                run_codes, more = self._number(joined)
                unseen = pa.concat_arrays([unseen, more])
        self._words(unseen)
        # The batch's distinct pieces' words, each piece's followed by a 0, then the runs': the gathers by position
        # below read this small table, not every piece remembered. A text's last piece brings its 0 along.
        count = self.count[np.concatenate([codes, run_codes])]
        words, at = _ranges(self.at[np.concatenate([codes, run_codes])], count + 1)
        table = self.hashes[words]
        count, at, run_count, run_at = count[p], at[p], count[len(codes) :], at[len(codes) :]
        count[last] += 1
        ends_text = set(last.tolist()) if runs else set()
        for (j, end), size, start in zip(runs, run_count.tolist(), run_at.tolist()):
            count[j : end + 1] = 0
            at[j], count[j] = start, size + (end in ends_text)
        words, before = _ranges(at, count)
        return table[words], before[offsets[:-1]]

    def _number(self, distinct: pa.Array) -> tuple[np.ndarray, pa.Array]:
        """The pieces' codes; and those not seen before, numbered (where their words will be) and flagged, unified."""
        codes = np.fromiter(map(self.codes.get, distinct.to_pylist(), repeat(-1)), np.int64, len(distinct))
        unseen = distinct.take(new := np.flatnonzero(codes < 0))
        if not len(new):
            return codes, unseen
        codes[new] = np.arange(len(self.flags), len(self.flags) + len(new))  # a piece twice here: two codes
        short = pc.less_equal(pc.utf8_length(unseen), self.LONGEST)
        remembered = codes[new][short.to_numpy(zero_copy_only=False)]
        self.codes.update(zip(unseen.filter(short).to_pylist(), remembered.tolist()))
        alone = unified(unseen)
        backwards, blank = pc.utf8_reverse(alone), _flags(alone, BLANK) * 3
        ends = _flags(backwards, ENDS[0]) | _flags(backwards, ENDS[1]) << 1 | blank
        goes_on = _flags(alone, STARTS[0]) | _flags(alone, STARTS[1]) << 1 | blank
        self.flags = np.concatenate([self.flags, ends | goes_on << 2])
        return codes, alone

    def _words(self, unified_pieces: pa.Array) -> None:
        """The words' hashes of the pieces numbered last, simplified in one string (SEPARATOR keeping them apart:
        Arrow's regular expressions cost per string, and more to compile)."""
        if not len(unified_pieces):
            return
        alone = pc.replace_substring(unified_pieces, SEPARATOR, STAND_IN)
        joined = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, len(alone)], pa.int32()), alone), SEPARATOR)
        lists = _split(pc.split_pattern(simplified(joined, unify=False), SEPARATOR).flatten())
        hashes, starts = concatenated(lists, word_ids(lists.flatten(), *self.lookup))
        self.at = np.concatenate([self.at, len(self.hashes) + starts])
        self.count = np.concatenate([self.count, np.diff(lists.offsets.to_numpy()).astype(np.int64)])
        self.hashes = np.concatenate([self.hashes, hashes])


def _runs(joins: np.ndarray, offsets: np.ndarray) -> list[tuple[int, int]]:
    """The pieces from each of `joins` to two after it (what NOT can span, "don ' t", but for white space alone),
    within its text, overlapping runs as one: what is simplified together, as one piece with spaces in it."""
    ends = np.minimum(joins + 2, offsets[np.searchsorted(offsets, joins, side="right")] - 1)
    runs: list[list[int]] = []
    for j, end in zip(joins.tolist(), ends.tolist()):
        if runs and j <= runs[-1][1]:
            runs[-1][1] = end
        else:
            runs.append([j, end])
    return [(j, end) for j, end in runs]


def _ranges(starts: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """starts[i], starts[i] + 1, ... for counts[i] numbers each, end to end; and where each i's numbers begin."""
    before = np.cumsum(counts) - counts
    out = np.repeat(starts - before, counts)
    out += np.arange(len(out))
    return out, before


def _flags(texts: pa.Array, pattern: str) -> np.ndarray:
    return pc.match_substring_regex(texts, pattern).to_numpy(zero_copy_only=False).astype(np.uint8)
