"""The filter stage's settings (`filter:`): which documents are kept."""

from __future__ import annotations

from pydantic import Field

from pipeline.config_base import Strict


class FilterConfig(Strict):
    min_tokens: int = Field(2048, ge=0)
    dedup: bool = Field(True, description="drop exact duplicates (case and whitespace normalised)")
    near_dedup: bool = Field(False, description="drop near-duplicates (MinHash-LSH)")
    near_dedup_threshold: float = Field(0.8, gt=0, le=1, description="estimated Jaccard of word 5-grams")
    language: str | None = Field(
        None, description="keep only this fastText lid.176 label (e.g. en); null = no language filter"
    )
    min_lang_score: float = Field(0.65, ge=0, le=1, description="datatrove's default")
    langid_model: str = Field(
        "https://dl.fbaipublicfiles.com/fasttext/supervised-models/lid.176.ftz",
        description="lid.176 model: path or URL (downloaded once into corpus.download_dir)",
    )
    shard_mb: int = Field(256, ge=1)
