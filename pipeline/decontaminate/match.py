"""The evaluation n-grams in corpus documents: which windows match, which tasks they come from, and the
document with them cut out (mode mask)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.decontaminate.ngrams import Index, concatenated, known_run, window_hashes, word_ids, word_lists

Hit = tuple[int, int, int]  # (length in words, first word, hash) of a matching window
MASK = " "  # what a cut-out run of matched words becomes: the text on either side stays apart


def member(h: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """h's entries found in the sorted array `keys` (0 never is)."""
    if not len(keys):
        return np.zeros(len(h), dtype=bool)
    return (keys[np.minimum(np.searchsorted(keys, h), len(keys) - 1)] == h) & (h != 0)


class Matcher:
    """Looks windows up in the index's n-grams: a bitmap of their top bits first (a gather), so that only the
    few windows it lets through are searched for in the sorted hashes."""

    def __init__(self, index: Index):
        self.tasks, self.keys, self.lookup = index.tasks, index.union(), index.lookup()
        total = sum(map(len, self.keys.values()))
        self.shift = np.uint64(64 - min(max(int(total * 16).bit_length(), 16), 26))  # 1/16 of it set, up to 64 MB
        self.bitmap = np.zeros(1 << (64 - int(self.shift)), dtype=bool)
        for keys in self.keys.values():
            self.bitmap[keys >> self.shift] = True

    def find(self, texts: pa.Array) -> list[list[Hit]]:
        """Each text's matching windows, the texts' windows hashed together."""
        lists = word_lists(texts)
        ids, starts = concatenated(lists, word_ids(lists.flatten(), *self.lookup))
        hits: list[list[Hit]] = [[] for _ in range(len(texts))]
        run = known_run(ids)
        for length, h in window_hashes(ids, self.keys).items():
            maybe = np.flatnonzero(self.bitmap[h >> self.shift])
            maybe = maybe[run[maybe] >= length]
            at = maybe[member(h[maybe], self.keys[length])]
            for doc, pos in zip((np.searchsorted(starts, at, side="right") - 1).tolist(), at.tolist()):
                hits[doc].append((length, pos - int(starts[doc]), int(h[pos])))
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
    pieces = pc.utf8_split_whitespace(pa.array([text]))[0].values.to_pylist()
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
