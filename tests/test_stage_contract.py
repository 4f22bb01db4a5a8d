"""The stage contract (pipeline.stage): every stage module builds its own config and inputs, and declares the
settings that do not change its output, which the fingerprint leaves out."""

from __future__ import annotations

import inspect

from pipeline.config import Config
from pipeline.stage import runtime, stage_fingerprint
from pipeline.stages import STAGES
from pipeline.train import stage as train


def test_every_stage_module_exposes_the_contract():
    for name, stage in STAGES.items():
        assert stage.NAME == name and isinstance(stage.VERSION, str) and hasattr(stage, "SCHEMA"), name
        assert isinstance(stage.RUNTIME, dict), name
        for function in ("config", "inputs", "run"):
            assert callable(getattr(stage, function, None)), f"{name}.{function}"
        assert list(inspect.signature(stage.config).parameters)[0] == "cfg", name
        assert list(inspect.signature(stage.inputs).parameters)[:2] == ["done", "cfg"], name


def _train_fingerprint(*overrides: str, eval_data: str | None = None) -> str:
    cfg = Config(train=dict(o.split("=") for o in overrides), evaluate={"data": eval_data})
    return stage_fingerprint(train, train.config(cfg, "declutr"), {"pairs": "a/augment/1", "init": "a/init/2"})


def test_logging_and_checkpointing_leave_the_train_fingerprint_but_the_learning_rate_does_not():
    base = _train_fingerprint()
    assert _train_fingerprint("log_every=5") == base
    assert _train_fingerprint("checkpoint_every=7") == base
    assert _train_fingerprint("max_failures=0", "torch_threads=1", "cpus_per_worker=2") == base
    assert _train_fingerprint("lr=0.001") != base
    assert _train_fingerprint("num_workers=2") != base  # the workers split each batch


def test_checkpoint_every_is_fingerprinted_when_checkpoints_are_scored_for_selection(tiny_sts):
    selected = _train_fingerprint("eval_every=5", "checkpoint_every=7", eval_data=str(tiny_sts))
    assert selected != _train_fingerprint("eval_every=5", eval_data=str(tiny_sts))


def test_runtime_reads_defaults_and_refuses_unknown_keys():
    config = train.config(Config(train={"log_every": 3}), "declutr")
    assert runtime(config, train.RUNTIME)["log_every"] == 3
    assert runtime({}, train.RUNTIME) == train.RUNTIME
    try:
        runtime({"runtime": {"log_evry": 3}}, train.RUNTIME)
    except Exception as e:
        assert "log_evry" in str(e)
    else:
        raise AssertionError("an unknown runtime key was accepted")
