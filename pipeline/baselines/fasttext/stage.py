"""baseline stage: fastText vectors trained on the filtered corpus (the bag-of-words baseline row)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pipeline.baselines.fasttext.bow import MODEL_FILE, train_fasttext
from pipeline.baselines.fasttext.config import FastTextBaseline
from pipeline.baselines.infersent import stage as infersent_stage
from pipeline.repeats import Seed, label
from pipeline.stage import Stage
from storage import DatasetWriter, iter_batches

if TYPE_CHECKING:
    from pipeline.config import Config

log = logging.getLogger("cpipe")


class FastTextVectors(FastTextBaseline):
    """The baseline stage's config: evaluate.fasttext's settings, and the repeat's seed (absent at 0)."""

    seed: Seed = 0


def vectors_label(seed: int) -> str:
    return label("baseline", seed)


def instances(cfg: Config, done: dict[str, str]) -> dict[str, int]:
    """Built for the fastText row, and for the InferSent row that reads the corpus's vectors: once per seed of
    the trained baselines (pipeline.config.Config.baseline_seeds)."""
    wanted = cfg.evaluate.fasttext.enabled or infersent_stage.reads_corpus_vectors(cfg)
    return {vectors_label(s): s for s in cfg.baseline_seeds()} if wanted else {}


def config(cfg: Config, key: int | None = None) -> dict:
    """fastText's seed is 0 unless a repeat's says otherwise (seed 0 keeps the config, and the dataset, it had)."""
    return {**cfg.evaluate.fasttext.model_dump(exclude={"enabled"}), **({"seed": key} if key else {})}


def inputs(cfg: Config, done: dict[str, str], key: int | None = None) -> dict[str, str]:
    return {"documents": done["decontaminate"]}


def run(settings: FastTextVectors, inputs: dict[str, str], out: DatasetWriter) -> None:
    texts = (
        t for batch in iter_batches(inputs["documents"], columns=["text"]) for t in batch.column("text").to_pylist()
    )
    train_fasttext(
        texts,
        f"{out.local_dir}/{MODEL_FILE}",
        dim=settings.dim,
        epoch=settings.epoch,
        min_count=settings.min_count,
        threads=settings.threads,
        bucket=settings.bucket,
        seed=settings.seed,
    )
    log.info("baseline: fastText skipgram, %d dimensions", settings.dim)


STAGE = Stage(
    name="baseline",
    version="1",
    flow="evaluate",
    section="evaluate",
    settings=FastTextVectors,
    config=config,
    inputs=inputs,
    instances=instances,
    run=run,
)
