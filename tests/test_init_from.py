"""Runs that continue runs (train.init_from): validation, training order, and the parent in the child's
fingerprint. The end-to-end check (the child starts from the parent's exported weights) rides on
tests/test_e2e.py's flow run, which trains a continuing run."""

from __future__ import annotations

import pytest

from pipeline import registry
from pipeline.config import load_config
from pipeline.errors import ConfigError
from pipeline.evaluate.stage import trained_about
from pipeline.train import stage as train


def config(tmp_path, runs: str, *overrides: str):
    path = tmp_path / "runs.yaml"
    path.write_text(f"train: {{batch_size: 4}}\nruns:\n{runs}")
    return load_config(path, list(overrides))


@pytest.mark.parametrize(
    "runs, named",
    [
        ("  a: {}\n  b: {init_from: nope}\n", ["runs.b.init_from", "'nope'"]),
        ("  a: {init_from: a}\n", ["cycle", "a -> a"]),
        ("  x: {}\n  a: {init_from: b}\n  b: {init_from: c}\n  c: {init_from: a}\n", ["cycle", "a -> b -> c -> a"]),
    ],
    ids=["unknown", "self", "cycle"],
)
def test_a_bad_init_from_is_a_config_error_naming_the_runs(tmp_path, runs, named):
    with pytest.raises(ConfigError) as e:
        config(tmp_path, runs)
    message = str(e.value)
    assert "\n" not in message and all(part in message for part in named), message


def test_init_from_set_for_every_run_in_train_is_refused(tmp_path):
    """In train:, every run, the parent included, would continue itself."""
    with pytest.raises(ConfigError, match="cycle"):
        config(tmp_path, "  a: {}\n", "train.init_from=a")


def test_runs_train_after_the_run_they_continue(tmp_path):
    cfg = config(tmp_path, "  c: {init_from: b}\n  d: {}\n  b: {init_from: a}\n  a: {}\n  e: {init_from: a}\n")
    order = cfg.training_order()
    assert sorted(order) == ["a", "b", "c", "d", "e"]
    parents = {"c": "b", "b": "a", "e": "a"}
    assert all(order.index(parent) < order.index(child) for child, parent in parents.items()), order
    assert order == ["a", "b", "c", "d", "e"]  # otherwise the config's order


def test_without_init_from_the_order_is_the_configs(tmp_path):
    assert config(tmp_path, "  z: {}\n  m: {}\n  a: {}\n").training_order() == ["z", "m", "a"]


def plan(cfg, artifacts="/art") -> dict[str, tuple[dict, dict]]:
    """Each run's train config and inputs, as the train flow builds them, every dataset's path standing in for it."""
    done = {
        "init": f"{artifacts}/init/0123456789abcdef",
        **{f"augment/{r.pairs}": f"{artifacts}/augment/pairs-{r.pairs}" for r in cfg.run_configs().values()},
    }
    jobs = {}
    for label, key in train.instances(cfg, done).items():
        jobs[key] = (train.config(cfg, key), train.inputs(cfg, done, key))
        done[label] = train.STAGE.path(*jobs[key], artifacts)
    return jobs


def fingerprints(cfg) -> dict[str, str]:
    return {name: registry.stage("train").fingerprint(*job) for name, job in plan(cfg).items()}


RUNS = "  mlm: {contrastive: false}\n  simcse: {objective: simcse, init_from: mlm}\n  other: {}\n"


def test_a_continuing_run_starts_from_its_parents_train_dataset(tmp_path):
    jobs = plan(config(tmp_path, RUNS))
    parent = f"/art/train/{registry.stage('train').fingerprint(*jobs['mlm'])}"
    assert jobs["simcse"][1]["init"] == parent
    assert jobs["mlm"][1]["init"] == jobs["other"][1]["init"] == "/art/init/0123456789abcdef"
    assert list(jobs)[:2] == ["mlm", "simcse"]


def test_the_parents_config_is_part_of_the_childs_fingerprint(tmp_path):
    before = fingerprints(config(tmp_path, RUNS))
    after = fingerprints(config(tmp_path, RUNS, "runs.mlm.max_steps=7"))
    assert after["mlm"] != before["mlm"] and after["simcse"] != before["simcse"]
    assert after["other"] == before["other"]
    # Two levels down, too.
    chain = RUNS + "  child: {objective: clear, init_from: simcse}\n"
    changed = fingerprints(config(tmp_path, chain, "runs.mlm.lr=0.01"))
    assert changed["child"] != fingerprints(config(tmp_path, chain))["child"]


def test_the_parents_name_alone_changes_nothing(tmp_path):
    """The dependency is the parent's model, not its name: renaming a parent keeps every cached dataset."""
    renamed = RUNS.replace("mlm:", "pretrain:").replace("init_from: mlm", "init_from: pretrain")
    before, after = fingerprints(config(tmp_path, RUNS)), fingerprints(config(tmp_path, renamed))
    assert after["pretrain"] == before["mlm"] and after["simcse"] == before["simcse"]


def test_the_leaderboard_row_says_what_the_run_continues(tmp_path):
    runs = config(tmp_path, RUNS).run_configs()
    assert trained_about(runs["simcse"], "c")["recipe"].endswith(", from mlm")
    assert "from" not in trained_about(runs["other"], "c")["recipe"]
    assert trained_about(runs["mlm"], "c")["objective"] == "mlm (declutr anchors)"
    assert trained_about(runs["other"], "c")["objective"] == "declutr"


def test_the_objectives_profile_continues_every_objective_from_one_mlm_run():
    from pathlib import Path

    cfg = load_config(Path(__file__).resolve().parents[1] / "configs" / "objectives.yaml")
    runs = cfg.run_configs()
    assert not runs["mlm"].contrastive and runs["mlm"].mlm
    continuing = {name for name, r in runs.items() if r.init_from == "mlm"}
    assert continuing == {"declutr", "simcse", "clear", "tsdae", "simcse-sup"} and not runs["tsdae"].mlm
    assert len({r.max_steps for r in runs.values()}) == 1
    assert cfg.training_order()[0] == "mlm"
