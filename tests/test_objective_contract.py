"""The objective contract (pipeline.objectives): an objective is one module ending in `OBJECTIVE = Objective(...)`
plus one line in the registry. A toy objective declared here (unsupervised SimCSE's pairs under recipe defaults
of its own) is validated by the config, given its augment settings and card title, and trained a few steps on a
tiny encoder, with no other file knowing its name."""

from __future__ import annotations

import dataclasses
import sys
import types

import pytest
import torch

from pipeline import objectives
from pipeline.augment import stage as augment
from pipeline.augment.config import AugmentConfig
from pipeline.config import Config, load_config
from pipeline.errors import ConfigError
from pipeline.objectives import simcse
from pipeline.train.batching import collate, special_ids
from pipeline.train.card import render
from pipeline.train.config import TrainConfig
from pipeline.train.optim import make_optimizer
from pipeline.train.step import make_encoder, train_step
from tests.test_model_card import INFO
from tests.test_train_step import pairs, tiny_encoder

pytestmark = pytest.mark.usefixtures("one_torch_thread")
TITLE = "toy (this test): a sentence and itself, two dropout masks apart, read through a linear head"
# Unlike every registered objective's: the steps below tell these defaults were the ones trained with.
DEFAULTS = {
    "loss": "nt-xent",
    "projection": "linear",
    "pooling": "mean",
    "mlm": False,
    "temperature": 0.2,
    "schedule": "constant",
    "lr": 1e-3,
    "batch_size": 8,
    "max_length": 48,
    "weight_decay": 0.0,
}


@pytest.fixture
def toy(monkeypatch):
    """The toy objective, registered as a module of its own would be: one line in objectives.MODULES."""
    module = types.ModuleType("toy_objective")
    module.OBJECTIVE = dataclasses.replace(simcse.OBJECTIVE, name="toy", title=TITLE, defaults=DEFAULTS)
    monkeypatch.setitem(sys.modules, "toy_objective", module)
    monkeypatch.setitem(objectives.MODULES, "toy", "toy_objective")
    return module.OBJECTIVE


def test_the_config_takes_a_registered_objective_with_its_defaults(toy):
    cfg = Config(runs={"plain": {"objective": "toy"}, "hotter": {"objective": "toy", "temperature": 0.5}})
    runs = cfg.run_configs()
    assert {k: getattr(runs["plain"], k) for k in DEFAULTS} == DEFAULTS
    assert runs["hotter"].temperature == 0.5 and runs["hotter"].projection == "linear"
    assert runs["plain"].recipe().startswith("batch 8, all steps, lr 0.001 constant")
    with pytest.raises(ValueError, match="augmentation is CLEAR's setting; objective 'toy' takes none"):
        TrainConfig(objective="toy", augmentation="subs")


def test_an_unknown_objective_is_named_with_every_registered_one(toy, tmp_path):
    profile = tmp_path / "run.yaml"
    profile.write_text("runs: {a: {objective: toyy}}\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(profile))
    assert str(e.value).endswith(
        "runs.a.objective: Input should be 'declutr', 'cert', 'simcse', 'clear', 'tsdae', "
        "'simcse-sup' or 'toy' (got 'toyy')"
    )


def test_the_augment_stage_and_the_card_read_its_declaration(toy):
    cfg = Config(augment=AugmentConfig(max_sentences=50), runs={"t": {"objective": "toy"}})
    run = cfg.run_configs()["t"]
    config = augment.config(cfg, run)
    assert config["objective"] == "toy" and config["max_sentences"] == 50 and "num_anchors" not in config
    assert augment.inputs(cfg, {"decontaminate": "/a/decontaminate/f", "tokenizer": "/a/tokenizer/t"}, run) == {
        "documents": "/a/decontaminate/f",
        "tokenizer": "/a/tokenizer/t",
    }
    assert f"| objective | {TITLE} |" in render({**INFO, "objective": "toy", "augmentation": None})


def test_a_toy_objective_trains_with_its_own_defaults(toy, tokenizer):
    """Three steps of the toy on a tiny encoder take its defaults (NT-Xent at 0.2 through a linear head on mean
    pooling), the same steps as a simcse run given those settings explicitly."""
    special = special_ids(tokenizer)

    def steps(cfg: TrainConfig) -> list[dict]:
        torch.manual_seed(0)
        model = make_encoder(tiny_encoder(tokenizer).mlm_model, cfg)
        optimizer, scheduler = make_optimizer(model, cfg, 10)
        batch = collate(pairs(tokenizer, positives=1), special, cfg.max_length, cfg.contrastive)
        generator = torch.Generator().manual_seed(0)
        return [train_step(model, optimizer, scheduler, batch, cfg, special, generator) for _ in range(3)]

    trained = steps(TrainConfig(objective="toy"))
    explicit = steps(TrainConfig(objective="simcse", **DEFAULTS))
    assert all(set(s) >= {"contrastive_loss"} and "mlm_loss" not in s for s in trained)
    assert [s["loss"] for s in trained] == [s["loss"] for s in explicit]
    simcse_defaults = steps(TrainConfig(objective="simcse", lr=1e-3, batch_size=8))
    assert trained[0]["loss"] != pytest.approx(simcse_defaults[0]["loss"])
    assert trained[-1]["contrastive_loss"] < trained[0]["contrastive_loss"]
