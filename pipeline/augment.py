"""augment stage (DeCLUTR): materialise `epochs` epochs of anchor/positive spans as token ids.

Each epoch draws fresh spans, as DeCLUTR resamples every epoch. Documents are
shuffled per epoch but a document's anchors stay adjacent, so a batch of
N * A rows holds N whole documents, as in the paper.
"""

from __future__ import annotations

import logging

import numpy as np
import pyarrow as pa
from tqdm import tqdm

from pipeline.spans import TooShort, min_document_tokens, sample_spans
from pipeline.tokenizer import load_tokenizer
from storage import read_table

NAME, VERSION = "augment", "1"
SCHEMA = pa.schema([
    ("pair_id", pa.string()),
    ("doc_id", pa.string()),
    ("objective", pa.string()),
    ("epoch", pa.int32()),
    ("anchor_start", pa.int32()),
    ("anchor_ids", pa.list_(pa.int32())),
    ("anchor_text", pa.string()),
    ("positive_starts", pa.list_(pa.int32())),
    ("positive_ids", pa.list_(pa.list_(pa.int32()))),
    ("positive_text", pa.list_(pa.string())),
    ("seed", pa.int64()),
])
log = logging.getLogger("cpipe")


def run(config: dict, inputs: dict, out) -> None:
    tok = load_tokenizer(inputs["tokenizer"])
    docs = read_table(inputs["documents"], columns=["doc_id", "text"])
    doc_ids = docs.column("doc_id").to_pylist()
    encodings = tok.backend_tokenizer.encode_batch(docs.column("text").to_pylist(), add_special_tokens=False)
    token_ids = [np.asarray(e.ids, dtype=np.int32) for e in encodings]
    needed = min_document_tokens(config["num_anchors"], config["max_length"])
    eligible = [d for d, ids in enumerate(token_ids) if len(ids) >= needed]
    out.count("too_short", len(doc_ids) - len(eligible))
    if not eligible:
        longest = max((len(ids) for ids in token_ids), default=0)
        raise TooShort(f"no document is long enough for {config['num_anchors']} anchors of up to "
                       f"{config['max_length']} tokens: needs {needed} tokens, the longest of "
                       f"{len(doc_ids)} has {longest}")
    for epoch in tqdm(range(config["epochs"]), desc="augment", unit="epoch"):
        seed = config["seed"] * 1_000_003 + epoch
        rng = np.random.default_rng(seed)
        for d in rng.permutation(eligible):
            ids = token_ids[d]
            pairs = sample_spans(len(ids), config["num_anchors"], config["num_positives"],
                                 config["min_length"], config["max_length"], rng)
            for a, (anchor, positives) in enumerate(pairs):
                anchor_ids = ids[anchor.start:anchor.end].tolist()
                positive_ids = [ids[p.start:p.end].tolist() for p in positives]
                texts = tok.batch_decode([anchor_ids, *positive_ids])
                out.write([{
                    "pair_id": f"{epoch}-{doc_ids[d]}-{a}", "doc_id": doc_ids[d], "objective": "declutr",
                    "epoch": epoch, "anchor_start": anchor.start, "anchor_ids": anchor_ids,
                    "anchor_text": texts[0], "positive_starts": [p.start for p in positives],
                    "positive_ids": positive_ids, "positive_text": texts[1:], "seed": seed,
                }])
    log.info("augment: %d documents x %d epochs; %d too short", len(eligible), config["epochs"],
             len(doc_ids) - len(eligible))
