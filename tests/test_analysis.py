import os
from pathlib import Path

import numpy as np
import pytest

from pipeline.baselines.vectors import RandomEncoder
from pipeline.evaluate.analysis import alignment, score_analysis, sentence_anisotropy, token_anisotropy, uniformity
from pipeline.evaluate.encoders import token_vectors
from pipeline.readers.sts import StsSubset, find_sts

SHARED = os.environ.get("CPIPE_SHARED_DATA")


def test_alignment_is_zero_for_identical_pairs_and_four_for_opposite():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 8))
    assert alignment(x, 3 * x) == pytest.approx(0.0)  # normalised first: scale does not matter
    assert alignment(x, -x) == pytest.approx(4.0)
    assert 0 < alignment(x, x + 0.1 * rng.normal(size=x.shape)) < alignment(x, rng.normal(size=x.shape))
    assert alignment(x, -x, alpha=1) == pytest.approx(2.0)


def test_uniformity_matches_the_definition():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(30, 4))
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    pairs = [(i, j) for i in range(30) for j in range(i + 1, 30)]
    expected = np.log(np.mean([np.exp(-2 * np.sum((u[i] - u[j]) ** 2)) for i, j in pairs]))
    assert uniformity(x) == pytest.approx(expected)
    collapsed = np.ones((30, 4)) + 1e-9 * rng.normal(size=(30, 4))
    assert uniformity(collapsed) == pytest.approx(0.0, abs=1e-6)  # the worst value: everything in one point
    assert uniformity(x) < -1  # spread out on the sphere


def test_sentence_anisotropy_is_the_mean_cosine_of_distinct_pairs():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(40, 6))
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    cos = u @ u.T
    assert sentence_anisotropy(x) == pytest.approx(cos[~np.eye(40, dtype=bool)].mean())
    assert sentence_anisotropy(x + 10) > 0.9  # a common direction makes every pair similar
    assert abs(sentence_anisotropy(rng.normal(size=(2000, 64)))) < 0.01


def test_token_anisotropy_is_ethayarajhs_expected_cosine_of_random_words_from_different_sentences():
    rng = np.random.default_rng(4)
    tokens = [rng.normal(size=(n, 5)) for n in (3, 0, 7, 1, 4)]  # an empty sentence is never drawn
    # Exactly: over all pairs of occurrences in different sentences, each first occurrence weighted 1/N and
    # its partner uniform over the occurrences outside its sentence.
    occ = [(i, v / np.linalg.norm(v)) for i, t in enumerate(tokens) for v in t]
    expected = np.mean([np.mean([a @ b for j, b in occ if j != i]) for i, a in occ])
    assert token_anisotropy(tokens, pairs=200_000, seed=0) == pytest.approx(expected, abs=0.01)
    assert token_anisotropy(tokens, seed=3) == token_anisotropy(tokens, seed=3)  # seeded
    # The same word in two sentences is never paired with itself: one-token sentences of one vector each.
    same = [np.ones((1, 4)), np.ones((1, 4)) * 2]
    assert token_anisotropy(same) == pytest.approx(1.0)
    assert token_anisotropy([np.ones((5, 4)), np.zeros((0, 4))]) is None  # one sentence: no pair
    # A common direction makes random words similar (Ethayarajh's finding for contextual models).
    assert token_anisotropy([t + 10 for t in tokens]) > 0.9


def test_score_analysis_uses_pairs_at_or_above_four_as_positives():
    sent1 = ["a", "b", "c", "d"]
    sent2 = ["a2", "b2", "c2", "d2"]
    gold = np.array([4.0, 4.8, 3.99, 0.5])
    subsets = [
        StsSubset("STSB", "sts-test", "test", sent1, sent2, gold),
        StsSubset("STSB", "sts-dev", "dev", ["a", "e"], ["a2", "f"], np.array([1.0, 2.0])),
        StsSubset("STS12", "MSRpar", "test", ["z"], ["y"], np.array([5.0])),
    ]
    rng = np.random.default_rng(3)
    table = {s: rng.normal(size=5) for s in "abcdefzy"}
    table.update({f"{s}2": table[s] + 0.01 * rng.normal(size=5) for s in "abcd"})
    table["c2"] = -table["c"]  # below the threshold: must not count as a positive
    seen = []

    def encode(sentences):
        seen.append(list(sentences))
        return np.stack([table[s] for s in sentences])

    def tokens(sentences):
        return [np.stack([table[s], -table[s]]) for s in sentences]  # two "tokens" per sentence

    subsets.append(StsSubset("STSB", "sts-train", "train", ["t"], ["t2"], np.array([5.0])))  # never described
    rows = score_analysis(encode, subsets, tokens=tokens, seed=5)
    got = {(r["split"], r["metric"]): r for r in rows}
    assert set(got) == {
        ("test", "alignment"),
        ("test", "uniformity"),
        ("test", "sentence_anisotropy"),
        ("test", "anisotropy"),
        ("dev", "uniformity"),
        ("dev", "sentence_anisotropy"),
    }  # dev has no pair >= 4; tokens on test only
    assert got[("test", "alignment")]["n"] == 2 and got[("test", "alignment")]["value"] < 0.01
    assert got[("test", "uniformity")]["n"] == 8
    emb = np.stack([table[s] for s in ["a", "a2", "b", "b2", "c", "c2", "d", "d2"]])
    assert got[("test", "uniformity")]["value"] == pytest.approx(uniformity(emb))
    assert got[("test", "sentence_anisotropy")]["value"] == pytest.approx(sentence_anisotropy(emb))
    sentences = sent1 + sent2  # the order the split's sentences are first met
    assert got[("test", "anisotropy")]["value"] == pytest.approx(token_anisotropy(tokens(sentences), seed=5))
    assert got[("test", "anisotropy")]["n"] == 1000 and got[("test", "anisotropy")]["protocol"] == "ethayarajh"
    assert {r["task"] for r in rows} == {"STSB"}
    assert {r["protocol"] for r in rows if r["metric"] != "anisotropy"} == {"simcse"}
    assert all(r["subset"] == "all" and type(r["value"]) is float for r in rows)
    assert all("z" not in batch for batch in seen)  # STS12 is not STS-B


@pytest.mark.skipif(not SHARED, reason="CPIPE_SHARED_DATA is not set (path to the team's shared data directory)")
def test_real_stsb_geometry():
    subsets, _ = find_sts(Path(SHARED) / "eval" / "senteval")
    encoder = RandomEncoder(dim=64)
    rows = {
        (r["split"], r["metric"]): r
        for r in score_analysis(encoder.encode, subsets, tokens=lambda xs: token_vectors(encoder, xs, 64), seed=1111)
    }
    stsb_test = next(s for s in subsets if s.task == "STSB" and s.split == "test")
    assert rows[("test", "alignment")]["n"] == int((stsb_test.gold >= 4).sum())
    assert rows[("test", "uniformity")]["n"] == len(set(stsb_test.sent1 + stsb_test.sent2))
    # Averaged word vectors: paraphrases share words, so positives sit closer than random pairs.
    assert rows[("test", "alignment")]["value"] < 2 - 2 * rows[("test", "sentence_anisotropy")]["value"]
    # Random word vectors are isotropic: two random words are orthogonal unless they are the same word.
    assert abs(rows[("test", "anisotropy")]["value"]) < 0.1
    assert -4 < rows[("test", "uniformity")]["value"] < 0
