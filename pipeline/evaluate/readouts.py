"""Readouts: how an encoder's last-layer token states become its sentence embedding, the pooling ("mean" or
"cls") and whether a trained head is kept after it ("cls + head": supervised SimCSE's). Two encoders are compared
on the leaderboard only under the same pooling: the untrained start encoder read by mean pooling scores far from
the same weights read by [CLS], so a [CLS] row compared with a mean-pooled reference measures the readout as
much as the training. The reference row is therefore also scored under each other pooling its compared rows use,
as rows of its own named "<reference> [<pooling>]" (variant); a reference whose readout is fixed (a kept head, an
encoder that is no pooled transformer) has none, and rows under another pooling get no difference.

A readout is known from what built the encoder: a run's training config (pooling, keep_head), the untrained
export (mean pooling, no head: the init stage's), a model directory's own sentence-transformers modules, and
OWN for encoders whose embedding is no pooling choice (bag of words, InferSent, USE, random vectors); None where
it cannot be told (a hub model's, an evaluate dataset of a kind this does not know)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from pipeline.locate import is_hub_name
from pipeline.model.exported import export_pooling, st_dir
from pipeline.repeats import seeded, split_seeded

MEAN, CLS = "mean", "cls"
POOLINGS = (MEAN, CLS)
OWN = "own"
HEAD = " + head"
# Encoders whose pooling evaluate can set (pipeline.evaluate.encoders passes spec["pooling"] to them).
POOLED = ("trained", "untrained", "model")
OWN_KINDS = ("fasttext", "infersent", "random", "vectors", "use")


def readout(pooling: str, head: bool) -> str:
    return pooling + (HEAD if head else "")


def pooling(value: str | None) -> str | None:
    """A readout's pooling; None for OWN and unknown readouts."""
    if not isinstance(value, str):
        return None
    base = value.removesuffix(HEAD)
    return base if base in POOLINGS else None


def has_head(value: str | None) -> bool:
    return isinstance(value, str) and value.endswith(HEAD)


def variant(row: str, pool: str) -> str:
    """The name of `row` read by `pool`: "<row> [<pool>]", a repeat's seed staying last (pipeline.repeats)."""
    name, seed = split_seeded(row)
    named = f"{name} [{pool}]"
    return named if seed is None else seeded(named, seed)


def _model_dir(path: str, pool: str | None) -> str | None:
    """A local model directory's readout as pipeline.model.exported.Encoder reads it: the given pooling, else
    the one its sentence-transformers Pooling module declares, else mean; a head where it lists Dense modules.
    None for hub names and remote paths, whose files are not read here."""
    if is_hub_name(path) or "://" in path or not os.path.isdir(path):
        return None
    modules = st_dir(path)
    head = False
    if modules:
        with open(f"{modules}/modules.json", encoding="utf-8") as f:
            head = any(m.get("type", "").rsplit(".", 1)[-1] == "Dense" for m in json.load(f))
    return readout(pool or export_pooling(path) or MEAN, head)


def of_spec(spec: Mapping, training: Mapping | None = None) -> str | None:
    """The readout of an evaluate row's encoder, from its spec (pipeline.evaluate.stage.Row.spec) and, for a
    trained row, its training config (pooling, keep_head)."""
    kind, pool = spec.get("kind"), spec.get("pooling")
    if kind == "trained":
        if training is None or pooling(training.get("pooling")) is None:
            return None
        return readout(pool or training["pooling"], bool(training.get("keep_head")))
    if kind == "untrained":  # the init stage exports mean pooling and no head
        return readout(pool or MEAN, False)
    if kind == "model":
        return _model_dir(spec["path"], pool)
    return OWN if kind in OWN_KINDS else None


def variable(spec: Mapping, value: str | None) -> bool:
    """Whether an encoder can also be read by another pooling: a pooled transformer without a kept head (a head
    was trained on its own pooling's output)."""
    return (
        spec.get("kind") in POOLED and "postprocess" not in spec and pooling(value) is not None and not has_head(value)
    )


def variant_spec(spec: Mapping, pool: str) -> dict:
    return {**spec, "pooling": pool}
