"""SentEval's supervised relatedness protocol for STS-B and SICK-R (its SICKRelatednessEval and
RelatednessPytorch), the number DeCLUTR's tables report for these two tasks.

A pair (u, v) becomes the features [|u-v|, u*v]. Its gold score y becomes a
distribution over the scores 1..5 (Tai et al., 2015): mass 1-(y-floor(y)) on
floor(y) and y-floor(y) on floor(y)+1. A linear layer with a softmax is
trained on the train split to that distribution with mean squared error (Adam
at its defaults, batches of 64, no weight decay); the predicted score is the
expected value of the softmax over 1..5. Training runs in rounds of 50
epochs; after each round the dev Pearson of the predicted scores is checked,
the best round's model is kept, and training stops at the fourth round that
does not improve on the best (the count is never reset) or after 1050 epochs.

Everything SentEval seeds is seeded the same way (1111 by default): the
layer's initialisation draws from torch's generator right after
torch.manual_seed(seed), and each epoch's shuffle is numpy's legacy
generator seeded with `seed`, drawn over the train pairs in SentEval's order
(sorted by the two sentences' word counts, then the score). So on the same
embeddings the scores match SentEval's own code up to float rounding (CPU here,
CUDA there).

STS-B's scores run 0..5 and SentEval encodes them as they are, without
rescaling: a score below 1 becomes a target with mass y on score 1 only
(summing to y, not 1). That is what produced the published numbers, so it is
kept.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from scipy import stats
from threadpoolctl import threadpool_limits

from pipeline.progress import Progress

PROTOCOL = "senteval"
SEED = 1111
N_SCORES = 5
BATCH_SIZE = 64
EPOCHS_PER_ROUND = 50
MAX_EPOCH = 1000
PATIENCE = 3  # SentEval stops at the non-improving round that finds this many earlier ones
EPOCHS = (
    MAX_EPOCH // EPOCHS_PER_ROUND + 1
) * EPOCHS_PER_ROUND  # the most a fit runs: its last round starts at MAX_EPOCH


def encode_labels(gold: np.ndarray, n: int = N_SCORES) -> np.ndarray:
    """Tai et al.'s target distribution over scores 1..n for each gold score."""
    target = np.zeros((len(gold), n), dtype=np.float32)
    for row, y in enumerate(gold):
        low = np.floor(y)
        for score in range(1, n + 1):
            if score == low + 1:
                target[row, score - 1] = y - low
            if score == low:
                target[row, score - 1] = low - y + 1
        # (A score of exactly n puts 1 on n; below 1 there is no floor slot: SentEval's encoding.)
    return target


def pair_features(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    return np.concatenate([np.abs(u - v), u * v], axis=1).astype(np.float32)


class _Regressor:
    """Linear(d, 5) + softmax with mean squared error and Adam (torch's defaults: lr 1e-3, betas 0.9 and
    0.999, eps 1e-8), written out in numpy: SentEval's model, at a fraction of autograd's per-step cost
    over the ~100,000 steps of a run. Initialised as torch.nn.Linear is, from torch's generator."""

    LR, BETA1, BETA2, EPS = 1e-3, 0.9, 0.999, 1e-8

    def __init__(self, dim: int, seed: int):
        with torch.random.fork_rng(devices=[]):  # SentEval's seeding, without moving the caller's generator
            torch.manual_seed(seed)
            layer = torch.nn.Linear(dim, N_SCORES)
        self.params = [layer.weight.detach().numpy().T.copy(), layer.bias.detach().numpy().copy()]
        self.moments = [(np.zeros_like(p), np.zeros_like(p)) for p in self.params]
        self.steps = 0

    def proba(self, x: np.ndarray) -> np.ndarray:
        z = x @ self.params[0] + self.params[1]
        e = np.exp(z - z.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    def step(self, x: np.ndarray, target: np.ndarray) -> None:
        s = self.proba(x)
        g = np.float32(2 / s.size) * (s - target)  # d mean((s - t)^2) / ds
        gz = s * (g - (g * s).sum(axis=1, keepdims=True))  # through the softmax
        self.steps += 1
        correction1 = 1 - self.BETA1**self.steps
        correction2 = np.sqrt(1 - self.BETA2**self.steps)
        for p, grad, (m, v) in zip(self.params, (x.T @ gz, gz.sum(axis=0)), self.moments):
            m *= self.BETA1
            m += (1 - self.BETA1) * grad
            v *= self.BETA2
            v += (1 - self.BETA2) * grad * grad
            p -= np.float32(self.LR / correction1) * m / (np.sqrt(v) / np.float32(correction2) + np.float32(self.EPS))

    def expected(self, x: np.ndarray) -> np.ndarray:
        return self.proba(x).astype(np.float64) @ np.arange(1, N_SCORES + 1, dtype=np.float64)


def _pearson(pred: np.ndarray, gold: np.ndarray) -> float:
    r = float(stats.pearsonr(pred, gold).statistic) if np.ptp(pred) > 0 else float("nan")
    return 0.0 if np.isnan(r) else r  # SentEval counts a constant prediction as 0


def fit_predict(
    train_x: np.ndarray,
    train_gold: np.ndarray,
    dev_x: np.ndarray,
    dev_gold: np.ndarray,
    test_x: np.ndarray,
    seed: int = SEED,
) -> tuple[float, np.ndarray]:
    """(best dev Pearson, predicted test scores) of the regressor trained on train, selected on dev."""
    x = np.ascontiguousarray(train_x, dtype=np.float32)
    y = encode_labels(train_gold)
    dev = np.ascontiguousarray(dev_x, dtype=np.float32)
    model = _Regressor(x.shape[1], seed)
    shuffle = np.random.RandomState(seed)
    best, best_model, misses, epoch = -1.0, model, 0, 0
    # ~100,000 tiny products: a multi-threaded BLAS only adds overhead
    with threadpool_limits(limits=1), Progress("regressor (stops early)", EPOCHS, "epochs") as progress:
        while epoch <= MAX_EPOCH:
            for _ in range(EPOCHS_PER_ROUND):
                order = shuffle.permutation(len(x))
                for i in range(0, len(x), BATCH_SIZE):
                    idx = order[i : i + BATCH_SIZE]
                    model.step(x[idx], y[idx])
            epoch += EPOCHS_PER_ROUND
            progress.update(EPOCHS_PER_ROUND)
            r = _pearson(model.expected(dev), dev_gold)
            if r > best:
                best, best_model = r, copy.deepcopy(model)
            else:
                if misses >= PATIENCE:
                    break
                misses += 1
    return best, best_model.expected(np.ascontiguousarray(test_x, dtype=np.float32))


def senteval_order(sent1: list[str], sent2: list[str], gold: np.ndarray) -> list[int]:
    """SentEval's order of a split's pairs: by the word counts of both sentences, then the score (stable)."""
    return sorted(range(len(gold)), key=lambda i: (len(sent1[i].split()), len(sent2[i].split()), gold[i]))
