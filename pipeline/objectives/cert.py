"""CERT (Fang et al., 2020): two back-translations of one sentence through two different pivot languages
(en-de-en and en-zh-en in the paper) are a positive pair, under InfoNCE at 0.07, MoCo's or in-batch.

Every epoch draws, per sentence and seeded, a pair of different pivots whose translations differ, and
which of the two is the anchor; the row's `sources` names them. A sentence with fewer than two distinct
non-empty back-translations cannot make a pair and is dropped (counted `too_few_translations`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pipeline.corpus.sentences import record_drawn
from pipeline.errors import InputError
from pipeline.objectives.base import Objective, PairsSettings, Settings
from pipeline.objectives.pairs import write_epochs
from pipeline.objectives.prepare import encode_all
from storage import read_table

if TYPE_CHECKING:
    from pipeline.config import Config
    from pipeline.train.config import TrainConfig

NAME = "cert"
INPUTS = {"backtranslations": "backtranslate"}
log = logging.getLogger("cpipe")


def translations(path: str, out) -> dict[str, dict]:
    """segment id -> {doc_id, pivots: {pivot: back-translation}} for sentences with two distinct ones."""
    table = read_table(path, columns=["doc_id", "segment_id", "bt_text", "pivot_lang"])
    sentences: dict[str, dict] = {}
    for row in table.to_pylist():
        entry = sentences.setdefault(row["segment_id"], {"doc_id": row["doc_id"], "pivots": {}})
        if row["bt_text"].strip():
            entry["pivots"][row["pivot_lang"]] = row["bt_text"]
        else:
            out.count("empty_backtranslation")
    usable = {s: e for s, e in sentences.items() if len(set(e["pivots"].values())) >= 2}
    out.count("too_few_translations", len(sentences) - len(usable))
    return usable


def pivot_pairs(pivots: dict[str, str]) -> list[tuple[str, str]]:
    """Every ordered pair of different pivots whose back-translations differ."""
    return [(a, b) for a in pivots for b in pivots if a != b and pivots[a] != pivots[b]]


def pairs(stage: PairsSettings, settings: Settings, inputs: dict, tok, out) -> None:
    sentences = translations(inputs["backtranslations"], out)
    if not sentences:
        raise InputError(
            f"augment: no sentence in {inputs['backtranslations']} has two distinct back-translations "
            "through two pivots (backtranslate.pivots needs at least two)"
        )
    ids = list(sentences)
    choices = [pivot_pairs(sentences[i]["pivots"]) for i in ids]
    texts = [sentences[i]["pivots"] for i in ids]
    encoded = iter(encode_all(tok, [t for pivots in texts for t in pivots.values()], stage))
    token_ids = [{p: next(encoded) for p in pivots} for pivots in texts]

    def views(order, rng):
        for k in order:
            a, b = choices[k][int(rng.integers(len(choices[k])))]
            yield (
                ids[k],
                sentences[ids[k]]["doc_id"],
                {
                    "anchor_ids": token_ids[k][a],
                    "anchor_text": texts[k][a],
                    "positive_ids": [token_ids[k][b]],
                    "positive_text": [texts[k][b]],
                    "sources": [a, b],
                },
            )

    write_epochs(stage, out, NAME, stage.epochs, len(ids), views)
    record_drawn(out, {sentences[i]["doc_id"] for i in ids}, sentences=len(ids))
    log.info("augment: %d sentences with two back-translations x %d epochs", len(ids), stage.epochs)


def two_pivots(cfg: Config, run: TrainConfig) -> str | None:
    if len(cfg.backtranslate.pivots) < 2:
        return (
            "CERT pairs two back-translations through two different pivots: backtranslate.pivots needs at "
            f"least two, got {cfg.backtranslate.pivots}"
        )
    return None


OBJECTIVE = Objective(
    name=NAME,
    title="CERT (Fang et al., 2020): back-translations of a sentence as its two views",
    # CERT's MoCo: BERT's [CLS] under MoCo v2's MLP head down to 128 dimensions (its builder.py, mlp=True,
    # moco-dim 128), InfoNCE at 0.07; its MOCO.py: SGD (momentum 0.9, weight decay 1e-5 on every weight),
    # lr 4e-5, cosine schedule, batch 32, sentences of 64 tokens.
    defaults={
        "loss": "info-nce",
        "projection": "mlp",
        "pooling": "cls",
        "mlm": False,
        "temperature": 0.07,
        "schedule": "cosine",
        "lr": 4e-5,
        "batch_size": 32,
        "max_length": 64,
        "weight_decay": 1e-5,
        "optimizer": "sgd",
        "sgd_momentum": 0.9,
        "projection_dim": 128,
    },
    inputs=INPUTS,
    pairs=pairs,
    check_config=two_pivots,
)
