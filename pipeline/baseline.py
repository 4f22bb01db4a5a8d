"""baseline stage: fastText vectors trained on the filtered corpus (the bag-of-words baseline row)."""

from __future__ import annotations

import logging

from pipeline.bow import train_fasttext
from storage import iter_batches

NAME, VERSION = "baseline", "1"
SCHEMA = None
MODEL_FILE = "fasttext.bin"
log = logging.getLogger("cpipe")


def run(config: dict, inputs: dict, out) -> None:
    texts = (t for batch in iter_batches(inputs["documents"], columns=["text"]) for t in batch.column("text").to_pylist())
    train_fasttext(texts, f"{out.local_dir}/{MODEL_FILE}", dim=config["dim"], epoch=config["epoch"],
                   min_count=config["min_count"], threads=config["threads"], bucket=config["bucket"])
    log.info("baseline: fastText skipgram, %d dimensions", config["dim"])
