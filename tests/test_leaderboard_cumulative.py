"""leaderboard-all across evaluations on different data: every row stays, and rows are compared only with rows
scored on the same data (issue 41: publishing on other data used to drop every earlier row)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa

from pipeline.evaluate import items as test_items
from pipeline.leaderboard import stage as board
from pipeline.leaderboard.table import DATA
from pipeline.stage import run_stage
from storage import DatasetWriter, dataset_path
from tests.test_uncertainty import hand_built

PC, RR = "0c0c0c0c0c0c0c0c", "1d1d1d1d1d1d1d1d"  # two evaluation data's hashes


def _evaluated(art: str, name: str, predicts: str, fingerprint: str, data: str, fp: str) -> str:
    """An evaluate dataset as the stage writes it: `name` scored on `data`, predicting what `predicts` does in
    tests.test_uncertainty's hand-built items (its score rows and its test items)."""
    scores, items = hand_built()
    rows = scores[scores["model"] == predicts].assign(
        model=name, kind="user", model_fingerprint=fingerprint, data_hash=data
    )
    with DatasetWriter(art, "evaluate", fp, config={"model": name, "spec": {"kind": "user"}}, inputs={}) as out:
        out.write(pa.Table.from_pandas(rows, preserve_index=False))
        items[predicts].to_parquet(f"{out.local_dir}/{test_items.ITEMS}", index=False)
    return dataset_path(art, "evaluate", fp)


def _publish(art: str, evaluated: str, compare_to_default: str = "m1") -> pd.DataFrame:
    """One run's leaderboard over one evaluation, published; the cumulative table, in its order."""
    config = {"rank_by": None, "compare_to": None, "compare_to_default": compare_to_default}
    board.publish(run_stage(board.STAGE, config, {"scores-0": evaluated}, art), art)
    return pd.read_parquet(f"{art}/{board.CUMULATIVE}.parquet")


def _kept(art: str) -> pd.DataFrame:
    return pd.read_parquet(f"{art}/{board.CUMULATIVE_SCORES}")


def _kept_files(art: str) -> list[str]:
    return sorted(p.name for p in Path(art, board.CUMULATIVE_ITEMS).iterdir())


def test_three_publishes_on_two_data_keep_every_model(tmp_path):
    art = str(tmp_path)
    _publish(art, _evaluated(art, "m1", "ref", "1" * 16, PC, "e1"))
    _publish(art, _evaluated(art, "m2", "better", "2" * 16, RR, "e2"))
    table = _publish(art, _evaluated(art, "m3", "better", "3" * 16, PC, "e3"))
    one_evaluation = len(hand_built()[0]) // 2
    kept = _kept(art)
    assert kept.groupby(["data_hash", "model"]).size().to_dict() == {
        (PC, "m1"): one_evaluation,
        (RR, "m2"): one_evaluation,
        (PC, "m3"): one_evaluation,
    }
    assert _kept_files(art) == [f"{PC}.{'1' * 16}.parquet", f"{PC}.{'3' * 16}.parquet", f"{RR}.{'2' * 16}.parquet"]
    # One row each, the latest run's data first; each with its interval from its own items.
    assert list(zip(table[DATA], table["model"])) == [(PC, "m3"), (PC, "m1"), (RR, "m2")]
    assert table["STS12 simcse lo"].notna().all()
    # m3 is compared with the reference m1, scored on the same data; m2, on other data, with nothing.
    assert pd.notna(table.set_index("model").loc["m3", "STS12 simcse diff lo"])
    assert table.set_index("model").loc["m2", [c for c in table.columns if c.endswith(" diff")]].isna().all()
    md = (tmp_path / f"{board.CUMULATIVE}.md").read_text()
    assert f"| m2 | {RR} |" in md and f"| m1 | {PC} |" in md and "Scores on different data are not comparable" in md
    assert (tmp_path / f"{board.CUMULATIVE}.png").stat().st_size > 0


def test_a_rescored_model_replaces_its_rows_on_that_data_only(tmp_path):
    art = str(tmp_path)
    # A trained model (one fingerprint) scored on two data, then re-scored on the first, now predicting better.
    _publish(art, _evaluated(art, "m1", "ref", "1" * 16, PC, "e1"))
    _publish(art, _evaluated(art, "m1", "ref", "1" * 16, RR, "e2"))
    first = _publish(art, _evaluated(art, "m1", "better", "1" * 16, PC, "e3"))
    kept = _kept(art)
    one_evaluation = len(hand_built()[0]) // 2
    assert kept.groupby(["data_hash", "model"]).size().to_dict() == {
        (PC, "m1"): one_evaluation,
        (RR, "m1"): one_evaluation,
    }
    first = first.set_index([DATA, "model"])
    assert _kept_files(art) == [f"{PC}.{'1' * 16}.parquet", f"{RR}.{'1' * 16}.parquet"]
    alone = {
        p: _publish(str(tmp_path / p), _evaluated(str(tmp_path / p), "m1", p, "1" * 16, PC, "e"))
        for p in ("ref", "better")
    }
    columns = ["STS12 simcse", "STS12 simcse lo", "STS12 simcse hi", "MR senteval lo"]
    assert first.loc[(PC, "m1"), columns].tolist() == alone["better"].loc[0, columns].tolist()
    assert first.loc[(RR, "m1"), columns].tolist() == alone["ref"].loc[0, columns].tolist()
    # A model directory, whose fingerprint is its evaluation's and so differs with the data, keeps its name on
    # both: names need only differ within one data.
    _publish(art, _evaluated(art, "m4", "ref", "4" * 16, PC, "e4"))
    table = _publish(art, _evaluated(art, "m4", "better", "5" * 16, RR, "e5"))
    assert sorted(zip(table[DATA], table["model"])) == [(PC, "m1"), (PC, "m4"), (RR, "m1"), (RR, "m4")]
    # The same name on the same data as another model is still told apart by fingerprint.
    table = _publish(art, _evaluated(art, "m4", "better", "6" * 16, RR, "e6"))
    assert sorted(table.loc[table[DATA] == RR, "model"]) == ["m1", "m4 @55555555", "m4 @66666666"]
    assert sorted(table.loc[table[DATA] == PC, "model"]) == ["m1", "m4"]
    assert len(_kept_files(art)) == 5
