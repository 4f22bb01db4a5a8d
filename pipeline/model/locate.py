"""Whether a local path holds a model, answered from its files alone (no torch): `model.base`'s pre-flight check."""

from __future__ import annotations

import os

from pipeline.tokenizer.loading import base_path

CONFIG = "config.json"
WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


def is_local(name: str) -> bool:
    """A path rather than a hub name ("org/model"): absolute, relative to here or home, or existing."""
    return os.path.isabs(name) or name.startswith((".", "~")) or os.path.exists(name)


def why_not_a_model(path: str) -> str | None:
    """What keeps `path` from loading as a Hugging Face or sentence-transformers model directory; None when
    nothing does, or when it names a hub model rather than a local path."""
    if not is_local(path):
        return None
    local = os.path.expanduser(path)
    if not os.path.exists(local):
        return f"{path}: no such directory"
    if not os.path.isdir(local):
        return f"{path}: not a directory"
    files = base_path(local)
    if not os.path.isfile(os.path.join(files, CONFIG)):
        return f"{path}: not a model directory (no {CONFIG})"
    if not any(os.path.isfile(os.path.join(files, w)) for w in WEIGHTS):
        return f"{path}: no weights ({', '.join(WEIGHTS)})"
    return None
