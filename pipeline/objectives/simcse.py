"""Unsupervised SimCSE (Gao et al., 2021): a sentence is its own positive; the two forward passes'
independent dropout masks are the only augmentation, so nothing is materialised but the sentence twice."""

from __future__ import annotations

import logging

import numpy as np
from tqdm import tqdm

from pipeline.augment.pairs import epoch_seed, pair, sentences
from pipeline.errors import InputError
from pipeline.tokenizer.loading import encode_whole

NAME = "simcse"
INPUTS = {"documents": "decontaminate"}
SETTINGS = ("min_chars", "max_sentences")
log = logging.getLogger("cpipe")


def pairs(config: dict, inputs: dict, tok, out) -> None:
    rows = list(sentences(inputs["documents"], config, out))
    if not rows:
        raise InputError(f"augment: no sentence of at least {config['min_chars']} characters in {inputs['documents']}")
    ids = encode_whole(tok.backend_tokenizer, [r["text"] for r in rows])
    for epoch in tqdm(range(config["epochs"]), desc="augment simcse", unit="epoch"):
        seed = epoch_seed(config, epoch)
        for k in np.random.default_rng(seed).permutation(len(rows)):
            r = rows[k]
            out.write([pair(f"{epoch}-{r['segment_id']}", r["doc_id"], NAME, epoch, seed, ids[k], r["text"],
                            [ids[k]], [r["text"]])])
    log.info("augment: %d sentences x %d epochs", len(rows), config["epochs"])
