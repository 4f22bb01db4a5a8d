"""The tokenizer stage's settings (`tokenizer:`)."""

from __future__ import annotations

from pydantic import Field

from pipeline.config_base import Strict


class TokenizerConfig(Strict):
    """Used only when training from scratch (model.base is null)."""

    vocab_size: int = Field(8192, ge=300)
    min_frequency: int = Field(2, ge=1)
    max_length: int = Field(514, ge=16, description="model_max_length stored with the tokenizer")
