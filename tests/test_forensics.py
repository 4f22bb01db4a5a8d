"""Data forensics: what a stage dataset's directory holds beside its shards never reaches a reader of the shards
(pandas, pyarrow, the project's own), and each is found where it is looked for."""

from __future__ import annotations

import os

import pandas as pd

from pipeline.config import Config
from pipeline.evaluate import items as test_items
from pipeline.evaluate import stage as evaluate
from pipeline.evaluate.config import EvaluateConfig
from pipeline.stage import run_stage
from storage import read_table


def test_pandas_reads_an_evaluate_datasets_scores_and_the_items_stay_readable(evaluate_setup, tmp_path):
    cfg = Config(evaluate=EvaluateConfig(data=evaluate_setup["data"], batch_size=16, transfer=False))
    row = evaluate.Row("tiny", {"kind": "untrained"}, {"model": evaluate_setup["model"]}, {"objective": "test"})
    out = run_stage(evaluate.STAGE, evaluate.config(cfg, row), row.inputs, str(tmp_path / "art"))
    scores = read_table(out).to_pandas()
    kept = test_items.read(out)
    assert len(kept) > len(scores) > 0  # the items outnumber the scores: reading them in their place shows
    pd.testing.assert_frame_equal(pd.read_parquet(out), scores)
    # a dataset written before the items were renamed keeps them under the old name
    os.rename(f"{out}/{test_items.ITEMS}", f"{out}/{test_items.OLD_ITEMS}")
    pd.testing.assert_frame_equal(test_items.read(out), kept)
