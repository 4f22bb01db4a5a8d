"""The fastText bag-of-words baseline's settings (`evaluate.fasttext:`)."""

from __future__ import annotations

from pydantic import Field

from pipeline.config_base import Strict

# fastText 0.9.3 built from sdist returns NaN vectors with fewer threads on small machines (DESIGN.md).
FASTTEXT_MIN_THREADS = 11


class FastTextBaseline(Strict):
    """The bag-of-words baseline's vectors; pipeline.baselines.fasttext.bow.train_fasttext's defaults (CLEAR's corpus synonyms too)."""

    enabled: bool = True
    dim: int = Field(100, ge=2)
    epoch: int = Field(5, ge=1)
    min_count: int = Field(2, ge=1)
    bucket: int = Field(200_000, ge=1000, description="subword hash buckets (fastText's 2M default: ~800 MB models)")
    threads: int = Field(12, ge=FASTTEXT_MIN_THREADS, description="fasttext 0.9.3 gives NaNs with fewer (DESIGN.md)")
