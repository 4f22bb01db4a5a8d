"""The evaluation n-grams in corpus documents: which windows match, which tasks they come from, and the
document with them cut out (mode mask)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.decontaminate.ngrams import Index, Pieces, Windows, holes, split_whitespace, word_lists

Hit = tuple[int, int, int]  # (length in words, first word, hash) of a matching window
MASK = " "  # what a cut-out run of matched words becomes: the text on either side stays apart


def member(h: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """h's entries found in the sorted array `keys` (0 never is)."""
    if not len(keys):
        return np.zeros(len(h), dtype=bool)
    return (keys[np.minimum(np.searchsorted(keys, h), len(keys) - 1)] == h) & (h != 0)


class Matcher:
    """Looks windows up in the index's n-grams. Only where a document's next `shortest` words begin an n-gram
    (their hash in a bitmap of the index's prefixes' top bits, then in one of their low bits: gathers) are the
    windows of each length hashed and searched for in the sorted hashes; hashing every length at every position
    took a pass of the batch per length. A window whose hash is an n-gram's but whose first words hash to no
    n-gram's holds other words (two texts' hashes agree only by a 64-bit chance), and is not found."""

    def __init__(self, index: Index):
        self.index, self.tasks, self.keys = index, index.tasks, index.union()
        self.pieces, self.shortest = Pieces(index.lookup()), index.shortest()
        bits = min(max(int(len(index.prefixes) * 16).bit_length(), 16), 26)  # 1/16 of each set, up to 64 MB each
        self.shift, self.mask = np.uint64(64 - bits), np.uint64((1 << bits) - 1)
        self.top, self.low = np.zeros(1 << bits, dtype=bool), np.zeros(1 << bits, dtype=bool)
        self.top[self._top(index.prefixes)] = self.low[self._low(index.prefixes)] = True

    # As int64 (the values fit): numpy casts a uint64 index array before a gather, a pass as long as the gather.
    def _top(self, h: np.ndarray) -> np.ndarray:
        return (h >> self.shift).view(np.int64)

    def _low(self, h: np.ndarray) -> np.ndarray:
        return (h & self.mask).view(np.int64)

    def __reduce__(self):
        # A worker gets the index and builds the bitmap itself; the pieces seen here stay here.
        return Matcher, (self.index,)

    def find(self, texts: pa.Array) -> list[list[Hit]]:
        """Each text's matching windows, the texts' windows hashed together."""
        ids, starts = self.pieces.ids(texts)
        hits: list[list[Hit]] = [[] for _ in range(len(texts))]
        windows, zeros = Windows(ids), holes(ids)
        prefix = windows.every(self.shortest)
        maybe = np.flatnonzero(self.top[self._top(prefix)])
        maybe = maybe[self.low[self._low(prefix[maybe])]]
        for length, keys in self.keys.items():
            at = maybe[maybe <= len(ids) - length]
            at = at[zeros[at + length] == zeros[at]]
            h = windows.at(at, length)
            found = member(h, keys)
            at, h = at[found], h[found]
            for doc, pos, key in zip((np.searchsorted(starts, at, side="right") - 1).tolist(), at.tolist(), h.tolist()):
                hits[doc].append((length, pos - int(starts[doc]), key))
        return hits

    def tasks_of(self, hits: list[Hit]) -> list[str]:
        """The tasks whose n-grams the hits are (a sentence two tasks share counts for both)."""
        found: dict[int, list[int]] = {}
        for length, _, key in hits:
            found.setdefault(length, []).append(key)
        return [
            task
            for task, known in self.tasks.items()
            if any(
                length in known and member(np.array(keys, np.uint64), known[length]).any()
                for length, keys in found.items()
            )
        ]


def masked(text: str, hits: list[Hit]) -> tuple[str, int]:
    """`text` with each run of matched words (overlapping or touching windows joined) replaced by MASK, from its
    first word's first character to its last word's last; and how many words were cut."""
    runs: list[list[int]] = []
    for start, end in sorted((start, start + length) for length, start, _ in hits):
        if runs and start <= runs[-1][1]:
            runs[-1][1] = max(runs[-1][1], end)
        else:
            runs.append([start, end])
    spans, pieces, at = word_spans(text), [], 0
    for start, end in runs:
        pieces += [text[at : spans[start][0]], MASK]
        at = spans[end - 1][1]
    return "".join([*pieces, text[at:]]), sum(end - start for start, end in runs)


def word_spans(text: str) -> list[tuple[int, int]]:
    """Each word's (start, end) in `text`: the white-space-separated piece it comes from once simplified
    (word_lists), once per word the piece gives ("don't" is 3), so the i-th span is the i-th word's piece.
    Simplification splits a piece or empties it, and joins pieces only for a spaced contraction (SentEval's
    "don ' t", three pieces, is "do n t"): pieces whose words together differ in number from theirs apart are one
    group, spanning them all."""
    pieces = split_whitespace(pa.array([text]))[0].values.to_pylist()
    spans, at = [], 0
    for group, count in _groups(pieces):
        start = text.index(group[0], at)
        for piece in group:
            at = text.index(piece, at) + len(piece)
        spans += [(start, at)] * count
    return spans


def _groups(pieces: list[str]) -> list[tuple[list[str], int]]:
    """The pieces in groups that simplify apart (a piece alone, or the two or three a spaced contraction joins), each
    with its number of words."""
    n = len(pieces)
    pairs = [f"{a} {b}" for a, b in zip(pieces, pieces[1:])]
    triples = [f"{a} {b} {c}" for a, b, c in zip(pieces, pieces[1:], pieces[2:])]
    counts = pc.list_value_length(word_lists(pa.array(pieces + pairs + triples, pa.string()))).to_numpy(
        zero_copy_only=False
    )
    one, two, three = counts[:n], counts[n : n + len(pairs)], counts[n + len(pairs) :]
    groups, i = [], 0
    while i < n:
        if i + 1 < n and two[i] != one[i] + one[i + 1]:
            groups.append((pieces[i : i + 2], int(two[i])))
            i += 2
        elif i + 2 < n and three[i] != one[i] + one[i + 1] + one[i + 2]:
            groups.append((pieces[i : i + 3], int(three[i])))
            i += 3
        else:
            groups.append((pieces[i : i + 1], int(one[i])))
            i += 1
    return groups
