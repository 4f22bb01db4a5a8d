"""MinHash-LSH near-duplicates on made-up documents whose true Jaccard similarity is known."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.filter.neardup import MERSENNE, NearDuplicates, lsh_params, minhash, shingle_hashes


def is_duplicate(nd: NearDuplicates, text: str) -> bool:
    """The filter's decision on one document: its signature, then whether a kept one is near it."""
    return nd.seen(nd.signature(text))


def fresh_words(rng: np.random.Generator, n: int) -> list[str]:
    # Random 8-letter words: practically never repeated, so every 5-gram shingle is distinct.
    letters = rng.integers(ord("a"), ord("z") + 1, size=(n, 8))
    return ["".join(map(chr, row)) for row in letters]


def jaccard(a: list[str], b: list[str], n: int = 5) -> float:
    sa = {tuple(a[i : i + n]) for i in range(len(a) - n + 1)}
    sb = {tuple(b[i : i + n]) for i in range(len(b) - n + 1)}
    return len(sa & sb) / len(sa | sb)


def pair_with_jaccard(rng: np.random.Generator, target: float, n_words: int = 300) -> tuple[list[str], list[str]]:
    """Two documents sharing their first words: sharing s of m shingles each gives Jaccard s / (2m - s)."""
    m = n_words - 4
    shared = round(2 * m * target / (1 + target))
    a = fresh_words(rng, n_words)
    b = a[: shared + 4] + fresh_words(rng, n_words - shared - 4)
    return a, b


def test_minhash_matches_python_integers():
    rng = np.random.default_rng(0)
    edge = [0, 1, MERSENNE - 1, MERSENNE, MERSENNE + 1, 2**32 - 1, 2**32, 2**61, 2**64 - 1]
    hashes = np.array(edge + [int(v) for v in rng.integers(0, 2**64 - 1, size=2000, dtype=np.uint64)], dtype=np.uint64)
    a = np.array(
        [1, MERSENNE - 1, 2**32 + 1] + list(rng.integers(1, MERSENNE, size=20, dtype=np.uint64)), dtype=np.uint64
    )
    b = np.array([0, MERSENNE - 1, 12345] + list(rng.integers(0, MERSENNE, size=20, dtype=np.uint64)), dtype=np.uint64)
    expected = [min((int(ak) * int(x) + int(bk)) % MERSENNE for x in hashes) for ak, bk in zip(a, b)]
    assert minhash(hashes, a, b).tolist() == expected
    # Each single value too, not only the minimum (the minimum could hide wrong large values).
    for x in edge:
        one = np.array([x], dtype=np.uint64)
        assert minhash(one, a, b).tolist() == [(int(ak) * x + int(bk)) % MERSENNE for ak, bk in zip(a, b)]


def test_shingles_are_stable_lowercase_word_ngrams():
    def hashes(text: str) -> np.ndarray:
        return np.concatenate(list(shingle_hashes(text, 5)))

    h = hashes("The quick  brown fox jumps over")
    assert len(h) == 2 and h.dtype == np.uint64
    assert hashes("the QUICK brown fox\njumps over").tolist() == h.tolist()
    # blake2b, not Python's per-process salted hash(): fixed across runs and machines.
    assert hashes("one two").tolist() == [0x5DEC09E91A8DCB07]


def test_lsh_params_fit_the_threshold():
    for threshold in (0.3, 0.5, 0.8, 0.9):
        bands, rows = lsh_params(threshold, 128)
        assert bands * rows <= 128
        # The band-collision S-curve rises around (just below, favouring recall) the threshold.
        assert threshold - 0.2 < (1 / bands) ** (1 / rows) < threshold
    assert lsh_params(0.8, 128) == (14, 9)
    # Stricter thresholds need more rows per band.
    assert lsh_params(0.9, 128)[1] > lsh_params(0.8, 128)[1] > lsh_params(0.5, 128)[1]


def test_identical_texts_are_duplicates():
    text = " ".join(fresh_words(np.random.default_rng(1), 300))
    nd = NearDuplicates()
    assert is_duplicate(nd, text) is False
    assert is_duplicate(nd, text) is True
    assert is_duplicate(nd, text.upper().replace(" ", "\n")) is True


@pytest.mark.parametrize("n_changed", [1, 2])
def test_a_few_changed_words_is_a_duplicate(n_changed):
    rng = np.random.default_rng(2)
    words = fresh_words(rng, 300)
    copy = list(words)
    for pos, word in zip(rng.choice(300, size=n_changed, replace=False), fresh_words(rng, n_changed)):
        copy[pos] = word
    assert jaccard(words, copy) < 1
    nd = NearDuplicates(threshold=0.8)
    assert not is_duplicate(nd, " ".join(words))
    assert is_duplicate(nd, " ".join(copy))


def test_unrelated_document_is_kept():
    rng = np.random.default_rng(3)
    nd = NearDuplicates()
    assert not is_duplicate(nd, " ".join(fresh_words(rng, 300)))
    assert not is_duplicate(nd, " ".join(fresh_words(rng, 300)))
    assert len(nd.signatures) == 2


def test_half_overlap_depends_on_threshold():
    a, b = pair_with_jaccard(np.random.default_rng(4), 0.5)
    assert jaccard(a, b) == pytest.approx(0.5, abs=0.01)
    strict, loose = NearDuplicates(threshold=0.8), NearDuplicates(threshold=0.3)
    assert not is_duplicate(strict, " ".join(a)) and not is_duplicate(loose, " ".join(a))
    assert not is_duplicate(strict, " ".join(b))
    assert is_duplicate(loose, " ".join(b))


def test_first_of_a_group_is_kept_and_later_ones_dropped():
    rng = np.random.default_rng(5)
    base, other = fresh_words(rng, 300), fresh_words(rng, 300)
    variants = [base[:k] + fresh_words(rng, 1) + base[k + 1 :] for k in (50, 150, 250)]
    stream = [base, other, *variants, other]
    nd = NearDuplicates()
    assert [is_duplicate(nd, " ".join(w)) for w in stream] == [False, False, True, True, True, True]
    assert len(nd.signatures) == 2  # duplicates are not indexed


def test_same_seed_same_decisions():
    rng = np.random.default_rng(6)
    docs = []
    for target in np.linspace(0.6, 0.95, 30):
        a, b = pair_with_jaccard(rng, float(target), n_words=120)
        docs += [" ".join(a), " ".join(b)]
    one, two, other_seed = NearDuplicates(seed=7), NearDuplicates(seed=7), NearDuplicates(seed=8)
    decisions = [is_duplicate(one, d) for d in docs]
    assert decisions == [is_duplicate(two, d) for d in docs]
    assert [s.tolist() for s in one.signatures] == [s.tolist() for s in two.signatures]
    assert True in decisions and decisions[1::2] != [True] * 30
    # Another seed is another hash family: different signatures.
    is_duplicate(other_seed, docs[0])
    assert other_seed.signatures[0].tolist() != one.signatures[0].tolist()


def test_short_texts_are_one_shingle():
    nd = NearDuplicates(ngram=5)
    assert not is_duplicate(nd, "hello world")
    assert is_duplicate(nd, "Hello   World")
    assert not is_duplicate(nd, "hello there world")
    assert not is_duplicate(nd, "")
    assert is_duplicate(nd, "  \n ")


def test_bad_parameters_rejected():
    with pytest.raises(ValueError, match="threshold"):
        NearDuplicates(threshold=0)
    with pytest.raises(ValueError, match="ngram"):
        NearDuplicates(ngram=0)


def test_decision_rates_around_the_threshold():
    """~200 pairs of known Jaccard at threshold 0.8: clear pairs are decided right, borderline ones by a slope."""
    rng = np.random.default_rng(7)
    groups = {(0.2, 0.5): [], (0.72, 0.78): [], (0.82, 0.88): [], (0.9, 1.0): []}
    seed = 0
    for (lo, hi), flags in groups.items():
        for _ in range(50):
            a, b = pair_with_jaccard(rng, float(rng.uniform(lo, hi)))
            assert lo - 0.01 <= jaccard(a, b) <= hi + 0.01
            nd = NearDuplicates(threshold=0.8, seed=seed)  # a fresh hash family per pair
            seed += 1
            is_duplicate(nd, " ".join(a))
            flags.append(is_duplicate(nd, " ".join(b)))
    rate = {span: float(np.mean(flags)) for span, flags in groups.items()}
    assert rate[(0.2, 0.5)] < 0.05, rate
    assert rate[(0.72, 0.78)] < 0.5, rate
    assert rate[(0.82, 0.88)] > 0.5, rate
    assert rate[(0.9, 1.0)] > 0.95, rate
