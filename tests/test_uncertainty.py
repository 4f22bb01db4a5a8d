"""Bootstrap intervals and paired comparisons on the leaderboard (pipeline.leaderboard.intervals).

Expectations come from outside the code under test: a paired-bootstrap loop in plain Python (random.Random draws,
a hand-written Spearman with average ranks, numpy's linear percentile written out) fed the same resample indices;
simulated data sets whose true difference is known in closed form (Spearman's correlation of a bivariate normal is
6/pi asin(rho/2)); and scipy on the per-item outputs a real evaluate stage wrote.
"""

from __future__ import annotations

import json
import math
import random
import shutil
from pathlib import Path
from statistics import NormalDist, stdev

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from scipy import stats
from sklearn.metrics import f1_score

from pipeline.config import Config
from pipeline.errors import ConfigError
from pipeline.evaluate import items as test_items
from pipeline.evaluate import stage as evaluate
from pipeline.evaluate.config import EvaluateConfig
from pipeline.evaluate.stage import initial_row
from pipeline.leaderboard import bootstrap
from pipeline.leaderboard import stage as board
from pipeline.leaderboard.intervals import add_intervals
from pipeline.leaderboard.table import leaderboard, to_markdown
from pipeline.stage import run_stage
from storage import DatasetWriter, dataset_path, read_table
from tests.conftest import WORDS
from tests.reference import spearman

# --- a plain-Python paired bootstrap ----------------------------------------------------------------------------


def f1(pred: list[int], gold: list[int]) -> float:
    tp = sum(p == g == 1 for p, g in zip(pred, gold))
    wrong = sum(p != g for p, g in zip(pred, gold))
    return 2 * tp / (2 * tp + wrong) if tp + wrong else 0.0


def percentile(values: list[float], q: float) -> float:
    """numpy's default ("linear") percentile."""
    s = sorted(values)
    h = (len(s) - 1) * q / 100
    lo = math.floor(h)
    return s[lo] + (h - lo) * (s[min(lo + 1, len(s) - 1)] - s[lo])


# Hand-built items: STS12 in two subsets (ties in the gold scores and the predictions), MR in two folds, MRPC.
GOLD = {
    "STS12": {"MSRpar": [0.0, 1.0, 1.0, 2.5, 3.0, 4.0, 4.0, 5.0], "OnWN": [0.5, 2.0, 2.0, 3.5, 4.5, 5.0]},
    "MR": {"fold 0": [0, 1, 1, 0, 1, 0, 1], "fold 1": [1, 0, 0, 1, 1, 0]},
    "MRPC": {"all": [1, 1, 0, 1, 0, 1, 1, 0, 1, 0]},
}
PREDICTED = {
    "ref": {
        "STS12": {"MSRpar": [0.1, 0.3, 0.2, 0.2, 0.6, 0.5, 0.9, 0.7], "OnWN": [0.2, 0.2, 0.4, 0.3, 0.8, 0.9]},
        "MR": {"fold 0": [0, 0, 1, 0, 1, 1, 1], "fold 1": [1, 1, 0, 0, 1, 0]},
        "MRPC": {"all": [1, 0, 0, 1, 1, 1, 0, 0, 1, 1]},
    },
    "better": {
        "STS12": {"MSRpar": [0.0, 0.2, 0.3, 0.4, 0.6, 0.8, 0.8, 0.9], "OnWN": [0.1, 0.3, 0.3, 0.5, 0.7, 0.9]},
        "MR": {"fold 0": [0, 1, 1, 0, 1, 0, 0], "fold 1": [1, 0, 0, 1, 1, 1]},
        "MRPC": {"all": [1, 1, 0, 1, 0, 1, 1, 1, 1, 0]},
    },
}
PROTOCOL = {"STS12": "cosine", "MR": "senteval", "MRPC": "senteval"}


def hand_built() -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """Score rows as the evaluate stage writes them, from the items (scipy and scikit-learn), and the items."""
    rows, items = [], {}
    for model, tasks in PREDICTED.items():
        records = [
            {"task": t, "protocol": PROTOCOL[t], "stratum": s, "prediction": p, "gold": g}
            for t, strata in tasks.items()
            for s, preds in strata.items()
            for p, g in zip(preds, GOLD[t][s])
        ]
        items[model] = pd.DataFrame(records)
        sts = tasks["STS12"]
        common = {"model": model, "subset": "all", "split": "test", "n": 1}

        def row(task, metric, protocol, value):
            return {**common, "task": task, "metric": metric, "protocol": protocol, "value": float(value)}

        rows += [
            row(
                "STS12",
                "spearman",
                "senteval",
                np.mean([stats.spearmanr(sts[s], GOLD["STS12"][s]).statistic for s in sts]),
            ),
            row(
                "STS12",
                "spearman",
                "simcse",
                stats.spearmanr(sum(sts.values(), []), sum(GOLD["STS12"].values(), [])).statistic,
            ),
            row(
                "MR",
                "accuracy",
                "senteval",
                np.mean([np.mean(np.equal(tasks["MR"][s], GOLD["MR"][s])) for s in GOLD["MR"]]),
            ),
            row("MRPC", "accuracy", "senteval", np.mean(np.equal(tasks["MRPC"]["all"], GOLD["MRPC"]["all"]))),
            row("MRPC", "f1", "senteval", f1_score(GOLD["MRPC"]["all"], tasks["MRPC"]["all"])),
        ]
    return pd.DataFrame(rows), items


def loop_statistics(model: str, draws: dict[str, dict[str, list[int]]]) -> dict[str, float]:
    """One resample's scores x 100 of every column, from the resampled items, in plain Python."""

    def take(task, stratum):
        idx = draws[task][stratum]
        return ([PREDICTED[model][task][stratum][i] for i in idx], [GOLD[task][stratum][i] for i in idx])

    sts = {s: take("STS12", s) for s in GOLD["STS12"]}
    mr = {s: take("MR", s) for s in GOLD["MR"]}
    mrpc_pred, mrpc_gold = take("MRPC", "all")
    mr_accuracy = sum(sum(p == g for p, g in zip(*mr[s])) / len(mr[s][0]) for s in mr) / len(mr)
    mrpc_accuracy = sum(p == g for p, g in zip(mrpc_pred, mrpc_gold)) / len(mrpc_gold)
    mrpc_f1 = f1(mrpc_pred, mrpc_gold)
    return {
        "STS12 senteval": 100 * sum(spearman(*sts[s]) for s in sts) / len(sts),
        "STS12 simcse": 100 * spearman(sum((sts[s][0] for s in sts), []), sum((sts[s][1] for s in sts), [])),
        "MR senteval": 100 * mr_accuracy,
        "MRPC senteval": 100 * mrpc_accuracy,
        "MRPC F1 senteval": 100 * mrpc_f1,
        "avg transfer (SentEval)": 100 * (mr_accuracy + (mrpc_accuracy + mrpc_f1) / 2) / 2,
    }


def test_vectorised_bootstrap_is_the_plain_loop_on_the_same_resamples():
    b, rnd = 300, random.Random(7)
    draws = [
        {task: {s: [rnd.randrange(len(g)) for _ in g] for s, g in strata.items()} for task, strata in GOLD.items()}
        for _ in range(b)
    ]

    def seam(task, sizes, n):
        """The same draws, as the code takes them: per stratum a (resamples, size) array, in two blocks."""
        strata = list(GOLD[task])
        whole = [np.array([d[task][s] for d in draws[:n]]) for s in strata]
        yield [a[:120] for a in whole]
        yield [a[120:] for a in whole]

    scores, items = hand_built()
    table, comparison = add_intervals(leaderboard(scores), items, compare_to="ref", b=b, draw=seam)
    table = table.set_index("model")
    loop = {m: [loop_statistics(m, d) for d in draws] for m in PREDICTED}
    every = {task: {s: list(range(len(g))) for s, g in strata.items()} for task, strata in GOLD.items()}
    whole = {m: loop_statistics(m, every) for m in PREDICTED}  # the scores on the items as they are
    columns = list(loop["ref"][0])
    p, excludes_0 = {}, {}
    for column in columns:
        for model in PREDICTED:
            values = [r[column] for r in loop[model]]
            assert table.loc[model, f"{column} lo"] == pytest.approx(percentile(values, 2.5), abs=0.0051)
            assert table.loc[model, f"{column} hi"] == pytest.approx(percentile(values, 97.5), abs=0.0051)
        diffs = [x[column] - y[column] for x, y in zip(loop["better"], loop["ref"])]
        lo, hi = percentile(diffs, 2.5), percentile(diffs, 97.5)
        assert table.loc["better", f"{column} diff lo"] == pytest.approx(lo, abs=0.0051)
        assert table.loc["better", f"{column} diff hi"] == pytest.approx(hi, abs=0.0051)
        # Two-sided on the normal: the table's difference (its scores, to 2 decimals) over the resamples' spread.
        d = round(whole["better"][column], 2) - round(whole["ref"][column], 2)
        p[column] = 2 * (1 - NormalDist().cdf(abs(d) / stdev(diffs)))
        assert table.loc["better", f"{column} p"] == pytest.approx(p[column], rel=1e-3)
        excludes_0[column] = lo > 0 or hi < 0
        assert pd.isna(table.loc["ref", f"{column} diff"])  # the reference is not compared with itself
    # Marked after Holm's step-down over the table's comparisons (once: each interval excluding 0 alone).
    holm, ordered = set(), sorted(columns, key=p.get)
    for k, column in enumerate(ordered):
        if p[column] > 0.05 / (len(ordered) - k):
            break
        holm.add(column)
    for column in columns:
        assert bool(table.loc["better", f"{column} significant"]) == (column in holm and excludes_0[column]), column
    assert comparison.comparisons == len(columns) and comparison.significant == len(holm)


def test_the_default_draws_are_the_exposed_indices_and_fixed():
    """chunks (what the leaderboard draws) joined are indices, the same on every call, per task."""
    sizes = [5, 3]
    blocks = list(bootstrap.chunks("STS12", sizes, b=300))
    assert len(blocks) > 1
    joined = [np.concatenate([blk[s] for blk in blocks]) for s in range(2)]
    again = bootstrap.indices("STS12", sizes, b=300)
    assert all(np.array_equal(x, y) for x, y in zip(joined, again))
    assert [a.shape for a in again] == [(300, 5), (300, 3)]
    assert not np.array_equal(bootstrap.indices("STS13", sizes, b=300)[0], again[0])


# --- coverage by simulation --------------------------------------------------------------------------------------


def _population_spearman(rho: float) -> float:
    return 6 / math.pi * math.asin(rho / 2)


def _simulated_sts(rng: np.random.Generator, n: int, noise: dict[str, float]):
    gold = rng.normal(size=n)
    scores, items = [], {}
    for model, sigma in noise.items():
        pred = gold + sigma * rng.normal(size=n)
        items[model] = pd.DataFrame(
            {"task": "STSB", "protocol": "cosine", "stratum": "all", "prediction": pred, "gold": gold}
        )
        scores.append(
            {
                "model": model,
                "task": "STSB",
                "subset": "all",
                "split": "test",
                "metric": "spearman",
                "protocol": "cosine",
                "value": stats.spearmanr(pred, gold).statistic,
                "n": n,
            }
        )
    return pd.DataFrame(scores), items


def _binomial_band(p: float, trials: int) -> tuple[float, float]:
    sd = math.sqrt(p * (1 - p) / trials)
    return p - 3.5 * sd, p + 3.5 * sd


def test_paired_interval_covers_the_true_difference_about_95_percent():
    """Predictors of the same gold scores with known noise: the 95% interval of the Spearman difference to the
    reference covers the population difference in about 95% of the data sets, and for a predictor as noisy as the
    reference it excludes 0 in about 5%."""
    rng, trials, n = np.random.default_rng(2026), 250, 200
    noise = {"ref": 1.0, "better": 0.75, "twin": 1.0}
    truth = 100 * (
        _population_spearman(1 / math.sqrt(1 + noise["better"] ** 2))
        - _population_spearman(1 / math.sqrt(1 + noise["ref"] ** 2))
    )
    covered = rejected = 0
    for _ in range(trials):
        scores, items = _simulated_sts(rng, n, noise)
        table = leaderboard(scores, items=items, compare_to="ref").set_index("model")
        covered += table.loc["better", "STSB cosine diff lo"] <= truth <= table.loc["better", "STSB cosine diff hi"]
        rejected += bool(table.loc["twin", "STSB cosine significant"])
    low, high = _binomial_band(0.95, trials)
    assert low <= covered / trials <= high, covered / trials
    low, high = _binomial_band(0.05, trials)
    assert max(low, 0) <= rejected / trials <= high, rejected / trials


# --- a leaderboard from real evaluate outputs ------------------------------------------------------------------


def _write_transfer(root: Path, rng: random.Random) -> None:
    """Tiny MR (cross-validated) and MRPC (train and test) in SentEval's layouts, over the test data's words."""

    def sentence(n: int = 6) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(n))

    (root / "MR").mkdir()
    for name in ("pos", "neg"):
        (root / "MR" / f"rt-polarity.{name}").write_text("".join(f"{sentence()}\n" for _ in range(24)))
    (root / "MRPC").mkdir()
    for name, n in (("train", 30), ("val", 6), ("test", 24)):
        lines = ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"]
        for i in range(n):
            first = sentence()
            label = rng.randrange(2)
            second = first if label else sentence()
            lines.append(f"{label}\t{i}\t{i + 1000}\t{first}\t{second}")
        (root / "MRPC" / f"msr-para-{name}.tsv").write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def scored(evaluate_setup, tmp_path_factory):
    """Two rows scored by the evaluate stage (a tiny model, random vectors) on tiny STS, MR and MRPC data, and the
    leaderboard stage over them, with its default reference row (untrained)."""
    root = tmp_path_factory.mktemp("uncertainty")
    data = root / "eval"
    shutil.copytree(evaluate_setup["data"], data)
    _write_transfer(data, random.Random(3))
    cfg = Config(evaluate=EvaluateConfig(data=str(data), batch_size=16, kfold=3, analysis=False))
    art = str(root / "artifacts")
    rows = [
        evaluate.Row("untrained", {"kind": "untrained"}, {"model": evaluate_setup["model"]}, {"objective": "x"}),
        evaluate.Row("random", {"kind": "random", "dim": 16, "seed": 0}, {}, {"objective": "none (random)"}),
    ]
    paths = {r.name: run_stage(evaluate.STAGE, evaluate.config(cfg, r), r.inputs, art) for r in rows}
    inputs = {f"scores-{name}": path for name, path in paths.items()}
    return {
        "cfg": cfg,
        "paths": paths,
        "inputs": inputs,
        "art": art,
        "leaderboard": run_stage(board.STAGE, board.config(cfg), inputs, art),
    }


def test_kept_items_give_back_every_test_score(scored):
    """The items beside each model's scores are what was scored: scipy over them gives the score rows' values."""
    for path in scored["paths"].values():
        scores = (
            read_table(path)
            .to_pandas()
            .query("split == 'test'")
            .set_index(["task", "protocol", "metric", "subset"])["value"]
        )
        kept = test_items.read(path)
        assert {("STS12", "cosine"), ("STSB", "cosine"), ("MR", "senteval"), ("MRPC", "senteval")} == set(
            zip(kept["task"], kept["protocol"])
        )
        for (task, _protocol, stratum), g in kept.groupby(["task", "protocol", "stratum"]):
            if task == "STS12":
                assert scores[task, "subset", "spearman", stratum] == pytest.approx(
                    stats.spearmanr(g["prediction"], g["gold"]).statistic, abs=1e-12
                )
        sts = kept[kept["task"] == "STSB"]
        assert scores["STSB", "cosine", "spearman", "all"] == pytest.approx(
            stats.spearmanr(sts["prediction"], sts["gold"]).statistic, abs=1e-12
        )
        mr = kept[kept["task"] == "MR"]
        assert sorted(set(mr["stratum"])) == ["fold 0", "fold 1", "fold 2"] and len(mr) == 48
        folds = [np.mean(g["prediction"] == g["gold"]) for _, g in mr.groupby("stratum")]
        assert scores["MR", "senteval", "accuracy", "all"] == pytest.approx(np.mean(folds), abs=1e-12)
        mrpc = kept[kept["task"] == "MRPC"]
        assert len(mrpc) == 24
        assert scores["MRPC", "senteval", "accuracy", "all"] == pytest.approx(
            np.mean(mrpc["prediction"] == mrpc["gold"]), abs=1e-12
        )
        assert scores["MRPC", "senteval", "f1", "all"] == pytest.approx(
            f1_score(mrpc["gold"].astype(int), mrpc["prediction"].astype(int)), abs=1e-12
        )


def test_leaderboard_of_real_outputs_has_an_interval_in_every_score_cell(scored):
    md = Path(f"{scored['leaderboard']}/leaderboard.md").read_text()
    header, _, *body = [line for line in md.splitlines() if line.startswith("|")]
    names = [c.strip() for c in header.strip("|").split("|")]
    score_columns = [
        c
        for c in names
        if c.rsplit(" ", 1)[-1] in ("senteval", "simcse", "cosine", "(SimCSE 7)", "(SentEval)") or c.startswith("avg")
    ]
    assert {"STS12 simcse", "STSB cosine", "MR senteval", "MRPC F1 senteval", "avg transfer (SentEval)"} <= set(
        score_columns
    )
    for line in body:
        cells = dict(zip(names, (c.strip() for c in line.strip("|").split("|"))))
        for column in score_columns:
            if cells[column] != "—":  # a column no row has (STSB senteval: the tiny STS-B has no train split)
                assert "[" in cells[column] and "]" in cells[column], (column, cells[column])
    assert "95% percentile bootstrap interval" in md and "reference row untrained" in md
    table = pd.read_csv(f"{scored['leaderboard']}/leaderboard.csv").set_index("model")
    comparisons = int(table[[c for c in table.columns if c.endswith(" significant")]].notna().sum().sum())
    assert comparisons == len([c for c in score_columns if table.loc["random", c] == table.loc["random", c]])
    assert f"This table makes {comparisons} such comparisons" in md
    assert (
        table.loc["random", "MR senteval lo"]
        <= table.loc["random", "MR senteval"]
        <= table.loc["random", "MR senteval hi"]
    )


def test_compare_to_names_the_reference_row_and_an_unknown_row_is_a_one_line_error(scored):
    cfg = Config(evaluate=EvaluateConfig(data=scored["cfg"].evaluate.data, compare_to="random"))
    settings = board.STAGE.settings_of(board.config(cfg))
    scores = board.load_scores(list(scored["paths"].values()))
    items = board.load_items(list(scored["paths"].values()))
    table = leaderboard(scores, items=items, compare_to=board.reference(settings, scores["model"]))
    row = table.set_index("model").loc["untrained"]
    assert pd.notna(row["STSB cosine diff"]) and "reference row random" in to_markdown(
        table, [], "t", compare_to="random"
    )
    with pytest.raises(ConfigError, match="evaluate.compare_to: no row named 'nobody'") as err:
        leaderboard(scores, items=items, compare_to="nobody")
    assert "\n" not in str(err.value)


def test_the_initial_row_is_named_for_the_base_model():
    assert initial_row(Config())[0] == "untrained"
    name, about = initial_row(Config(model={"base": "sentence-transformers/all-MiniLM-L6-v2"}))
    assert name == "all-MiniLM-L6-v2" and "untrained" not in about["objective"] and "none" not in about["objective"]
    assert board.config(Config(model={"base": "sentence-transformers/all-MiniLM-L6-v2"}))["compare_to_default"] == name


# --- the cumulative leaderboard across runs -------------------------------------------------------------------


def _evaluated(art: str, name: str, rows: pd.DataFrame, items: pd.DataFrame | None, fingerprint: str, fp: str) -> str:
    """An evaluate dataset as the stage writes it: one model's score rows, and its test items when given."""
    rows = rows.assign(model=name, kind="user", model_fingerprint=fingerprint, data_hash="d")
    with DatasetWriter(art, "evaluate", fp, config={"model": name, "spec": {"kind": "user"}}, inputs={}) as out:
        out.write(pa.Table.from_pandas(rows, preserve_index=False))
        if items is not None:
            items.to_parquet(f"{out.local_dir}/{test_items.ITEMS}", index=False)
    return dataset_path(art, "evaluate", fp)


def _publish(art: str, *evaluated: str) -> pd.DataFrame:
    """One run's leaderboard over `evaluated`, published; the cumulative table (reference by default: "ref")."""
    config = {"rank_by": None, "compare_to": None, "compare_to_default": "ref"}
    board.publish(run_stage(board.STAGE, config, {f"scores-{i}": p for i, p in enumerate(evaluated)}, art), art)
    return pd.read_parquet(f"{art}/{board.CUMULATIVE}.parquet").set_index("model")


def _kept_files(art: str) -> list[str]:
    return sorted(p.name for p in Path(art, board.CUMULATIVE_ITEMS).iterdir())


def test_the_cumulative_leaderboard_has_intervals_and_differences_of_models_published_apart(tmp_path):
    """Two runs, one model each: leaderboard-all has both rows' intervals and the second's paired difference to the
    first (the default reference), those of the plain loop on the leaderboard's own resamples."""
    scores, items = hand_built()
    art = str(tmp_path)
    for i, model in enumerate(PREDICTED):
        _publish(art, _evaluated(art, model, scores[scores["model"] == model], items[model], f"{i}" * 16, f"e{i}"))
    table = pd.read_parquet(tmp_path / f"{board.CUMULATIVE}.parquet").set_index("model")
    resamples = {t: bootstrap.indices(t, [len(g) for g in strata.values()]) for t, strata in GOLD.items()}
    draws = [
        {t: {s: list(resamples[t][k][i]) for k, s in enumerate(GOLD[t])} for t in GOLD} for i in range(bootstrap.B)
    ]
    loop = {m: [loop_statistics(m, d) for d in draws] for m in PREDICTED}
    for column in loop["ref"][0]:
        for model in PREDICTED:
            values = [r[column] for r in loop[model]]
            assert table.loc[model, f"{column} lo"] == pytest.approx(percentile(values, 2.5), abs=0.0051)
            assert table.loc[model, f"{column} hi"] == pytest.approx(percentile(values, 97.5), abs=0.0051)
        diffs = [x[column] - y[column] for x, y in zip(loop["better"], loop["ref"])]
        assert table.loc["better", f"{column} diff lo"] == pytest.approx(percentile(diffs, 2.5), abs=0.0051)
        assert table.loc["better", f"{column} diff hi"] == pytest.approx(percentile(diffs, 97.5), abs=0.0051)
        assert pd.isna(table.loc["ref", f"{column} diff"])
    md = (tmp_path / f"{board.CUMULATIVE}.md").read_text()
    assert "reference row ref (evaluate.compare_to)" in md and "95% percentile bootstrap interval" in md
    assert _kept_files(art) == ["d.0000000000000000.parquet", "d.1111111111111111.parquet"]


def test_a_reference_over_seeds_is_the_cumulative_tables_reference_and_a_rebuilt_one_is_told_apart(tmp_path):
    """The default run's shape: the reference row trained over seeds ("ref (seed s)"). leaderboard-all takes the
    row as its reference; rebuilt (new fingerprints), both versions keep reading as repeats of one row each."""
    scores, items = hand_built()
    art = str(tmp_path)

    def run(tag: str) -> pd.DataFrame:
        rows = [
            _evaluated(
                art, f"ref (seed {s})", scores[scores["model"] == "ref"], items["ref"], f"{tag}{s}" * 8, f"{tag}{s}"
            )
            for s in (0, 1)
        ]
        return _publish(
            art, *rows, _evaluated(art, "better", scores[scores["model"] == "better"], items["better"], "b" * 16, "b")
        )

    first = run("a")
    assert {"ref", "better"} <= set(first.index) and list(first.loc["ref", "seeds"]) == [0, 1]
    assert pd.isna(first.loc["ref", "STS12 senteval diff"]) and first["STS12 senteval diff"].notna().sum() == 1
    again = run("c")  # the reference rebuilt: both its versions stay, each a row over its two seeds
    assert {"ref @a0a0a0a0", "ref @c0c0c0c0"} <= set(again.index), sorted(again.index)
    assert again.filter(like="ref @", axis=0)["seeds"].map(len).tolist() == [2, 2]


def test_a_rescored_model_replaces_its_kept_items_and_a_namesake_keeps_its_own(tmp_path):
    scores, items = hand_built()
    art = str(tmp_path)
    ref_rows = scores[scores["model"] == "ref"]
    _publish(art, _evaluated(art, "ref", ref_rows, items["ref"], "0" * 16, "e0"))
    _publish(art, _evaluated(art, "better", scores[scores["model"] == "better"], items["better"], "1" * 16, "e1"))
    # better re-scored (the same fingerprint, on the same data) predicting what ref predicts: its row is ref's.
    table = _publish(art, _evaluated(art, "better", ref_rows, items["ref"], "1" * 16, "e2"))
    columns = [c for c in table.columns if c.endswith(" diff lo")]
    assert len(columns) == 6 and (table.loc["better", columns] == 0).all()
    assert (
        table.loc["better", [c.replace("diff lo", "hi") for c in columns]].to_numpy()
        == table.loc["ref", [c.replace("diff lo", "hi") for c in columns]].to_numpy()
    ).all()
    # Re-scored by an evaluation that kept no items: no interval, and no file left.
    table = _publish(art, _evaluated(art, "better", ref_rows, None, "1" * 16, "e3"))
    assert pd.isna(table.loc["better", "STS12 simcse lo"]) and pd.notna(table.loc["ref", "STS12 simcse lo"])
    assert _kept_files(art) == ["d.0000000000000000.parquet"]
    # Another model named ref: each ref row is named by its fingerprint and keeps its own items; this run's ref is
    # the reference.
    table = _publish(art, _evaluated(art, "ref", scores[scores["model"] == "better"], items["better"], "2" * 16, "e4"))
    old, new = "ref @00000000", "ref @22222222"
    assert table.loc[new, "STS12 simcse lo"] != table.loc[old, "STS12 simcse lo"]
    assert pd.isna(table.loc[new, "STS12 simcse diff"]) and pd.notna(table.loc[old, "STS12 simcse diff lo"])
    assert f"reference row {new} (evaluate.compare_to)" in (tmp_path / f"{board.CUMULATIVE}.md").read_text()


def test_rows_sharing_a_fingerprint_keep_their_own_items(tmp_path):
    """A post-processed model shares its encoder's fingerprint: both rows keep the intervals the run gave them."""
    scores, items = hand_built()
    art = str(tmp_path)
    ref_rows, better_rows = scores[scores["model"] == "ref"], scores[scores["model"] == "better"]
    _publish(
        art,
        _evaluated(art, "ref", ref_rows, items["ref"], "0" * 16, "e0"),
        _evaluated(art, "ref+whitening", better_rows, items["better"], "0" * 16, "e1"),
    )
    run = pd.read_parquet(tmp_path / "leaderboard.parquet").set_index("model")
    table = _publish(art, _evaluated(art, "other", better_rows, items["better"], "1" * 16, "e2"))
    assert _kept_files(art) == ["d.0000000000000000.parquet", "d.1111111111111111.parquet"]
    columns = [c for c in run.columns if c.endswith((" lo", " hi"))]
    assert len(columns) == 24 and run.loc["ref+whitening", columns].notna().all()
    rows = ["ref", "ref+whitening"]
    pd.testing.assert_frame_equal(table.loc[rows, columns], run.loc[rows, columns])


@pytest.mark.prefect  # cpipe evaluate runs its flow on a temporary Prefect server: about a minute
def test_cpipe_evaluate_compares_one_model_with_another(tmp_path, tiny_sts):
    """Two model directories scored by the command line, the second compared with the first by name."""
    from tests.conftest import cpipe
    from tests.helpers import tiny_model

    for name, pooling in (("A", "mean"), ("B", "cls")):
        shutil.move(tiny_model(tmp_path / f"export-{name}", pooling) / "sentence-transformers", tmp_path / name)
    artifacts = tmp_path / "artifacts"
    results = tmp_path / "mteb"
    result = cpipe(
        "evaluate",
        "--model",
        str(tmp_path / "A"),
        "--model",
        str(tmp_path / "B"),
        "--eval-data",
        str(tiny_sts),
        "--artifacts",
        str(artifacts),
        "--set",
        "evaluate.compare_to=A",
        "--results-dir",
        str(results),
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    table = pd.read_csv(artifacts / "leaderboard.csv").set_index("model")
    assert table.loc["A", "STSB cosine lo"] <= table.loc["A", "STSB cosine"] <= table.loc["A", "STSB cosine hi"]
    assert pd.isna(table.loc["A", "STSB cosine diff"])
    # B reads by [CLS], A by mean pooling: B is compared with A read by [CLS] too (a row of its own), and as the two
    # share their weights, B's difference is none, whatever the readouts' own scores.
    assert table.loc["A [cls]", "STSB cosine"] == pytest.approx(table.loc["B", "STSB cosine"], abs=0.011)
    assert table.loc["B", "STSB cosine diff"] == pytest.approx(
        table.loc["B", "STSB cosine"] - table.loc["A [cls]", "STSB cosine"], abs=0.011
    )
    assert table.loc["B", "STSB cosine diff lo"] <= table.loc["B", "STSB cosine diff hi"]
    assert "reference row A" in (artifacts / "leaderboard.md").read_text()
    # What it prints at the end, the cumulative table, has the same intervals and marks.
    printed = result.stdout[result.stdout.index("# Leaderboard: every run") :]
    assert "reference row A (evaluate.compare_to)" in printed
    header, _, *body = [line for line in printed.splitlines() if line.startswith("|")]
    names = [c.strip() for c in header.strip("|").split("|")]
    rows = {
        cells["model"]: cells
        for cells in (dict(zip(names, (c.strip() for c in line.strip("|").split("|")))) for line in body)
    }
    for model in ("A", "B"):
        lo, hi = table.loc[model, "STSB cosine lo"], table.loc[model, "STSB cosine hi"]
        assert rows[model]["STSB cosine"].startswith(f"{table.loc[model, 'STSB cosine']:.2f} [{lo:.2f}, {hi:.2f}]")
    everything = pd.read_csv(artifacts / "leaderboard-all.csv").set_index("model")
    columns = [c for c in table.columns if c.startswith("STSB cosine")]
    pd.testing.assert_frame_equal(everything.loc[["A", "B"], columns], table.loc[["A", "B"], columns])
    # MTEB's result file of each model's STS-B (too few pairs for MTEB's STSBenchmark: under our name)
    for model in ("A", "B"):
        [stsb] = (results / model).glob("*/STSB.json")
        main = json.loads(stsb.read_text())["scores"]["test"][0]["main_score"]
        assert main * 100 == pytest.approx(table.loc[model, "STSB cosine"], abs=0.01)
