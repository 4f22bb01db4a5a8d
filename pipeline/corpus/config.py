"""The corpus stage's settings (`corpus:`): which documents the pipeline reads."""

from __future__ import annotations

from pydantic import Field, field_validator

from pipeline.config_base import Strict, absolute


class CorpusConfig(Strict):
    sources: list[str] = Field(
        default_factory=list,
        description=(
            "local files/directories, OpenWebText tarballs (urlsf_subset*.tar) and Wikipedia dumps "
            "(*pages-articles*.xml[.bz2]), as paths or URLs"
        ),
    )
    max_docs: int | None = Field(None, ge=1)
    subsets: list[int] | None = Field(None, description="OpenWebText subsets to read (urlsf_subsetNN); null = all")
    download_dir: str = Field("downloads", description="cache of downloaded sources, keyed by URL")
    shard_mb: int = Field(256, ge=1)

    @field_validator("sources")
    @classmethod
    def _absolute_sources(cls, v: list[str]) -> list[str]:
        return [absolute(s) for s in v]

    @field_validator("download_dir")
    @classmethod
    def _absolute_downloads(cls, v: str) -> str:
        return absolute(v)
