"""The objectives' own settings that a config section is built on: CLEAR's augmentation hyperparameters (the
augment stage's `augment.clear` adds its synonym sources to them)."""

from __future__ import annotations

from pydantic import Field

from pipeline.config_base import Strict

# The augmentation a clear run trains on where train.augmentation is null.
DEFAULT_CLEAR = "del-span+reorder"


class ClearOperations(Strict):
    """CLEAR's augmentation hyperparameters (Wu et al., 2020); the defaults are the paper's.
    pipeline.objectives.clear_operations.ClearParams adds the synonym table and the deletion token to them."""

    word_share: float = Field(0.7, ge=0, le=1, description="del-word: share of the tokens deleted")
    n_spans: int = Field(5, ge=0, description="del-span: spans deleted")
    span_share: float = Field(
        0.05,
        ge=0,
        le=1,
        description="del-span and reorder: span length as a share of the sentence (at least one token)",
    )
    n_pairs: int = Field(5, ge=0, description="reorder: span pairs swapped")
    subs_share: float = Field(0.3, ge=0, le=1, description="subs: share of the sentence's tokens replaced by a synonym")
