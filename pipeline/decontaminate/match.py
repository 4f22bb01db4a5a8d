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
    Simplification only splits a piece or empties it, never joins two, so the pieces' words are the text's."""
    pieces = pc.utf8_split_whitespace(pa.array([text]))[0].values
    words = pc.list_value_length(word_lists(pieces)).to_numpy(zero_copy_only=False)
    spans, at = [], 0
    for piece, count in zip(pieces.to_pylist(), words.tolist()):
        start = text.index(piece, at)
        at = start + len(piece)
        spans += [(start, at)] * count
    return spans
