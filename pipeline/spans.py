"""DeCLUTR's anchor/positive span sampler (Giorgi et al., 2021, section 2.1).

For each of A anchors: length floor(p * (l_max - l_min) + l_min) with p ~ Beta(4, 2),
so anchors are long; P positives per anchor with p ~ Beta(2, 4), so positives are
short, each starting uniformly in [anchor_start - l_pos, anchor_end] so that it may
overlap the anchor, be adjacent to it, or be subsumed by it. The document is cut
into A equal sections with one anchor inside each, which keeps anchors of one
document from overlapping; that is why a document needs A * l_max * 2 tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.errors import InputError


class TooShort(InputError):
    pass


@dataclass(frozen=True)
class Span:
    start: int
    length: int

    @property
    def end(self) -> int:
        return self.start + self.length


def min_document_tokens(num_anchors: int, max_length: int) -> int:
    return num_anchors * max_length * 2


def span_length(rng: np.random.Generator, a: float, b: float, min_length: int, max_length: int) -> int:
    return int(np.floor(rng.beta(a, b) * (max_length - min_length) + min_length))


def sample_spans(n_tokens: int, num_anchors: int, num_positives: int, min_length: int, max_length: int,
                 rng: np.random.Generator) -> list[tuple[Span, list[Span]]]:
    """Anchors and their positives as token spans of a document of n_tokens tokens."""
    needed = min_document_tokens(num_anchors, max_length)
    if n_tokens < needed:
        raise TooShort(f"{n_tokens} tokens < {needed} (num_anchors * max_length * 2)")
    section = n_tokens // num_anchors
    pairs = []
    for i in range(num_anchors):
        a_len = span_length(rng, 4, 2, min_length, max_length)
        a_start = int(rng.integers(i * section, (i + 1) * section - a_len, endpoint=True))
        anchor = Span(a_start, a_len)
        positives = []
        for _ in range(num_positives):
            p_len = span_length(rng, 2, 4, min_length, max_length)
            lo, hi = max(0, anchor.start - p_len), min(anchor.end, n_tokens - p_len)
            positives.append(Span(int(rng.integers(lo, hi, endpoint=True)), p_len))
        pairs.append((anchor, positives))
    return pairs
