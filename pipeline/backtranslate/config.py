"""The backtranslate stage's settings (`backtranslate:`): CERT's back-translations, and how a translation model
decodes."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from pipeline.config_base import Strict
from pipeline.corpus.segment import MIN_SENTENCE_CHARS
from pipeline.repeats import Seed

ModelName = str | dict[str, str]


class Generation(Strict):
    """How a translation model decodes: greedy (num_beams=1), beam search, or sampling (do_sample)."""

    num_beams: int = Field(5, ge=1, description="fairseq's hub default; 1 with do_sample for sampling")
    do_sample: bool = False
    top_k: int = Field(0, ge=0, description="sampling: keep the k likeliest tokens (0: all)")
    temperature: float = Field(1.0, gt=0)
    max_new_tokens: int = Field(256, ge=1)
    max_input_tokens: int | None = Field(
        None, ge=2, description="longer sentences are truncated and counted; null = the model's limit"
    )
    batch_size: int = Field(32, ge=1, description="sentences per generate call (length-sorted)")
    seed: Seed = Field(0, description="sampling draws the same outputs for the same inputs and seed")


class BacktranslateConfig(Generation):
    """CERT's positives: each sentence to every pivot language and back. Built only for runs with objective cert,
    whose pairs are two back-translations of a sentence through two different pivots."""

    backend: Literal["hf", "fairseq"] = Field("hf", description="hf: transformers FSMT/Marian; fairseq: torch.hub")
    source_lang: str = "en"
    pivots: list[str] = Field(
        default_factory=lambda: ["de", "zh"],
        min_length=1,
        description=("pivot languages, all different; CERT needs at least two (en-de-en, en-zh-en)"),
    )
    forward_model: ModelName = Field(
        default_factory=lambda: {
            "de": "facebook/wmt19-{source}-{pivot}",
            "zh": "Helsinki-NLP/opus-mt-{source}-{pivot}",
        },
        description="hub name or directory, one for every pivot ({pivot: name}) or one template for all; "
        "{source} and {pivot} are filled in",
    )
    backward_model: ModelName = Field(
        default_factory=lambda: {"de": "facebook/wmt19-{pivot}-{source}", "zh": "Helsinki-NLP/opus-mt-{pivot}-{source}"}
    )
    target_token: dict[str, str] = Field(
        default_factory=lambda: {"zh": ">>cmn_Hans<<"},
        description=(
            "per pivot, a token put before each sentence sent to the forward model: multi-target Marian models "
            "(opus-mt-en-zh) need the target language's >>id<<"
        ),
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field("auto", description="auto: bf16 on GPU")
    min_chars: int = Field(MIN_SENTENCE_CHARS, ge=1, description="shorter sentences are not translated (counted)")
    max_sentences: int | None = Field(
        None,
        ge=1,
        description="cap on sentences translated (samples, "
        "budgets), drawn uniformly over the whole corpus from backtranslate.seed",
    )
    chunk_size: int = Field(256, ge=1, description="sentences per resumable chunk")
    workers: int = Field(0, ge=0, description="0: translate in this process; N: a Ray Data actor pool of N models")
    use_gpu: bool = Field(False, description="one GPU per actor")

    @field_validator("forward_model", "backward_model")
    @classmethod
    def _template(cls, v: ModelName) -> ModelName:
        for name in v.values() if isinstance(v, dict) else [v]:
            try:
                name.format(source="en", pivot="de")
            except (KeyError, IndexError, ValueError) as e:
                raise ValueError(f"{name!r}: only {{source}} and {{pivot}} can be filled in ({e!r})") from None
        return v

    @model_validator(mode="after")
    def _pivots(self) -> BacktranslateConfig:
        if len(set(self.pivots)) < len(self.pivots):
            raise ValueError(f"pivots: {self.pivots} names a pivot twice")
        for key in ("forward_model", "backward_model"):
            models = getattr(self, key)
            if isinstance(models, dict) and (missing := [p for p in self.pivots if p not in models]):
                raise ValueError(f"{key} has no model for pivot(s) {', '.join(missing)}")
        return self
