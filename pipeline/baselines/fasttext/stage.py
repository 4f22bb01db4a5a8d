"""baseline stage: fastText vectors trained on the filtered corpus (the bag-of-words baseline row)."""

from __future__ import annotations

import logging

from pipeline.baselines.fasttext.bow import MODEL_FILE, train_fasttext
from pipeline.baselines.infersent import stage as infersent_stage
from pipeline.config import Config
from pipeline.stage import Stage
from storage import DatasetWriter, iter_batches

log = logging.getLogger("cpipe")


def instances(cfg: Config, done: dict[str, str]) -> dict[str, None]:
    """Built for the fastText row, and for the InferSent row that reads the corpus's vectors."""
    wanted = cfg.evaluate.fasttext.enabled or infersent_stage.reads_corpus_vectors(cfg)
    return {"baseline": None} if wanted else {}


def config(cfg: Config, key: None = None) -> dict:
    return cfg.evaluate.fasttext.model_dump(exclude={"enabled"})


def inputs(cfg: Config, done: dict[str, str], key: None = None) -> dict[str, str]:
    return {"documents": done["filter"]}


def run(config: dict, inputs: dict[str, str], out: DatasetWriter) -> None:
    texts = (t for batch in iter_batches(inputs["documents"], columns=["text"]) for t in batch.column("text").to_pylist())
    train_fasttext(texts, f"{out.local_dir}/{MODEL_FILE}", dim=config["dim"], epoch=config["epoch"],
                   min_count=config["min_count"], threads=config["threads"], bucket=config["bucket"])
    log.info("baseline: fastText skipgram, %d dimensions", config["dim"])


STAGE = Stage(name="baseline", version="1", flow="evaluate", section="evaluate", config=config, inputs=inputs,
              instances=instances, run=run)
