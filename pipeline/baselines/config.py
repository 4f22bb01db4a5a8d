"""The baselines' settings (`evaluate.baselines:`): the rows the leaderboard ranks the trained models against."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from pipeline.baselines.infersent.config import InferSentBaseline
from pipeline.config_base import Strict, absolute
from pipeline.repeats import Seed


class ModelBaseline(Strict):
    """Any Hugging Face or sentence-transformers directory: DeCLUTR's "Transformer-*" rows."""

    name: str
    path: str
    pooling: Literal["mean", "cls"] | None = Field(None, description="null: what the directory declares, else mean")

    @field_validator("path")
    @classmethod
    def _absolute_path(cls, v: str) -> str:
        return absolute(v)


class PostprocessBaseline(Strict):
    """BERT-whitening or a BERT-flow-style transform of another row's encoder, fitted on corpus sentences."""

    model: str = Field(description="the row it post-processes: a run, untrained, or a baseline model's name")
    kind: Literal["whitening", "flow"]
    k: int | None = Field(None, ge=1, description="whitening: keep the first k dimensions")
    sentences: int = Field(10_000, ge=10, description="corpus sentences the transform is fitted on")
    seed: Seed = 0


class UseBaseline(Strict):
    """The Universal Sentence Encoder from a TF-Hub SavedModel directory (pipeline.baselines.use); needs the
    `use` extra (TensorFlow)."""

    path: str = Field(
        description="universal-sentence-encoder/4 (DAN) or universal-sentence-encoder-large/5 (Transformer), unpacked"
    )

    @field_validator("path")
    @classmethod
    def _absolute_path(cls, v: str) -> str:
        return absolute(v)


class Baselines(Strict):
    random: bool = Field(True, description="mean of random word vectors: the floor")
    random_dim: int = Field(300, ge=2)
    vectors: list[str] = Field(default_factory=list, description="GloVe .txt / fastText .vec files, averaged")
    models: list[ModelBaseline] = Field(default_factory=list)
    postprocess: list[PostprocessBaseline] = Field(default_factory=list)
    infersent: InferSentBaseline = Field(default_factory=InferSentBaseline)
    use: UseBaseline | None = Field(None, description="the Universal Sentence Encoder's row, named use")

    @field_validator("vectors")
    @classmethod
    def _absolute_vectors(cls, v: list[str]) -> list[str]:
        return [absolute(p) for p in v]
