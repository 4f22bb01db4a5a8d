"""TSDAE (Wang, Reimers & Gurevych, 2021): a sentence with `tsdae_deletion` (0.6, the paper's best noise) of its
tokens deleted is the anchor, and the sentence itself is the positive, the target its decoder rebuilds.

Each token is deleted independently with that probability and one token is always kept, as sentence-transformers'
DenoisingAutoEncoderDataset does (it deletes NLTK words; here tokenizer tokens, so that no language's word
splitter is needed). The deletions are drawn here, per epoch from epoch_seed, not at train time: the pairs
are then what `cpipe inspect` shows, each epoch corrupts a sentence afresh, and a resumed or multi-worker run
trains on the same corrupted sentences with no random state of its own to checkpoint.
"""

from __future__ import annotations

import logging

import numpy as np
from tqdm import tqdm

from pipeline.augment.objectives.common import epoch_seed, pair, sentences
from pipeline.errors import InputError
from pipeline.tokenizer.loading import encode_whole

NAME = "tsdae"
INPUTS = {"documents": "decontaminate"}
SETTINGS = ("min_chars", "max_sentences", "tsdae_deletion")
log = logging.getLogger("cpipe")


def delete_tokens(ids: list[int], ratio: float, rng: np.random.Generator) -> list[int]:
    """`ids` with each token deleted with probability `ratio`, one (drawn at random) kept if none survived."""
    keep = rng.random(len(ids)) >= ratio
    if len(ids) and not keep.any():
        keep[rng.integers(len(ids))] = True
    return [t for t, k in zip(ids, keep) if k]


def pairs(config: dict, inputs: dict, tok, out) -> None:
    rows = list(sentences(inputs["documents"], config, out))
    if not rows:
        raise InputError(f"augment: no sentence of at least {config['min_chars']} characters in {inputs['documents']}")
    ids = encode_whole(tok.backend_tokenizer, [r["text"] for r in rows])
    ratio = config["tsdae_deletion"]
    for epoch in tqdm(range(config["epochs"]), desc="augment tsdae", unit="epoch"):
        seed = epoch_seed(config, epoch)
        rng = np.random.default_rng(seed)
        order = rng.permutation(len(rows))
        kept = [delete_tokens(ids[k], ratio, rng) for k in order]
        for k, anchor, text in zip(order, kept, tok.batch_decode(kept)):
            r = rows[k]
            out.write([pair(f"{epoch}-{r['segment_id']}", r["doc_id"], NAME, epoch, seed, anchor, text,
                            [ids[k]], [r["text"]])])
    log.info("augment: %d sentences x %d epochs, %.0f%% of tokens deleted", len(rows), config["epochs"], 100 * ratio)
