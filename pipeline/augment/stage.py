"""augment stage: materialise `epochs` epochs of anchor/positive pairs, as token ids and text, for one objective.

The objectives (pipeline.objectives) say what a pair is; this stage gives them
one schema, one config slice each, and their input datasets. Their per-document work (tokenising, splitting
sentences) runs on `parallel.backend` with `parallel.workers` (pipeline.objectives.prepare), runtime settings
the fingerprint leaves out: every backend writes the same pairs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pydantic import model_validator

from pipeline.augment.heldout import HeldOutSplit
from pipeline.corpus.sentences import SPREAD
from pipeline.objectives import objective
from pipeline.objectives.base import PairsSettings, Settings
from pipeline.objectives.prepare import RUNTIME
from pipeline.repeats import label
from pipeline.stage import Stage
from pipeline.tokenizer.loading import load_tokenizer

if TYPE_CHECKING:
    from pipeline.config import Config
    from pipeline.train.config import TrainConfig
    from storage import DatasetWriter

SCHEMA = pa.schema(
    [
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
        ("original_ids", pa.list_(pa.int32())),  # CLEAR: the original sentence (no special tokens); else null
        ("original_text", pa.string()),
        ("sources", pa.list_(pa.string())),  # CERT: the anchor's and the positives' pivot languages; else null
        ("negative_ids", pa.list_(pa.int32())),  # simcse-sup: the anchor's hard negative (a contradiction); else null
        ("negative_text", pa.string()),
        ("seed", pa.int64()),
    ]
)


SHARED = ("epochs", "seed", "rows_per_shard")


class AugmentSettings(PairsSettings):
    """The augment stage's config, typed: what it writes for every objective, and under `own` the objective's own
    settings (its `Objective.settings`), which the config keeps beside them under their keys."""

    own: Settings

    @model_validator(mode="before")
    @classmethod
    def _own(cls, given: Any) -> Any:
        if not isinstance(given, dict) or "own" in given or "objective" not in given:
            return given
        declared = objective(given["objective"]).settings
        return {
            **{k: v for k, v in given.items() if k not in declared.model_fields},
            "own": declared.of(given),
        }


def pairs_label(run: TrainConfig) -> str:
    """The instance a run's repeat trains on: one per objective (and CLEAR combination) and seed."""
    return label(f"augment/{run.pairs}", run.seed)


def instances(cfg: Config, done: dict[str, str]) -> dict[str, TrainConfig]:
    """One dataset per objective (and CLEAR combination) and seed the runs' repeats train on."""
    runs = [t.config for t in cfg.trainings().values()]
    return {pairs_label(r): r for r in {pairs_label(r): r for r in runs}.values()}


def config(cfg: Config, run: TrainConfig) -> dict:
    """Only the settings the run's objective uses, so changing span lengths does not rebuild CERT's pairs;
    the run's `views` pick CLEAR's combination. A repeat with seed s draws its pairs from augment.seed + s
    (pipeline.repeats): the same pairs as before for seed 0."""
    augment, maker = {**cfg.augment.model_dump(), "seed": cfg.augment.seed + run.seed}, objective(run.objective)
    settings = {"objective": run.objective, **{k: augment[k] for k in (*SHARED, *maker.settings.model_fields)}}
    if maker.version is not None:  # an objective's own change of its pairs rebuilds only its datasets
        settings["version"] = maker.version
    if settings.get("max_sentences") is not None:  # the cap draws over the corpus (only capped pairs rebuilt)
        settings["sampling"] = SPREAD
    if maker.files is not None:
        settings["files"] = maker.files(cfg)
    if augment["heldout_fraction"]:  # only then: the datasets built before the setting keep their fingerprints
        settings["heldout_fraction"] = augment["heldout_fraction"]
    settings["runtime"] = cfg.parallel.model_dump(include=set(RUNTIME))  # how, not what: outside the fingerprint
    return {**settings, "augmentation": run.views} if run.views else settings


def inputs(cfg: Config, done: dict[str, str], run: TrainConfig) -> dict[str, str]:
    """The datasets an objective's pairs are made from, by the stage that built them."""
    return {
        **{name: done[stage] for name, stage in objective(run.objective).inputs.items()},
        "tokenizer": done["tokenizer"],
    }


def needs_ray(settings: AugmentSettings) -> bool:
    return settings.backend == "ray"


def run(settings: AugmentSettings, inputs: dict[str, str], out: DatasetWriter) -> None:
    fraction = settings.heldout_fraction
    writer = HeldOutSplit(out, fraction, SCHEMA) if fraction else out
    objective(settings.objective).pairs(settings, settings.own, inputs, load_tokenizer(inputs["tokenizer"]), writer)
    if fraction:
        writer.close()


# 4: the negative_ids / negative_text columns (simcse-sup's hard negatives; null for the other objectives).
STAGE = Stage(
    name="augment",
    version="4",
    flow="data",
    section="augment",
    config=config,
    inputs=inputs,
    instances=instances,
    run=run,
    schema=SCHEMA,
    settings=AugmentSettings,
    needs_ray=needs_ray,
)
