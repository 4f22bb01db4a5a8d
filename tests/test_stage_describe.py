"""A stage says, by a built dataset's manifest, what it adds to the recipe of a leaderboard row scored from it
(Stage.describe): how the evaluate stage learns a train run's dev selection without importing the train stage."""

from __future__ import annotations

from pipeline import registry


def test_the_train_stage_describes_a_dev_selected_run_by_its_manifest():
    train = registry.stage("train")
    manifest = {"best_step": 600, "steps": 1000, "selected_by": "heldout-loss 1.234"}
    assert train.describe(manifest) == "selected at step 600 of 1000 by heldout-loss 1.234"
    assert train.describe({"steps": 1000}) is None  # not dev-selected: the recipe gains nothing


def test_a_stage_that_declares_nothing_adds_nothing():
    assert registry.stage("init").describe({"best_step": 1, "steps": 2}) is None
