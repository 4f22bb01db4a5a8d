"""Hugging Face files read and written quietly, and written so that transformers 4 and 5 both read them; the
parameters a model folder's weights files hold.

transformers, huggingface_hub and safetensors are imported when a function runs: the exported model's readers, the
ONNX export and the back-translation stage import this module, and answer a mistake in their arguments before those
load.
"""

from __future__ import annotations

import json
import math
import os
from contextlib import contextmanager
from typing import NamedTuple


@contextmanager
def no_file_bars():
    """Without transformers' bar for every weights file read or written ("Loading weights", "Writing model
    shards"): noise on the user's terminal for a step of milliseconds. A download from the Hub keeps its bar."""
    from huggingface_hub import utils as hf_hub_utils
    from transformers.utils import logging as hf_logging

    bars, hub_bars = hf_logging.is_progress_bar_enabled(), not hf_hub_utils.are_progress_bars_disabled()
    hf_logging.disable_progress_bar()  # the Hub's too, given back here
    if hub_bars:
        hf_hub_utils.enable_progress_bars()
    try:
        yield
    finally:
        if bars:
            hf_logging.enable_progress_bar()
        if not hub_bars:
            hf_hub_utils.disable_progress_bars()


@contextmanager
def quiet_transformers():
    """transformers' own load report too, whose expected lines (a missing head, an unused pooler) would read
    as faults."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with no_file_bars():
            yield
    finally:
        hf_logging.set_verbosity(verbosity)


# transformers 5 saves a tokenizer that only tokenizer.json describes as class "TokenizersBackend", a name that
# transformers 4 (and sentence-transformers on it) cannot load; PreTrainedTokenizerFast is that tokenizer's name
# in both.
PORTABLE_TOKENIZERS = {"TokenizersBackend": "PreTrainedTokenizerFast"}


def portable_tokenizer(folder: str) -> None:
    """Give `folder`'s tokenizer_config.json a tokenizer_class that transformers 4 and 5 both load."""
    file = f"{folder}/tokenizer_config.json"
    with open(file, encoding="utf-8") as f:
        settings = json.load(f)
    if (portable := PORTABLE_TOKENIZERS.get(settings.get("tokenizer_class"))) is None:
        return
    with open(file, "w", encoding="utf-8") as f:
        json.dump({**settings, "tokenizer_class": portable}, f, indent=2, ensure_ascii=False)
        f.write("\n")


class Weights(NamedTuple):
    """A model folder's parameters: those that embed (the encoder and any kept head: what the leaderboard counts,
    pipeline.model.exported.Encoder.parameters) and all that its weights files hold, which adds the BERT-style
    pooler that an exported AutoModel keeps and mean or [CLS] pooling never reads."""

    embedding: int
    stored: int


def weights(folder: str) -> Weights | None:
    """The parameters in the safetensors files of `folder` (every module's, a sentence-transformers folder's Dense
    head too), counted from their headers; None where it holds none (weights in another format)."""
    from safetensors import safe_open

    embedding = stored = 0
    files = sorted(
        os.path.join(top, name) for top, _, names in os.walk(folder) for name in names if name.endswith(".safetensors")
    )
    for file in files:
        with safe_open(file, "np") as f:
            for key in f.keys():
                n = math.prod(f.get_slice(key).get_shape())
                stored += n
                embedding += 0 if key.startswith("pooler.") else n
    return Weights(embedding, stored) if files else None
