"""With evaluate.workers > 1 one model's scoring splits into units (each STS task, each transfer task, the
analysis) that run as Ray tasks of their own, inside the models' own Ray tasks, and write exactly the rows
of a serial run; units are independent of the order they run in."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipeline.config import Config
from pipeline.evaluate import kinds
from pipeline.evaluate import stage as evaluate
from pipeline.evaluate.config import EvaluateConfig
from pipeline.model.exported import Encoder
from pipeline.stage import run_stage
from storage import read_manifest, read_table
from tests.conftest import SHARED, write_sts
from tests.test_evaluate import concurrently

# The first lines of a few tasks' files: both STS layouts, every transfer scheme (cross-validated, train/test,
# train/dev/test, sentence pairs) and the analysis, at a fraction of the full data's cost.
SUBSET = {
    "senteval/STS12-en-test": {
        "STS.input.MSRvid.txt": 200,
        "STS.gs.MSRvid.txt": 200,
        "STS.input.surprise.SMTnews.txt": 150,
        "STS.gs.surprise.SMTnews.txt": 150,
    },
    "senteval/STSBenchmark": {"sts-dev.csv": 300, "sts-test.csv": 300},
    "senteval-classification/CR": {"custrev.neg": 150, "custrev.pos": 150},
    "senteval-classification/SST2": {"stsa.binary.train": 300, "stsa.binary.dev": 100, "stsa.binary.test": 100},
    "senteval-classification/TREC": {"train_5500.label": 600, "TREC_10.label": 100},
    "msrp": {"msr-para-train.tsv": 300, "msr-para-val.tsv": 100, "msr-para-test.tsv": 200},
}
# Without the shared data, the STS tasks written here (and no transfer task).
UNITS = (
    ["sts/STS12", "sts/STSB", "transfer/CR", "transfer/SST2", "transfer/TREC", "transfer/MRPC", "analysis"]
    if SHARED
    else ["sts/STS12", "sts/STSB", "analysis"]
)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("eval-subset")
    if not SHARED:
        return str(write_sts(root))
    for directory, files in SUBSET.items():
        (root / directory).mkdir(parents=True)
        for name, lines in files.items():
            head = (Path(SHARED) / "eval" / directory / name).read_bytes().split(b"\n")[:lines]
            (root / directory / name).write_bytes(b"\n".join(head) + b"\n")
    return str(root)


@pytest.fixture(scope="module")
def setup(evaluate_setup):
    return evaluate_setup


def jobs(setup, data: str, workers: int) -> list[tuple[dict, dict]]:  # noqa: F811  (the fixture's value)
    """A model and its whitened version: the transform is fitted by the stage and must reach every unit."""
    cfg = Config(evaluate=EvaluateConfig(data=data, batch_size=16, kfold=2, workers=workers))
    whitening = {"kind": "whitening", "k": 8, "sentences": 200, "seed": 0}
    return [
        (evaluate.config(cfg, evaluate.Row(name, spec, inputs, {"objective": "test"})), inputs)
        for name, spec, inputs in (
            ("tiny", {"kind": "untrained"}, {"model": setup["model"]}),
            (
                "tiny+whitening",
                {"kind": "untrained", "postprocess": whitening},
                {"model": setup["model"], "corpus": setup["documents"]},
            ),
        )
    ]


@pytest.mark.ray
def test_units_run_as_ray_tasks_of_their_own_and_write_the_serial_rows(
    setup,
    data,
    tmp_path,  # noqa: F811
    one_torch_thread,
    local_ray,
):
    serial = [
        run_stage(evaluate.STAGE, config, inputs, str(tmp_path / "serial")) for config, inputs in jobs(setup, data, 1)
    ]
    parallel = concurrently(jobs(setup, data, 2), str(tmp_path / "ray"))
    ray_tasks = []
    for one, other in zip(serial, parallel):
        assert Path(one).name == Path(other).name  # workers is a runtime setting: same fingerprint, same cache
        table = read_table(one)
        assert read_table(other).equals(table)
        units = {run: read_manifest(path)["units"] for run, path in (("serial", one), ("ray", other))}
        assert [u["unit"] for u in units["serial"]] == [u["unit"] for u in units["ray"]] == UNITS
        assert all(u["pid"] == os.getpid() and u["ray_task"] is None for u in units["serial"])
        assert all(u["pid"] != os.getpid() for u in units["ray"])
        ray_tasks += [u["ray_task"] for u in units["ray"]]
        assert {name.split("/")[1] for name in UNITS if "/" in name} <= set(table.column("task").to_pylist())
        assert "uniformity" in table.column("metric").to_pylist()
        averages = [row["n"] for row in table.to_pylist() if row["task"] == "transfer"]  # test and dev
        assert averages == ([4, 4] if SHARED else [])  # over every transfer unit's rows
    # The whitened model's units applied the transform fitted in its model's task.
    assert [set(read_table(path).column("dimension").to_pylist()) for path in parallel] == [{32}, {8}]
    # Every unit of both models ran as a Ray task of its own, none inside its model's task.
    assert None not in ray_tasks and len(set(ray_tasks)) == len(ray_tasks) == 2 * len(UNITS)


def test_units_score_the_same_in_any_order(setup, data, one_torch_thread):  # noqa: F811
    config = jobs(setup, data, 1)[0][0]
    settings = evaluate.STAGE.settings_of(config)
    units = evaluate.units(
        settings, kinds.search(data, config), Encoder(setup["model"], max_length=settings.max_length)
    )
    assert [u.name for u in units] == UNITS
    forward = [evaluate.score_unit(u).rows for u in units]
    assert [evaluate.score_unit(u).rows for u in reversed(units)][::-1] == forward
