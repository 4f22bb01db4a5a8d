"""`cpipe evaluate` says how far it is: one "cpipe" log line per scored task, with the model, the task, how many
of the model's tasks are done and the task's seconds (pipeline.evaluate.progress), as each unit's rows come back."""

from __future__ import annotations

import logging
import re

import pytest

from pipeline.config import Config
from pipeline.evaluate import stage as evaluate
from pipeline.evaluate.config import EvaluateConfig
from pipeline.stage import run_stage
from storage import read_manifest
from tests.conftest import write_sts
from tests.helpers import tiny_model

LINE = re.compile(r"^evaluate (?P<model>.+): (?P<task>\S+) (?P<done>\d+)/(?P<total>\d+) in \d+\.\d s$")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return str(tiny_model(tmp_path_factory.mktemp("progress") / "model"))


def progress_lines(caplog) -> list[re.Match]:
    return [m for r in caplog.records if r.name == "cpipe" and (m := LINE.match(r.getMessage()))]


def test_each_task_is_logged_as_it_is_scored_with_its_count(model, tmp_path, caplog, one_torch_thread):
    data = write_sts(tmp_path / "eval", n_pairs=12)
    cfg = Config(evaluate=EvaluateConfig(data=str(data), batch_size=16, max_length=32))
    row = evaluate.Row("tiny (seed 0)", {"kind": "untrained"}, {"model": model}, {"objective": "test"})
    with caplog.at_level(logging.INFO, logger="cpipe"):
        built = run_stage(evaluate.STAGE, evaluate.config(cfg, row), row.inputs, str(tmp_path / "art"))
    lines = progress_lines(caplog)
    # the data holds STS12 and STS-B, and the analysis is on: three tasks, each reported once, counted 1..3
    assert [m["task"] for m in lines] == ["STS12", "STSB", "analysis"]
    assert [(int(m["done"]), int(m["total"])) for m in lines] == [(1, 3), (2, 3), (3, 3)]
    assert {m["model"] for m in lines} == {"tiny (seed 0)"}
    assert [u["unit"] for u in read_manifest(built)["units"]] == ["sts/STS12", "sts/STSB", "analysis"]


def test_a_switched_off_task_is_neither_scored_nor_counted(model, tmp_path, caplog, one_torch_thread):
    data = write_sts(tmp_path / "eval", n_pairs=12)
    cfg = Config(evaluate=EvaluateConfig(data=str(data), batch_size=16, max_length=32, analysis=False))
    row = evaluate.Row("tiny", {"kind": "untrained"}, {"model": model}, {"objective": "test"})
    with caplog.at_level(logging.INFO, logger="cpipe"):
        run_stage(evaluate.STAGE, evaluate.config(cfg, row), row.inputs, str(tmp_path / "art"))
    assert [(m["model"], m["task"], m["done"], m["total"]) for m in progress_lines(caplog)] == [
        ("tiny", "STS12", "1", "2"),
        ("tiny", "STSB", "2", "2"),
    ]


def test_inside_a_task_every_loop_says_how_far_it_is_for_the_model_and_task(
    model, tmp_path, caplog, monkeypatch, one_torch_thread
):
    """Scoring STS-B's 8,628 pairs took a minute with no line: its pairs, and any encoder's batches, say how far they
    are, each line naming the model and the task."""
    monkeypatch.setattr("pipeline.progress.FIRST", 0)  # a line at every step: what each loop says in a long run
    monkeypatch.setattr("pipeline.progress.EVERY", 0)
    data = write_sts(tmp_path / "eval", n_pairs=12)
    cfg = Config(evaluate=EvaluateConfig(data=str(data), batch_size=16, max_length=32))
    row = evaluate.Row("tiny", {"kind": "untrained"}, {"model": model}, {"objective": "test"})
    with caplog.at_level(logging.INFO, logger="cpipe"):
        run_stage(evaluate.STAGE, evaluate.config(cfg, row), row.inputs, str(tmp_path / "art"))
    said = [r.getMessage() for r in caplog.records if r.name == "cpipe"]
    pairs = [m.groups() for s in said if (m := re.match(r"evaluate tiny: STSB: embedding (\d+)/(\d+) pairs", s))]
    # STS-B's dev and test splits, 12 pairs each, each split one batch of pairs; then the end's line
    assert pairs == [("12", "24"), ("24", "24"), ("24", "24")], said
    assert any(re.match(r"evaluate tiny: analysis: token states \d+/\d+ batches, .* ETA ", s) for s in said), said
