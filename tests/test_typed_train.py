"""The train stage's settings stay typed from the config to the step (issue 39 item 2): the stage config is
TrainConfig's dump split as its fields declare (pipeline.stage.declared_settings), the stage's run rebuilds the
TrainConfig from it (section_from), and the workers get it inside one WorkerConfig, which Ray pickles."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from pydantic import Field

from pipeline.config import Config, load_config
from pipeline.config_base import Strict
from pipeline.stage import declared_settings, runtime_defaults, section_from
from pipeline.train import stage as train
from pipeline.train.config import TrainConfig
from pipeline.train.loop import WORKER, WorkerConfig

PROFILES = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))


class Toy(Strict):
    """A section of a stage that is not the train stage's: the same declarations, read by the same function."""

    size: int = 3
    workers: int = Field(1, json_schema_extra={"runtime": True})
    added: str = Field("new", json_schema_extra={"fingerprint_omits": "old"})


def test_fields_declare_what_the_fingerprint_leaves_out():
    assert declared_settings(Toy(workers=4)) == ({"size": 3, "added": "new"}, {"workers": 4})
    assert declared_settings(Toy(added="old")) == ({"size": 3}, {"workers": 1})
    assert runtime_defaults(Toy) == {"workers": 1}
    assert section_from(Toy, {"size": 5}, {"workers": 2}) == Toy(size=5, workers=2, added="old")


def test_the_train_stages_runtime_settings_are_the_fields_declared_runtime():
    declared = {k for k, f in TrainConfig.model_fields.items() if (f.json_schema_extra or {}).get("runtime")}
    assert (
        set(train.RUNTIME)
        == declared
        == {"log_every", "checkpoint_every", "max_failures", "torch_threads", "cpus_per_worker"}
    )
    cfg = Config(runs={"a": {"log_every": 3, "torch_threads": 2}, "b": {}})
    a, b = (train.config(cfg, row) for row in ("a", "b"))
    assert a["runtime"]["log_every"] == 3 and a["runtime"]["torch_threads"] == 2
    assert not set(a["train"]) & declared
    assert a["train"] == b["train"] and train.STAGE.fingerprint(a, {}) == train.STAGE.fingerprint(b, {})


def test_a_setting_added_later_is_in_the_fingerprint_only_away_from_its_old_value():
    cfg = Config(runs={"old": {"adam_eps": 1e-8, "scale_fix": True}, "new": {"adam_eps": 1e-6, "scale_fix": False}})
    old, new = (train.config(cfg, row)["train"] for row in ("old", "new"))
    assert "adam_eps" not in old and "scale_fix" not in old
    assert new["adam_eps"] == 1e-6 and new["scale_fix"] is False


def test_settings_that_decide_nothing_stay_out_until_they_do():
    cfg = Config(runs={"parent": {}, "child": {"init_from": "parent", "dev_split": "other"}})
    child = train.config(cfg, "child")["train"]
    assert not {"init_from", "select_by", "dev_split", "tie_decoder"} & set(child)
    run = TrainConfig(objective="tsdae", eval_every=5, select_by="mytask", dev_set="/nowhere")
    assert run.inert() == {"init_from"}


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name)
def test_the_stage_rebuilds_every_runs_settings_from_its_stage_config(profile):
    """What run() trains with is the run as configured, but for the settings that decide nothing in it."""
    for row, training in load_config(profile).trainings().items():
        run = training.config
        content, runtime_settings = declared_settings(run)
        rebuilt = section_from(TrainConfig, content, runtime_settings)
        kept = set(TrainConfig.model_fields) - run.inert()
        assert {k: getattr(rebuilt, k) for k in kept} == {k: getattr(run, k) for k in kept}, row
        # A stage config written by hand holds the whole dump, which rebuilds the run whole.
        assert section_from(TrainConfig, run.model_dump(), {}) == run


def test_the_workers_get_one_typed_object_that_pickles():
    run = TrainConfig(objective="cert", momentum=0.999, memory_bank=16, log_every=7)
    job = WorkerConfig(
        train=run,
        init="/m/hf",
        total_steps=3,
        special={"bos": 0},
        pairs="/a/augment/p",
        columns=("anchor_ids", "positive_ids"),
    )
    back = pickle.loads(pickle.dumps({WORKER: job}))[WORKER]
    assert back == job and isinstance(back.train, TrainConfig)
    assert back.train.loss == "moco" and back.train.log_every == 7
    with pytest.raises(AttributeError):
        job.total_steps = 4  # frozen: every worker reads what the driver built
