"""The STS and relatedness numbers against a test-local implementation of SentEval's method, written from its
description (senteval/sts.py, senteval/sick.py, senteval/tools/relatedness.py) and not from our code: plain loops
for ranks and correlations, Tai et al.'s target encoding by hand, and the regressor trained with torch's own
nn.Linear, Softmax, MSELoss and Adam under autograd. Fixed embeddings: seeded random vectors per sentence."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from pipeline.evaluate.sts import score_sts
from pipeline.readers.sts import StsSubset
from tests.reference import cosine, pearson, spearman

DIM = 6


def _sentence(rng, prefix: str, i: int) -> str:
    # Varying word counts, so SentEval's (length, length, score) sort has work to do.
    return " ".join([f"{prefix}{i}"] + [f"w{int(rng.integers(30))}" for _ in range(int(rng.integers(1, 6)))])


def _embeddings(sentences) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    table = {}
    for s in sentences:
        if s not in table:
            table[s] = rng.normal(size=DIM).astype(np.float32)
    return table


def test_sts_per_subset_mean_and_concatenated_spearman_match_a_loop():
    rng = np.random.default_rng(0)
    subsets = []
    for name, n in (("A", 12), ("B", 9), ("C", 15)):
        s1 = [_sentence(rng, f"{name}l", i) for i in range(n)]
        s2 = [_sentence(rng, f"{name}r", i) for i in range(n)]
        gold = np.round(rng.uniform(0, 5, n), 1)
        gold[1] = gold[0]  # a tie in the gold scores
        subsets.append(StsSubset("STS14", name, "test", s1, s2, gold))
    table = _embeddings(x for s in subsets for x in (*s.sent1, *s.sent2))
    rows = {
        (r["subset"], r["metric"], r["protocol"]): r["value"]
        for r in score_sts(lambda xs: np.stack([table[x] for x in xs]), subsets)
    }

    per_subset, all_sims, all_gold = [], [], []
    for s in subsets:
        sims = [cosine(table[a], table[b]) for a, b in zip(s.sent1, s.sent2)]
        per_subset.append(spearman(sims, s.gold.tolist()))
        assert rows[(s.name, "spearman", "subset")] == pytest.approx(per_subset[-1], abs=1e-6)
        assert rows[(s.name, "pearson", "subset")] == pytest.approx(pearson(sims, s.gold.tolist()), abs=1e-6)
        all_sims += sims
        all_gold += s.gold.tolist()
    # SentEval's results["all"]["spearman"]["mean"]: the unweighted mean over subsets.
    assert rows[("all", "spearman", "senteval")] == pytest.approx(sum(per_subset) / len(per_subset), abs=1e-6)
    # SimCSE's "all": one Spearman over every pair of the task.
    assert rows[("all", "spearman", "simcse")] == pytest.approx(spearman(all_sims, all_gold), abs=1e-6)


def _tai_targets(scores) -> list[list[float]]:
    """SentEval's encode_labels, from its description: score i of 1..5 gets y - floor(y) when i = floor(y) + 1
    and floor(y) - y + 1 when i = floor(y)."""
    out = []
    for y in scores:
        row = [0.0] * 5
        for i in range(1, 6):
            if i == math.floor(y) + 1:
                row[i - 1] = y - math.floor(y)
            if i == math.floor(y):
                row[i - 1] = math.floor(y) - y + 1
        out.append(row)
    return out


def _senteval_regressor(train, dev, test, seed=1111):
    """RelatednessPytorch as SentEval describes it; returns (best dev Pearson, expected test scores)."""
    features = {
        k: torch.tensor(np.array([np.concatenate([np.abs(u - v), u * v]) for u, v, _ in split]))
        for k, split in (("train", train), ("dev", dev), ("test", test))
    }
    np_rng = np.random.RandomState(seed)  # SentEval: np.random.seed(seed), then np.random.permutation per epoch
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(2 * DIM, 5), torch.nn.Softmax(dim=-1))
    loss_fn = torch.nn.MSELoss()
    optimizer = torch.optim.Adam(model.parameters(), weight_decay=0.0)
    targets = torch.tensor(_tai_targets([g for _, _, g in train]), dtype=torch.float32)
    x = features["train"]

    def expected(inputs):
        with torch.no_grad():
            probs = model(inputs).double().numpy()
        return [sum(p[i] * (i + 1) for i in range(5)) for p in probs]

    best, best_model, misses, epoch, stop = -1.0, None, 0, 0, False
    while not stop and epoch <= 1000:
        for _ in range(50):
            permutation = np_rng.permutation(len(x))
            for i in range(0, len(x), 64):
                idx = torch.from_numpy(permutation[i : i + 64]).long()
                loss = loss_fn(model(x[idx]), targets[idx])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        epoch += 50
        r = pearson(expected(features["dev"]), [g for _, _, g in dev])
        if r > best:
            best, best_model = r, copy.deepcopy(model)
        else:
            if misses >= 3:
                stop = True
            misses += 1
    model = best_model
    return best, expected(features["test"])


@pytest.mark.parametrize("task, low", [("STSB", 0.0), ("SICKR", 1.0)])
def test_relatedness_regressor_matches_senteval_described_loop(task, low):
    rng = np.random.default_rng(1)
    sizes = {"train": 100, "dev": 40, "test": 50}  # two batches of 64 per epoch: a full and a partial one
    subsets, table = [], {}
    for split, n in sizes.items():
        s1 = [_sentence(rng, f"{split}l", i) for i in range(n)]
        s2 = [_sentence(rng, f"{split}r", i) for i in range(n)]
        subsets.append((split, s1, s2))
    table = _embeddings(x for _, s1, s2 in subsets for x in (*s1, *s2))
    # Gold scores that the features can partly predict; STS-B's run 0..5 (SentEval does not rescale them).
    direction = rng.normal(size=2 * DIM)
    data = []
    for split, s1, s2 in subsets:
        f = np.array([np.concatenate([np.abs(table[a] - table[b]), table[a] * table[b]]) for a, b in zip(s1, s2)])
        raw = f @ direction + rng.normal(scale=0.5, size=len(s1))
        gold = np.round(low + (5 - low) * (raw - raw.min()) / np.ptp(raw), 2)
        data.append(StsSubset(task, split, split, s1, s2, gold))
    rows = {
        (r["split"], r["metric"], r["protocol"]): (r["value"], r["n"])
        for r in score_sts(lambda xs: np.stack([table[x] for x in xs]), data, seed=1111)
    }

    # SentEval sorts each split by (words in A, words in B, score) before training, and trains in that order.
    splits = {}
    for s in data:
        triples = sorted(
            zip(s.sent1, s.sent2, s.gold.tolist()), key=lambda z: (len(z[0].split()), len(z[1].split()), z[2])
        )
        splits[s.split] = [(table[a], table[b], g) for a, b, g in triples]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a thousand tiny steps: threads only slow them down
    try:
        dev_pearson, predicted = _senteval_regressor(splits["train"], splits["dev"], splits["test"])
    finally:
        torch.set_num_threads(threads)
    test_gold = [g for _, _, g in splits["test"]]

    # Same seed, same initialisation, same shuffles: only float summation order differs (autograd here, numpy
    # there), so the numbers agree far inside 0.1 points.
    assert rows[("test", "spearman", "senteval")][0] == pytest.approx(spearman(predicted, test_gold), abs=1e-4)
    assert rows[("test", "pearson", "senteval")][0] == pytest.approx(pearson(predicted, test_gold), abs=1e-4)
    assert rows[("dev", "pearson", "senteval")][0] == pytest.approx(dev_pearson, abs=1e-4)
    assert rows[("test", "spearman", "senteval")][1] == 50 and rows[("dev", "pearson", "senteval")][1] == 40
    # And the regressor is not cosine: the two protocols are different numbers.
    assert rows[("test", "spearman", "senteval")][0] != pytest.approx(rows[("test", "spearman", "cosine")][0])


def test_tai_targets_by_hand():
    from pipeline.evaluate.relatedness import encode_labels

    got = encode_labels(np.array([1.0, 2.3, 4.75, 5.0, 0.4]))
    expected = [
        [1, 0, 0, 0, 0],
        [0, 0.7, 0.3, 0, 0],
        [0, 0, 0, 0.25, 0.75],
        [0, 0, 0, 0, 1],
        [0.4, 0, 0, 0, 0],
    ]  # below 1: SentEval's encoding puts y on score 1 and nothing else
    np.testing.assert_allclose(got, expected, atol=1e-6)
    np.testing.assert_allclose(got, _tai_targets([1.0, 2.3, 4.75, 5.0, 0.4]), atol=1e-6)
