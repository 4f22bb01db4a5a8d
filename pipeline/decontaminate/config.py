"""The decontaminate stage's settings (`decontaminate:`): how evaluation text is kept out of the training documents."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from pipeline.config_base import Strict


class DecontaminateConfig(Strict):
    mode: Literal["drop", "mask", "report"] = Field(
        "drop",
        description=(
            "drop: a document holding an evaluation n-gram is left out; mask: each run of matched words in it is cut "
            "out (replaced by one space) and the rest kept; report: every document is kept, the matches only counted"
        ),
    )
    n: int = Field(13, ge=1, description="words per n-gram (GPT-3's decontamination, Brown et al. 2020, appendix C)")
    min_words: int = Field(
        8,
        ge=1,
        description=(
            "an evaluation sentence shorter than n words is looked for whole when it has at least this many; shorter "
            "ones are not indexed (GPT-3's floor of 8 against spurious matches: a 3-word sentence is in many documents)"
        ),
    )
    shard_mb: int = Field(256, ge=1)
