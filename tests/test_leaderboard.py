import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline.errors import ConfigError
from pipeline.evaluate.config import EvaluateConfig
from pipeline.leaderboard.intervals import averages
from pipeline.leaderboard.table import absent_tasks, leaderboard, rank_column, to_markdown, write_leaderboard

TITLE = "STS leaderboard (test)"


def _rows(model, kind, task, first, second):
    """Test Spearman under the task's two protocols (STS12-16: senteval, simcse; STS-B/SICK-R: cosine, senteval)."""
    protocols = ("cosine", "senteval") if task in ("STSB", "SICKR") else ("senteval", "simcse")
    common = {"model": model, "kind": kind, "task": task, "subset": "all", "split": "test", "n": 100}
    return [
        {**common, "metric": "spearman", "protocol": protocols[0], "value": first},
        {**common, "metric": "spearman", "protocol": protocols[1], "value": second},
        # Rows the leaderboard must ignore: Pearson, per-subset rows, the dev split, a protocol the task lacks.
        {**common, "metric": "pearson", "protocol": protocols[0], "value": 0.99},
        {**common, "subset": "MSRpar", "metric": "spearman", "protocol": "subset", "value": 0.98},
        {**common, "split": "dev", "metric": "spearman", "protocol": protocols[0], "value": 0.97},
        {**common, "metric": "spearman", "protocol": "other", "value": 0.96},
    ]


SEVEN = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSB", "SICKR")


@pytest.fixture
def scores() -> pd.DataFrame:
    rows = (
        _rows("bow", "baseline", "STS12", 0.501234, 0.45)
        + _rows("declutr", "trained", "STS12", 0.70, 0.65)
        + _rows("declutr", "trained", "STSB", 0.80, 0.78)
        + _rows("random", "untrained", "STS12", 0.10, 0.05)
        + _rows("random", "untrained", "STSB", 0.20, 0.22)
        # A task outside the similarity set never becomes a column.
        + _rows("random", "untrained", "MSRvid", 0.5, 0.5)
    )
    return pd.DataFrame(rows)


def test_columns_name_their_protocol(scores):
    table = leaderboard(scores)
    assert list(table.columns) == [
        "model",
        "kind",
        "STS12 senteval",
        "STS12 simcse",
        "STSB cosine",
        "STSB senteval",
        "avg STS (SimCSE 7)",
        "avg STS (SentEval)",
    ]
    row = table.set_index("model").loc["declutr"]
    assert row["kind"] == "trained"
    assert row["STS12 senteval"] == 70.0 and row["STS12 simcse"] == 65.0
    assert row["STSB cosine"] == 80.0 and row["STSB senteval"] == 78.0


def test_averages_cover_exactly_the_tasks_they_name():
    # Scores chosen so that each average's hand-computed value differs from any other mixture.
    rows = []
    for i, task in enumerate(SEVEN):
        rows += _rows("full", "trained", task, 0.50 + 0.01 * i, 0.70 + 0.02 * i)
    rows += [r for r in _rows("partial", "trained", "STS12", 0.9, 0.9)]
    table = leaderboard(pd.DataFrame(rows)).set_index("model")
    years, relatedness = range(5), range(5, 7)
    simcse7 = np.mean([0.70 + 0.02 * i for i in years] + [0.50 + 0.01 * i for i in relatedness]) * 100
    senteval = np.mean([0.50 + 0.01 * i for i in years] + [0.70 + 0.02 * i for i in relatedness]) * 100
    assert table.loc["full", "avg STS (SimCSE 7)"] == round(simcse7, 2)
    assert table.loc["full", "avg STS (SentEval)"] == round(senteval, 2)
    # A row lacking a task shows its averages as missing, not as a mean of fewer tasks.
    assert math.isnan(table.loc["partial", "avg STS (SimCSE 7)"])
    assert math.isnan(table.loc["partial", "avg STS (SentEval)"])
    assert list(table.index) == ["full", "partial"]


def test_missing_task_is_nan_and_its_averages_too(scores):
    row = leaderboard(scores).set_index("model").loc["bow"]
    assert row["STS12 senteval"] == 50.12  # x100, rounded to 2 decimals
    assert math.isnan(row["STSB cosine"]) and math.isnan(row["STSB senteval"])
    assert math.isnan(row["avg STS (SimCSE 7)"])


def test_rank_by_a_named_column_or_the_default_rule(scores):
    # No model has all seven STS tasks here, so no STS average has a value: the default rule falls through to
    # the first score column that has one.
    assert rank_column(leaderboard(scores)) == "STS12 senteval"
    assert list(leaderboard(scores)["model"]) == ["declutr", "bow", "random"]
    by_stsb = leaderboard(scores, rank_by="STSB cosine")
    assert list(by_stsb["model"]) == ["declutr", "random", "bow"]  # bow has no STS-B: last
    with pytest.raises(ConfigError, match="evaluate.rank_by.*'SICKR cosine'"):
        leaderboard(scores, rank_by="SICKR cosine")
    rows = [r for i, t in enumerate(SEVEN) for r in _rows("a", "trained", t, 0.5, 0.6 + 0.01 * i)]
    rows += [r for t in SEVEN for r in _rows("b", "trained", t, 0.9, 0.4)]
    table = leaderboard(pd.DataFrame(rows))
    assert rank_column(table) == "avg STS (SimCSE 7)" and list(table["model"]) == ["a", "b"]
    assert list(leaderboard(pd.DataFrame(rows), rank_by="avg STS (SentEval)")["model"]) == ["b", "a"]


def test_rank_by_is_checked_when_the_config_is_read():
    assert EvaluateConfig(rank_by="avg STS (SimCSE 7)").rank_by == "avg STS (SimCSE 7)"
    assert EvaluateConfig(rank_by="MR senteval").rank_by == "MR senteval"
    with pytest.raises(ValueError, match="'avg senteval' is not a leaderboard column"):
        EvaluateConfig(rank_by="avg senteval")


def test_absent_tasks(scores):
    assert absent_tasks(scores) == ["STS13", "STS14", "STS15", "STS16", "SICKR"]
    assert absent_tasks(scores, ["STSB", "STS13"]) == ["STS13"]
    assert list(leaderboard(scores, ["STSB"]).columns[2:4]) == ["STSB cosine", "STSB senteval"]


def test_duplicate_scores_are_rejected(scores):
    with pytest.raises(ValueError, match="declutr"):
        leaderboard(pd.concat([scores, pd.DataFrame(_rows("declutr", "trained", "STSB", 0.1, 0.1))]))


def test_markdown(scores):
    table = leaderboard(scores)
    md = to_markdown(table, absent_tasks(scores), TITLE, rank_by=rank_column(table))
    lines = md.splitlines()
    assert lines[0] == f"# {TITLE}"
    assert lines[2] == (
        "| model | kind | STS12 senteval | STS12 simcse | STSB cosine | STSB senteval "
        "| avg STS (SimCSE 7) | avg STS (SentEval) |"
    )
    assert lines[3].count("|") == 9
    assert "| bow | baseline | 50.12 | 45.00 | — | — | — | — |" in lines
    assert "| declutr | trained | 70.00 | 65.00 | 80.00 | 78.00 | — | — |" in lines
    assert "Absent from the evaluation data: STS13, STS14, STS15, STS16, SICKR." in lines
    assert "senteval = mean of per-subset Spearman" in md
    assert "simcse = one Spearman of cosine over all subsets concatenated" in md
    assert "senteval = Spearman of SentEval's relatedness regressor" in md
    assert "avg STS (SimCSE 7) = mean of STS12-16 simcse, STSB cosine and SICKR cosine" in md
    assert "An average is — when a row lacks any of its tasks." in md
    assert lines[-1] == "Ranked by STS12 senteval."


def test_markdown_without_absent_tasks(scores):
    md = to_markdown(leaderboard(scores, ["STS12", "STSB"]), [], TITLE)
    assert "Absent" not in md and "Ranked" not in md


def test_write_leaderboard(scores, tmp_path):
    table = leaderboard(scores)
    absent = absent_tasks(scores)
    out = tmp_path / "board"
    paths = write_leaderboard(table, absent, str(out), TITLE)
    assert paths == {fmt: str(out / f"leaderboard.{fmt}") for fmt in ("md", "csv", "parquet", "png")}
    assert sorted(p.name for p in out.iterdir()) == [f"leaderboard.{f}" for f in ("csv", "md", "parquet", "png")]
    assert Path(paths["png"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert Path(paths["md"]).read_text() == to_markdown(table, absent, TITLE)
    pd.testing.assert_frame_equal(pd.read_parquet(paths["parquet"]), table)
    pd.testing.assert_frame_equal(pd.read_csv(paths["csv"]), table, check_dtype=False)

    # Rewriting replaces the files in place and leaves no temporary files behind.
    write_leaderboard(table.iloc[:1], absent, str(out), TITLE)
    assert len(pd.read_csv(paths["csv"])) == 1
    assert len(list(out.iterdir())) == 4


def test_transfer_analysis_and_what_each_model_is(scores):
    extra = []
    for model, acc in (("declutr", 0.8), ("random", 0.7)):
        common = {"model": model, "subset": "all", "split": "test", "protocol": "senteval", "n": 10}
        extra += [{**common, "task": t, "metric": "accuracy", "value": acc + d} for t, d in (("MR", 0.02), ("MRPC", 0))]
        extra += [
            {**common, "task": "MRPC", "metric": "f1", "value": acc + 0.1},
            # The scores' own average row (whatever it says) is not what the leaderboard shows.
            {**common, "task": "transfer", "metric": "accuracy", "protocol": "declutr", "value": 0.1},
            {**common, "task": "MR", "metric": "accuracy", "protocol": "sklearn", "value": acc},
            {**common, "task": "STSB", "metric": "alignment", "protocol": "simcse", "value": 0.123456},
            {**common, "task": "STSB", "metric": "anisotropy", "protocol": "ethayarajh", "value": 0.5},
        ]
    extra = [r for r in extra if not (r["model"] == "random" and r["task"] == "MR" and r["protocol"] == "senteval")]
    both = pd.concat([scores.assign(parameters=1234, objective="x"), pd.DataFrame(extra)], ignore_index=True)
    table = leaderboard(both).set_index("model")
    assert table.loc["declutr", "MR senteval"] == 82.0 and table.loc["declutr", "MRPC F1 senteval"] == 90.0
    # MR, and MRPC as the mean of accuracy and F1: (82 + (80 + 90) / 2) / 2
    assert table.loc["declutr", "avg transfer (SentEval)"] == 83.5
    assert math.isnan(table.loc["random", "MR senteval"])  # missing, not zero
    assert math.isnan(table.loc["random", "avg transfer (SentEval)"])  # not the mean of MRPC alone
    assert table.loc["random", "avg transfer (sklearn)"] == 70.0 and table.loc["declutr", "MR sklearn"] == 80.0
    assert table.loc["declutr", "alignment"] == 0.123 and table.loc["declutr", "anisotropy"] == 0.5
    # With no complete STS average, transfer's is the first average some model has.
    assert rank_column(leaderboard(both)) == "avg transfer (SentEval)"
    md = to_markdown(leaderboard(both), [], TITLE)
    assert "| 1,234 |" in md and "avg transfer (SentEval)" in md and "0.123" in md
    assert "senteval = SentEval's PyTorch classifier" in md and "Ethayarajh" in md


def test_the_papers_transfer_averages_by_hand():
    """avg transfer (SimCSE 7): MR, CR, SUBJ, MPQA, SST2, TREC and MRPC accuracy (SimCSE's evaluation.py, no
    SICK-E).
    avg downstream (DeCLUTR 15): CR, MR, MPQA, SUBJ, SST2, TREC, MRPC as (accuracy + F1) / 2, SICK-E, and SICK-R,
    STS-B and STS12-16 by SentEval's protocol (DeCLUTR's Downstream (-SNLI) less SST5 and COCO)."""
    acc = {"MR": 0.81, "CR": 0.87, "SUBJ": 0.94, "MPQA": 0.89, "SST2": 0.86, "TREC": 0.83, "MRPC": 0.73, "SICKE": 0.79}
    sts = {"STS12": 0.61, "STS13": 0.67, "STS14": 0.64, "STS15": 0.75, "STS16": 0.72, "STSB": 0.77, "SICKR": 0.69}
    rows = []
    for model, shift in (("a", 0.0), ("b", 0.01)):
        common = {"model": model, "subset": "all", "split": "test", "n": 10}
        rows += [
            {**common, "task": t, "metric": "accuracy", "protocol": "senteval", "value": v + shift}
            for t, v in acc.items()
            if not (model == "b" and t == "SICKE")
        ]  # b lacks SICK-E
        rows += [{**common, "task": t, "metric": "accuracy", "protocol": "sklearn", "value": 0.5} for t in acc]
        rows.append({**common, "task": "MRPC", "metric": "f1", "protocol": "senteval", "value": 0.81 + shift})
        rows.append({**common, "task": "MRPC", "metric": "f1", "protocol": "sklearn", "value": 0.5})
        rows += [
            {**common, "task": t, "metric": "spearman", "protocol": "senteval", "value": v + shift}
            for t, v in sts.items()
        ]
        rows += [
            {
                **common,
                "task": t,
                "metric": "spearman",
                "protocol": "simcse" if t.startswith("STS1") else "cosine",
                "value": 0.1,
            }
            for t in sts
        ]
    table = leaderboard(pd.DataFrame(rows)).set_index("model")
    simcse_a = (81 + 87 + 94 + 89 + 86 + 83 + 73) / 7
    declutr_a = (87 + 81 + 89 + 94 + 86 + 83 + (73 + 81) / 2 + 79 + 69 + 77 + 61 + 67 + 64 + 75 + 72) / 15
    assert table.loc["a", "avg transfer (SimCSE 7)"] == pytest.approx(simcse_a, abs=0.005)
    assert table.loc["a", "avg downstream (DeCLUTR 15)"] == pytest.approx(declutr_a, abs=0.005)
    assert table.loc["b", "avg transfer (SimCSE 7)"] == pytest.approx(simcse_a + 1, abs=0.005)  # SICK-E not in it
    assert math.isnan(table.loc["b", "avg downstream (DeCLUTR 15)"])  # SICK-E is: never a mean of fewer
    assert table.loc["a", "avg transfer (sklearn)"] == 50.0  # the papers' averages are senteval's alone
    md = to_markdown(leaderboard(pd.DataFrame(rows)), [], TITLE)
    assert "SimCSE's transfer average" in md and "less SST5 and COCO" in md
    assert leaderboard(pd.DataFrame(rows), rank_by="avg downstream (DeCLUTR 15)")["model"].tolist() == ["a", "b"]
    assert EvaluateConfig(rank_by="avg transfer (SimCSE 7)").rank_by == "avg transfer (SimCSE 7)"
    # Their bootstrap intervals resample the same parts: MRPC by accuracy for SimCSE, by accuracy and F1 for DeCLUTR.
    parts = averages(list(table.reset_index().columns))
    assert parts["avg transfer (SimCSE 7)"][-1] == "MRPC senteval"
    assert "MRPC accuracy+F1 senteval" in parts["avg downstream (DeCLUTR 15)"]
    assert len(parts["avg downstream (DeCLUTR 15)"]) == 15


def test_cumulative_leaderboard_replaces_a_rescored_model_and_keeps_others(scores):
    from pipeline.leaderboard.stage import cumulative

    first = scores.assign(
        model_fingerprint=scores["model"].map(lambda m: f"{hash(m) & 0xFFFFFFFF:08x}0000"), data_hash="d"
    )
    fp = first.loc[first["model"] == "declutr", "model_fingerprint"].iloc[0]
    second = scores[scores["model"] == "declutr"].assign(
        model_fingerprint=fp, data_hash="d", value=lambda t: t["value"] / 2
    )
    merged = cumulative(first, second)
    assert len(merged) == len(first)  # declutr's rows replaced, not added
    assert leaderboard(merged).set_index("model").loc["declutr", "STSB cosine"] == 40.0
    retrained = second.assign(model_fingerprint="feedbeef00000000")
    names = set(leaderboard(cumulative(merged, retrained))["model"])
    assert {f"declutr @{fp[:8]}", "declutr @feedbeef", "random"} <= names and "declutr" not in names
    # Scored on other evaluation data, the model is added beside its rows on "d", under the same name (names need
    # only differ within one data's section), and every row on "d" stays.
    other_data = cumulative(first, second.assign(data_hash="e"))
    assert len(other_data) == len(first) + len(second)
    assert other_data.groupby("data_hash")["model"].unique().map(set).to_dict() == {
        "d": {"bow", "declutr", "random"},
        "e": {"declutr"},
    }
