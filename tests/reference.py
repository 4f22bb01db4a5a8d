"""Reference statistics written from their definitions, in plain Python loops, for the fidelity tests: the
expectations of those tests never come from the numpy/scipy calls the code under test makes."""

from __future__ import annotations

import math


def ranks(x) -> list[float]:
    """1-based ranks, tied values sharing the mean of their positions (Spearman's definition)."""
    order = sorted(range(len(x)), key=lambda i: x[i])
    out = [0.0] * len(x)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and x[order[j + 1]] == x[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def pearson(x, y) -> float:
    n = len(x)
    mx, my = sum(x) / n, sum(y) / n
    cov = sum((a - mx) * (b - my) for a, b in zip(x, y))
    return cov / math.sqrt(sum((a - mx) ** 2 for a in x) * sum((b - my) ** 2 for b in y))


def spearman(x, y) -> float:
    return pearson(ranks(list(x)), ranks(list(y)))


def cosine(u, v) -> float:
    u, v = [float(a) for a in u], [float(b) for b in v]
    return sum(a * b for a, b in zip(u, v)) / math.sqrt(sum(a * a for a in u) * sum(b * b for b in v))
