"""Repeats: one run (or the untrained encoder, or a trained baseline) built once per seed, each repeat its own
dataset, and how the repeats are named; what a seed may be (`Seed`, every seed setting's type). A leaf, so that the
config, the stages and the leaderboard share it.

A repeat with seed s seeds everything random in its training from s: the training's own seed (dropout, MLM
masks) is s, and the seeds of what it trains on are offset by s (the initial weights' model.seed + s, the pairs'
augment.seed + s: their spans, views and order). Seed 0 is therefore today's single run, with its datasets.
A repeat's leaderboard row is named "<row> (seed s)", which is how the leaderboard finds a row's repeats.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, StrictInt

# Every seed, a setting's or a repeat's, is below SEED_LIMIT: numpy's RandomState and scikit-learn take seeds below
# 2**32, and a repeat's seed is added to the seeds of what it trains on (model.seed + s, augment.seed + s), so such a
# sum stays below that, as evaluate.seed plus its k-means runs does, and the pairs' epoch seeds ((augment.seed + s) *
# 1_000_003 + epoch) fit their int64 column. A seed beyond failed deep in a stage (an OverflowError at augment).
SEED_LIMIT = 2**31


def unusable_seed(seed: int) -> str | None:
    """Why `seed` is no seed, None when it is one."""
    if 0 <= seed < SEED_LIMIT:
        return None
    return f"{seed} is no seed: a seed is a whole number from 0 to {SEED_LIMIT - 1:,} (2**31 - 1)"


def _seed(value: int) -> int:
    if why := unusable_seed(value):
        raise ValueError(why)
    return value


# Every seed setting (model.seed, train.seed, ...): one the RNGs take with a repeat's seed added.
Seed = Annotated[int, AfterValidator(_seed)]
StrictSeed = Annotated[StrictInt, AfterValidator(_seed)]

_SEEDED = re.compile(r"^(?P<row>.+) \(seed (?P<seed>\d+)\)$")


def seeded(name: str, seed: int) -> str:
    """The name of `name`'s repeat with `seed` (a row, or a stage instance's label)."""
    return f"{name} (seed {seed})"


def split_seeded(name: str) -> tuple[str, int | None]:
    """(row, seed) of a repeat's name; (name, None) for any other name."""
    m = _SEEDED.match(name)
    return (m["row"], int(m["seed"])) if m else (name, None)


def label(name: str, seed: int) -> str:
    """A seed-dependent instance's label: seed 0 keeps the label it had before repeats existed."""
    return name if seed == 0 else seeded(name, seed)


def seed_list(where: str, seeds, repeats) -> list[int] | None:
    """The seeds that `seeds: [...]` or `repeats: N` (seeds 0..N-1) at `where` ask for; None when neither is set.
    Raises ValueError naming the key."""
    if seeds is not None and repeats is not None:
        raise ValueError(f"{where}: set seeds or repeats, not both")
    if repeats is not None:
        if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
            raise ValueError(f"{where}.repeats: a whole number of at least 1 (got {repeats!r})")
        return list(range(repeats))
    if seeds is None:
        return None
    if (
        not isinstance(seeds, list)
        or not seeds
        or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)
    ):
        raise ValueError(f"{where}.seeds: a non-empty list of whole numbers >= 0 (got {seeds!r})")
    if why := next((w for s in seeds if (w := unusable_seed(s))), None):
        raise ValueError(f"{where}.seeds: {why}")
    if len(set(seeds)) < len(seeds):
        raise ValueError(f"{where}.seeds: {seeds} repeats a seed")
    return list(seeds)
