"""DeCLUTR's anchor/positive span sampler (Giorgi et al., 2021, section 2.1).

For each of A anchors: length floor(p * (l_max - l_min) + l_min) with p ~ Beta(4, 2),
so anchors are long; P positives per anchor with p ~ Beta(2, 4), so positives are
short, each starting uniformly in [anchor_start - l_pos, anchor_end] (clipped to the
document) so that it may overlap the anchor, be adjacent to it, or be subsumed by it.

Anchors of one document lie at least l_max tokens apart, the guarantee of DeCLUTR's
reference sampler (the paper says 2 * l_max; DESIGN.md keeps l_max). A positive is
shorter than l_max and reaches at most l_pos past its anchor, so it never overlaps
another anchor, which would make that anchor a false negative. Given the anchors'
lengths, their placement is uniform over every placement with those gaps. A
document therefore needs A anchors of up to l_max plus A - 1 gaps of l_max:
(2A - 1) * l_max tokens.
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
    return (2 * num_anchors - 1) * max_length


def span_length(rng: np.random.Generator, a: float, b: float, min_length: int, max_length: int) -> int:
    return int(np.floor(rng.beta(a, b) * (max_length - min_length) + min_length))


def anchor_starts(n_tokens: int, lengths: list[int], gap: int, rng: np.random.Generator) -> list[int]:
    """Starts of spans of `lengths`, in this order, at least `gap` apart, uniform over all such placements."""
    k = len(lengths)
    slack = n_tokens - sum(lengths) - (k - 1) * gap
    # Stars and bars: k sorted distinct draws from slack + k, minus their rank, are the free tokens before each span.
    free = np.sort(rng.choice(slack + k, size=k, replace=False)) - np.arange(k)
    taken = np.concatenate([[0], np.cumsum(lengths)[:-1]]) + np.arange(k) * gap
    return [int(f + t) for f, t in zip(free, taken)]


def sample_spans(
    n_tokens: int, num_anchors: int, num_positives: int, min_length: int, max_length: int, rng: np.random.Generator
) -> list[tuple[Span, list[Span]]]:
    """Anchors (in document order) and their positives as token spans of a document of n_tokens tokens."""
    needed = min_document_tokens(num_anchors, max_length)
    if n_tokens < needed:
        raise TooShort(f"{n_tokens} tokens < {needed} ((2 * num_anchors - 1) * max_length)")
    lengths = [span_length(rng, 4, 2, min_length, max_length) for _ in range(num_anchors)]
    pairs = []
    for a_start, a_len in zip(anchor_starts(n_tokens, lengths, max_length, rng), lengths):
        anchor = Span(a_start, a_len)
        positives = []
        for _ in range(num_positives):
            p_len = span_length(rng, 2, 4, min_length, max_length)
            lo, hi = max(0, anchor.start - p_len), min(anchor.end, n_tokens - p_len)
            positives.append(Span(int(rng.integers(lo, hi, endpoint=True)), p_len))
        pairs.append((anchor, positives))
    return pairs
