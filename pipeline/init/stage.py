"""init stage: the encoder before training — built from scratch (seeded) or loaded from the base model.

Training runs start from these exact weights, and the leaderboard's "untrained"
row evaluates them, so the comparison isolates what pretraining did. The exported
tokenizer's model_max_length is the model's position limit, which training reads
(pipeline.train.batching.special_ids) so that no span indexes past the position table.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pipeline.init.config import ModelConfig
from pipeline.locate import check_base
from pipeline.model.transformer import build_model, export, position_limit
from pipeline.repeats import label
from pipeline.stage import Stage
from pipeline.tokenizer.loading import load_tokenizer

if TYPE_CHECKING:
    from pipeline.config import Config
    from storage import DatasetWriter

log = logging.getLogger("cpipe")


def init_label(seed: int) -> str:
    """The initial weights a repeat with `seed` starts from (model.seed + seed)."""
    return label("init", seed)


def instances(cfg: Config, done: dict[str, str]) -> dict[str, int]:
    """One set of initial weights per repeat's seed (pipeline.repeats)."""
    return {init_label(s): s for s in cfg.init_seeds()}


def config(cfg: Config, key: int | None = None) -> dict:
    """A base model brings its own shape: the from-scratch sizes stay out, so they rebuild nothing. The repeat with
    seed `key` is seeded model.seed + key."""
    model = {**cfg.model.model_dump(), "seed": cfg.model.seed + (key or 0)}
    return model if model["base"] is None else {"base": model["base"], "seed": model["seed"]}


def inputs(cfg: Config, done: dict[str, str], key: int | None = None) -> dict[str, str]:
    return {"tokenizer": done["tokenizer"]}


def run(settings: ModelConfig, inputs: dict[str, str], out: DatasetWriter) -> None:
    tokenizer = load_tokenizer(inputs["tokenizer"])
    model = build_model(settings, tokenizer)
    tokenizer.model_max_length = position_limit(model)
    n_params = sum(p.numel() for p in model.parameters())
    log.info(
        "init: %s with %.1fM parameters, inputs of up to %d tokens",
        type(model).__name__,
        n_params / 1e6,
        tokenizer.model_max_length,
    )
    export(model, tokenizer, out.local_dir)
    out.extra["parameters"] = n_params


def check(cfg: Config) -> None:
    check_base(cfg.model.base)


STAGE = Stage(
    name="init",
    version="3",
    flow="train",
    section="model",
    settings=ModelConfig,
    config=config,
    inputs=inputs,
    run=run,
    instances=instances,
    check=check,
)
