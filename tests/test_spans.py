"""DeCLUTR's sampler, checked statistically against the paper's distributions."""

import numpy as np
import pytest

from pipeline.objectives.spans import TooShort, min_document_tokens, sample_spans

L_MIN, L_MAX, A, P = 32, 512, 2, 2


def draws(n_docs=4000, n_tokens=4096, seed=0):
    rng = np.random.default_rng(seed)
    return [sample_spans(n_tokens, A, P, L_MIN, L_MAX, rng) for _ in range(n_docs)]


def expected_length(a, b):
    # floor(p * (l_max - l_min) + l_min) with p ~ Beta(a, b): mean of p is a / (a + b);
    # the floor takes 0.5 off on average.
    return a / (a + b) * (L_MAX - L_MIN) + L_MIN - 0.5


def test_mean_lengths_match_beta_expectations():
    samples = draws()
    anchors = [anchor.length for doc in samples for anchor, _ in doc]
    positives = [p.length for doc in samples for _, ps in doc for p in ps]
    # Standard error of the mean is about 100 / sqrt(8000) ~ 1.1 tokens; allow 4 of them.
    assert np.mean(anchors) == pytest.approx(expected_length(4, 2), abs=4.5)
    assert np.mean(positives) == pytest.approx(expected_length(2, 4), abs=4.5)
    assert min(anchors) >= L_MIN and max(anchors) < L_MAX
    assert min(positives) >= L_MIN and max(positives) < L_MAX


def test_positive_starts_are_uniform_around_the_anchor():
    offsets = []
    for doc in draws(n_docs=3000, n_tokens=1 << 16):  # long documents: no clipping at the edges
        for anchor, positives in doc:
            for p in positives:
                # where the start falls in [anchor_start - l_pos, anchor_end], as a fraction
                offsets.append((p.start - (anchor.start - p.length)) / (anchor.length + p.length))
    assert min(offsets) >= 0 and max(offsets) <= 1
    hist, _ = np.histogram(offsets, bins=5, range=(0, 1))
    assert hist.min() > 0.8 * hist.mean() and hist.max() < 1.2 * hist.mean()


def test_overlapping_adjacent_and_subsumed_positives_all_occur():
    kinds = set()
    for doc in draws(n_docs=2000):
        for anchor, positives in doc:
            for p in positives:
                if p.end == anchor.start or p.start == anchor.end:
                    kinds.add("adjacent")
                elif anchor.start <= p.start and p.end <= anchor.end:
                    kinds.add("subsumed")
                elif p.start < anchor.end and anchor.start < p.end:
                    kinds.add("overlapping")
    assert kinds == {"adjacent", "subsumed", "overlapping"}


def test_spans_stay_inside_the_document_and_anchors_never_overlap():
    for n_tokens in (min_document_tokens(A, L_MAX), 3000, 10_000):
        for doc in draws(n_docs=500, n_tokens=n_tokens, seed=n_tokens):
            spans = [anchor for anchor, _ in doc]
            for anchor, positives in doc:
                assert 0 <= anchor.start and anchor.end <= n_tokens
                assert all(0 <= p.start and p.end <= n_tokens for p in positives)
            spans.sort(key=lambda s: s.start)
            assert all(a.end <= b.start for a, b in zip(spans, spans[1:]))


def test_too_short_document_is_rejected_with_a_reason():
    # A anchors of up to l_max with A - 1 gaps of l_max: 3 * 512 for two anchors.
    assert min_document_tokens(A, L_MAX) == 3 * 512 and min_document_tokens(3, 100) == 500
    with pytest.raises(TooShort, match="1535 tokens < 1536"):
        sample_spans(1535, A, P, L_MIN, L_MAX, np.random.default_rng(0))


def test_anchors_lie_l_max_apart_and_no_positive_overlaps_another_anchor_on_10000_documents():
    """The reference sampler's guarantee, checked on every sampled document by a direct loop."""
    rng = np.random.default_rng(12)
    gaps = []
    for _ in range(10_000):
        num_anchors = int(rng.integers(2, 5))
        n_tokens = int(rng.integers((2 * num_anchors - 1) * L_MAX, (2 * num_anchors + 2) * L_MAX))
        doc = sample_spans(n_tokens, num_anchors, P, L_MIN, L_MAX, rng)
        assert len(doc) == num_anchors
        for i, (anchor, positives) in enumerate(doc):
            assert 0 <= anchor.start and anchor.start + anchor.length <= n_tokens
            for j, (other, _) in enumerate(doc):
                if j == i:
                    continue
                # tokens strictly between the two anchors, whichever comes first
                gap = (
                    other.start - (anchor.start + anchor.length)
                    if other.start > anchor.start
                    else anchor.start - (other.start + other.length)
                )
                assert gap >= L_MAX, (n_tokens, doc)
                gaps.append(gap)
                for p in positives:  # no token index in both: one ends before the other starts
                    assert p.start + p.length <= other.start or other.start + other.length <= p.start, (n_tokens, doc)
    assert min(gaps) == L_MAX  # documents of the minimum length leave no slack: the bound is reached


def test_anchor_placement_is_spread_over_the_document():
    """Given their lengths, anchors can sit anywhere the gaps allow: first-anchor starts cover the room."""
    rng = np.random.default_rng(5)
    starts = [sample_spans(4096, A, P, L_MIN, L_MAX, rng)[0][0].start for _ in range(3000)]
    assert min(starts) < 50 and max(starts) > 4096 - 3 * L_MAX


def test_same_seed_same_spans():
    assert draws(n_docs=5, seed=3) == draws(n_docs=5, seed=3)
    assert draws(n_docs=5, seed=3) != draws(n_docs=5, seed=4)
