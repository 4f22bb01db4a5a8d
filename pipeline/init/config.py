"""The init stage's settings (`model:`): the encoder before training, a base model or one built from scratch."""

from __future__ import annotations

from pydantic import Field, model_validator

from pipeline.config_base import Strict
from pipeline.repeats import Seed


class ModelConfig(Strict):
    """From scratch (base null), a RoBERTa of these sizes; the defaults are DistilRoBERTa-base's shape, the
    encoder DeCLUTR-small trains (the paper starts from its weights, so it names no from-scratch sizes). With a
    base model the sizes are the base's own and these go unused."""

    base: str | None = Field(None, description="HF hub name or local directory; null trains from scratch")
    hidden_size: int = Field(768, ge=8)
    num_layers: int = Field(6, ge=1)
    num_heads: int = Field(12, ge=1)
    intermediate_size: int = Field(3072, ge=8)
    dropout: float = Field(0.1, ge=0, lt=1, description="from scratch: hidden and attention dropout")
    max_position_embeddings: int = Field(
        514, ge=16, description="RoBERTa's 514: 512 positions, numbered from padding_idx + 1"
    )
    seed: Seed = 0

    @model_validator(mode="after")
    def _heads(self) -> ModelConfig:
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size ({self.hidden_size}) must be divisible by num_heads ({self.num_heads})")
        return self
