"""The objective contract (pipeline.objectives): an objective is one module ending in `OBJECTIVE = Objective(...)`
plus one line in the registry. A toy objective declared here (unsupervised SimCSE's pairs under recipe defaults
of its own) is validated by the config, given its augment settings and card title, and trained a few steps on a
tiny encoder, with no other file knowing its name."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import types

import pytest
import torch
from pydantic import Field

from pipeline import objectives
from pipeline.augment import stage as augment
from pipeline.augment.config import AugmentConfig, settings_bases
from pipeline.config import Config, load_config
from pipeline.errors import ConfigError
from pipeline.objectives import simcse
from pipeline.objectives.base import Settings
from pipeline.objectives.pairs import SentenceSettings
from pipeline.preflight import configured
from pipeline.train.batching import collate, special_ids
from pipeline.train.card import render
from pipeline.train.config import TrainConfig
from pipeline.train.optim import make_optimizer
from pipeline.train.step import make_encoder, train_step
from tests.conftest import ROOT
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


# A toy objective with a setting of its own, as a module of a package outside the project declares it.
TOY_MODULE = """
import dataclasses

from pydantic import Field

from pipeline.objectives import simcse
from pipeline.objectives.pairs import SentenceSettings


class ToySettings(SentenceSettings):
    toy_share: float = Field(0.5, gt=0, lt=1)


OBJECTIVE = dataclasses.replace(simcse.OBJECTIVE, name="toy", title="toy", settings=ToySettings)
"""
# Each profile's augment stage configs and fingerprints by run, or its config error: the registry's one line is
# run before the config is imported, as a line in pipeline/objectives/__init__.py would be.
PLAN = """
import json, sys
from pipeline import objectives
objectives.MODULES["toy"] = "toy_objective"
from pipeline.augment import stage as augment
from pipeline.config import load_config
from pipeline.errors import ConfigError
out = {}
for profile in sys.argv[1:]:
    try:
        cfg = load_config(profile)
    except ConfigError as e:
        out[profile] = str(e)
        continue
    configs = {name: augment.config(cfg, run) for name, run in cfg.run_configs().items()}
    out[profile] = {name: [c, augment.STAGE.fingerprint(c, {})] for name, c in configs.items()}
print(json.dumps(out))
"""


@pytest.mark.slow
def test_a_registered_objective_s_own_setting_is_an_augment_key_in_its_pairs_fingerprint_only(tmp_path):
    package = tmp_path / "scratch"
    package.mkdir()
    (package / "toy_objective.py").write_text(TOY_MODULE)
    runs = "runs: {t: {objective: toy}, s: {objective: simcse}}\n"
    profiles = {
        "default": runs,
        "low": "augment: {toy_share: 0.3}\n" + runs,
        "high": "augment: {toy_share: 0.7, min_chars: 30}\n" + runs,
        "outside": "augment: {toy_share: 1.5}\n" + runs,
        "misspelt": "augment: {toy_shar: 0.3}\n" + runs,
    }
    for name, text in profiles.items():
        (tmp_path / f"{name}.yaml").write_text(text)
    proc = subprocess.run(
        [sys.executable, "-c", PLAN, *(str(tmp_path / f"{name}.yaml") for name in profiles)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(package), str(ROOT)])},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    plans = {name: json.loads(proc.stdout)[str(tmp_path / f"{name}.yaml")] for name in profiles}
    assert [plans[p]["t"][0]["toy_share"] for p in ("default", "low", "high")] == [0.5, 0.3, 0.7]
    assert plans["high"]["t"][0]["min_chars"] == 30  # the sentence settings it extends come with it
    toy = {plans[p]["t"][1] for p in ("default", "low", "high")}
    assert len(toy) == 3  # each value of its setting is other pairs
    assert "toy_share" not in plans["default"]["s"][0]
    assert plans["default"]["s"][1] == plans["low"]["s"][1] != plans["high"]["s"][1]  # simcse: min_chars only
    assert "augment.toy_share: Input should be less than 1" in plans["outside"]
    assert "augment.toy_shar" in plans["misspelt"] and "augment.toy_share" not in plans["misspelt"]


def test_a_setting_two_objectives_declare_apart_is_refused_and_a_shared_one_taken_once():
    class Mine(Settings):
        min_chars: int = 3

    class Longer(SentenceSettings):
        longest: int = Field(9, ge=1)

    with pytest.raises(TypeError, match=r"augment\.min_chars is declared twice, by .*SentenceSettings and .*Mine"):
        settings_bases([SentenceSettings, Mine])

    class Epochs(Settings):
        epochs: int = 2

    with pytest.raises(TypeError, match=r"augment\.epochs is declared twice, by .*SharedSettings and .*Epochs"):
        settings_bases([Epochs])

    class Section(*settings_bases([SentenceSettings, Longer, Settings])):
        pass

    # Longer's keys once (SentenceSettings and the bare Settings come with it), after the shared ones.
    shared = ["epochs", "heldout_fraction", "seed", "rows_per_shard"]
    assert list(Section.model_fields) == [*shared, "min_chars", "max_sentences", "longest"]
    with pytest.raises(ValueError, match="longest"):
        Section(longest=0)


def test_the_preflight_asks_each_objective_for_the_files_it_reads(toy, monkeypatch, tmp_path, tiny_corpus):
    missing = tmp_path / "toy.txt"
    reads = dataclasses.replace(toy, reads=lambda cfg: {"augment.toy_files": [str(missing)]})
    monkeypatch.setattr(sys.modules["toy_objective"], "OBJECTIVE", reads)
    with pytest.raises(ConfigError, match=f"^augment\\.toy_files: no such file: {missing}$"):
        configured(corpus=str(tiny_corpus), artifacts=str(tmp_path / "a"))
    configured(corpus=str(tiny_corpus), artifacts=str(tmp_path / "a"), until="filter")  # no pairs made: unread
    missing.write_text("read\n")
    configured(corpus=str(tiny_corpus), artifacts=str(tmp_path / "a"))
