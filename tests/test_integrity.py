"""Nothing lost, nothing silent: concurrent publishing, damaged datasets, a full disk."""

from __future__ import annotations

import multiprocessing

import pandas as pd
import pyarrow as pa
import pytest

from pipeline.leaderboard import stage as leaderboard
from pipeline.stage import run_stage
from storage import DatasetWriter, dataset_path

MODELS = ("ma", "mb", "mc", "md")


def scores_dataset(artifacts: str, model: str) -> str:
    """An evaluate dataset holding one model's STS-B scores, as the evaluate stage writes them."""
    rows = [{"model": model, "kind": "trained", "task": "STSB", "subset": "all", "split": "test", "metric": "spearman",
             "protocol": protocol, "value": value, "n": 10, "model_fingerprint": model * 8, "data_hash": "d"}
            for protocol, value in (("cosine", 0.5), ("senteval", 0.4))]
    fp = (model * 8)[:16]
    with DatasetWriter(artifacts, "evaluate", fp, config={"model": model, "spec": {"kind": "user"}}, inputs={}) as out:
        out.write(pa.Table.from_pylist(rows))
    return dataset_path(artifacts, "evaluate", fp)


def publish_after(barrier, path: str, artifacts: str) -> None:
    barrier.wait()
    leaderboard.publish(path, artifacts)


@pytest.mark.slow
def test_concurrent_publishing_from_several_processes_keeps_every_row(tmp_path):
    artifacts = str(tmp_path)
    boards = [run_stage(leaderboard.STAGE, {"rank_by": None}, {f"scores-{m}": scores_dataset(artifacts, m)}, artifacts)
              for m in MODELS]
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(len(boards))
    procs = [context.Process(target=publish_after, args=(barrier, board, artifacts)) for board in boards]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0] * len(procs)
    assert sorted(pd.read_parquet(tmp_path / f"{leaderboard.CUMULATIVE}.parquet")["model"]) == list(MODELS)
    assert sorted(pd.read_parquet(tmp_path / leaderboard.CUMULATIVE_SCORES)["model"].unique()) == list(MODELS)
    assert not list(tmp_path.glob("*/.lease-*"))
