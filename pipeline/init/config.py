"""The init stage's settings (`model:`): the encoder before training, a base model or one built from scratch."""

from __future__ import annotations

from pydantic import Field, model_validator

from pipeline.config_base import Strict


class ModelConfig(Strict):
    base: str | None = Field(None, description="HF hub name or local directory; null trains from scratch")
    hidden_size: int = Field(128, ge=8)
    num_layers: int = Field(2, ge=1)
    num_heads: int = Field(2, ge=1)
    intermediate_size: int = Field(512, ge=8)
    dropout: float = Field(0.1, ge=0, lt=1)
    max_position_embeddings: int = Field(514, ge=16)
    seed: int = 0

    @model_validator(mode="after")
    def _heads(self) -> "ModelConfig":
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size ({self.hidden_size}) must be divisible by num_heads ({self.num_heads})")
        return self
