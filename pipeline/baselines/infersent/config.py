"""The InferSent baseline's settings (`evaluate.baselines.infersent:`)."""

from __future__ import annotations

from pydantic import Field, field_validator

from pipeline.config_base import Strict, absolute
from pipeline.repeats import Seed


class InferSentBaseline(Strict):
    """InferSent (Conneau et al., 2017): BiLSTM-max trained on NLI pairs; the paper's training settings are the
    defaults (its train_nli.py's), except the LSTM's size (the paper's 2048 per direction is days of CPU)."""

    enabled: bool = Field(
        False,
        description="train and score it: on SICK at the default sizes about 25 CPU-seconds "
        "an epoch, so minutes, not seconds",
    )
    nli: list[str] = Field(
        default_factory=list,
        description=(
            "SNLI / MultiNLI .jsonl or SICK .txt files; files named *dev* or *trial* select the model, the others "
            "train it, test files are refused; [] = SICK's train and trial files under evaluate.data"
        ),
    )
    vectors: str | None = Field(
        None,
        description="GloVe .txt / fastText .vec file; null = fastText vectors "
        "trained on the corpus (evaluate.fasttext's settings)",
    )
    vocab_size: int | None = Field(
        100_000, ge=1, description="words kept from the vectors (the most frequent; a file's NLI words too); null = all"
    )
    hidden: int = Field(256, ge=1, description="LSTM units per direction (paper: 2048)")
    fc_dim: int = Field(512, ge=1, description="the width of the linear classifier's two inner layers")
    batch_size: int = Field(64, ge=1)
    lr: float = Field(0.1, gt=0, description="SGD")
    decay: float = Field(0.99, gt=0, le=1, description="lr factor at each epoch")
    shrink: float = Field(5.0, gt=1, description="lr divisor when dev accuracy does not improve")
    min_lr: float = Field(1e-5, gt=0, description="training stops below it")
    max_norm: float = Field(5.0, gt=0, description="gradient norm clipping")
    epochs: int = Field(20, ge=1, description="at most this many epochs (train_nli.py's n_epochs)")
    max_pairs: int | None = Field(None, ge=1, description="cap on training pairs (SNLI has 550K)")
    seed: Seed = 1111

    @field_validator("nli")
    @classmethod
    def _absolute_nli(cls, v: list[str]) -> list[str]:
        return [absolute(p) for p in v]

    @field_validator("vectors")
    @classmethod
    def _absolute_vectors(cls, v: str | None) -> str | None:
        return None if v is None else absolute(v)
