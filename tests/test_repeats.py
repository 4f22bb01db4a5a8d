"""Repeats (seeds / repeats in the config): one dataset per seed, seed 0's the datasets a config without repeats
builds, a new seed building only its own; and a row over several seeds on the leaderboard (mean, std, t-interval,
per-seed scores, the difference to the reference over items and seeds).

Expectations are computed apart from the code under test: statistics.mean / stdev and scipy's t quantile on
hand-built per-seed scores, and a plain-Python loop (tests.test_uncertainty's Spearman and percentile) over the
same resample indices for the pooled paired bootstrap.
"""

from __future__ import annotations

import json
import math
import random
import statistics
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from scipy import stats

from flows.pipeline_flows import build
from pipeline import registry
from pipeline.baselines.fasttext.bow import _shuffle_lines
from pipeline.config import load_config
from pipeline.errors import ConfigError
from pipeline.evaluate import stage as evaluate
from pipeline.leaderboard import stage as board
from pipeline.leaderboard.intervals import add_intervals
from pipeline.leaderboard.table import json_records, leaderboard, to_markdown, write_leaderboard
from pipeline.repeats import label
from storage import DatasetWriter, complete, dataset_parts
from tests.test_uncertainty import percentile, spearman

# --- the config's repeats -----------------------------------------------------------------------------------------


def config(tmp_path, text: str, *overrides: str):
    source = tmp_path / "corpus.txt"
    if not source.exists():  # the corpus stage's config holds the file's size and time
        source.write_text("a document\n")
    path = tmp_path / "repeats.yaml"
    path.write_text(f"corpus: {{sources: [{source}]}}\ntrain: {{batch_size: 4}}\n{text}")
    return load_config(path, list(overrides))


def test_repeats_n_are_seeds_0_to_n_and_a_runs_own_seeds_win(tmp_path):
    cfg = config(tmp_path, "repeats: 3\nruns:\n  a: {}\n  b: {seeds: [5, 7]}\n  c: {seed: 4}\n")
    assert cfg.run_seeds() == {"a": [0, 1, 2], "b": [5, 7], "c": [4]}
    rows = cfg.trainings()
    assert list(rows) == ["a (seed 0)", "a (seed 1)", "a (seed 2)", "b (seed 5)", "b (seed 7)", "c"]
    assert [t.config.seed for t in rows.values()] == [0, 1, 2, 5, 7, 4]
    assert (
        config(tmp_path, "seeds: [0, 1, 2]\nruns: {a: {}}\n").trainings().keys()
        == config(tmp_path, "repeats: 3\nruns: {a: {}}\n").trainings().keys()
    )


@pytest.mark.parametrize(
    "text, named",
    [
        ("seeds: [0, 1]\nrepeats: 2\n", ["config", "seeds or repeats"]),
        ("seeds: []\n", ["seeds"]),
        ("seeds: [1, 1]\n", ["seeds", "repeats a seed"]),
        ("runs: {a: {seeds: [-1]}}\n", ["runs.a.seeds"]),
        ("runs: {a: {repeats: 0}}\n", ["runs.a.repeats"]),
        ("runs: {a: {seed: 1, seeds: [0, 1]}}\n", ["runs.a", "seed or seeds"]),
        ("runs:\n  p: {seeds: [0, 1]}\n  c: {init_from: p, seeds: [0, 2]}\n", ["runs.c", "seed 2", "'p'"]),
    ],
    ids=["both", "empty", "twice", "negative", "zero-repeats", "seed-and-seeds", "parent-lacks-seed"],
)
def test_bad_repeats_are_a_one_line_config_error_naming_the_key(tmp_path, text, named):
    with pytest.raises(ConfigError) as e:
        config(tmp_path, text)
    message = str(e.value)
    assert "\n" not in message and all(part in message for part in named), message


def test_a_continuing_runs_repeat_starts_from_its_parents_repeat_of_the_same_seed(tmp_path):
    cfg = config(
        tmp_path,
        "runs:\n  p: {seeds: [0, 1]}\n  c: {init_from: p, seeds: [0, 1]}\n"
        "  one: {}\n  d: {init_from: one, seeds: [3, 4]}\n",
    )
    rows = cfg.trainings()
    assert rows["c (seed 1)"].parent == "p (seed 1)" and rows["c (seed 0)"].parent == "p (seed 0)"
    assert rows["d (seed 4)"].parent == "one"  # a parent of one model is every repeat's start


PAIRS = pa.schema([("anchor_ids", pa.list_(pa.int32())), ("positive_ids", pa.list_(pa.list_(pa.int32())))])


def plan(cfg, artifacts: str = "/art") -> dict[str, str]:
    """label -> dataset path of every instance the flows would build, inputs chained as the flows chain them."""
    done: dict[str, str] = {}
    build(
        cfg,
        registry.stages(last="baseline"),
        done,
        "baseline",
        run_one=lambda stage, config, inputs, label: stage.path(config, inputs, artifacts),
    )
    return done


RUNS = "runs:\n  a: {}\n  b: {objective: simcse}\n  c: {init_from: a}\n"


def test_adding_a_seed_adds_only_that_seeds_datasets(tmp_path):
    """Seeds [0, 1] then [0, 1, 2]: every dataset of the first is one of the second (reused), and what the second
    adds is seed 2's: its initial weights, its pairs, its models and its fastText vectors."""
    two, three = plan(config(tmp_path, RUNS, "seeds=[0, 1]")), plan(config(tmp_path, RUNS, "seeds=[0, 1, 2]"))
    assert set(two.values()) < set(three.values())
    added = {label for label, path in three.items() if path not in set(two.values())}
    assert added == {
        "init (seed 2)",
        "augment/declutr (seed 2)",
        "augment/simcse (seed 2)",
        "train/a (seed 2)",
        "train/b (seed 2)",
        "train/c (seed 2)",
        "baseline (seed 2)",
    }


def test_seed_0_is_the_config_without_repeats_and_the_data_stages_are_shared(tmp_path):
    """The datasets a config without repeats built stay valid: seed 0's are the same datasets; the corpus,
    tokenizer and filter stages are shared by every seed."""
    plain, seeded = plan(config(tmp_path, RUNS)), plan(config(tmp_path, RUNS, "repeats=3"))
    for stage_label in (
        "corpus",
        "tokenizer",
        "filter",
        "decontaminate",
        "init",
        "augment/declutr",
        "augment/simcse",
        "baseline",
    ):
        assert seeded[stage_label] == plain[stage_label], stage_label
    for run in "abc":
        assert seeded[f"train/{run} (seed 0)"] == plain[f"train/{run}"]
    assert len({seeded[f"train/a (seed {s})"] for s in range(3)}) == 3
    assert len({seeded[f"init (seed {s})"] if s else seeded["init"] for s in range(3)}) == 3


def test_a_repeat_seeds_its_initial_weights_pairs_and_training(tmp_path):
    cfg = config(tmp_path, RUNS + "model: {seed: 10}\naugment: {seed: 20}\n", "repeats=3")
    init, augment, train = (registry.stage(n) for n in ("init", "augment", "train"))
    assert init.config(cfg, 2)["seed"] == 12
    assert augment.config(cfg, cfg.trainings()["a (seed 2)"].config)["seed"] == 22
    assert train.config(cfg, "a (seed 2)")["train"]["seed"] == 2
    assert train.config(cfg, "c (seed 1)")["train"]["seed"] == 1


def test_the_default_reference_is_the_untrained_row_over_its_seeds():
    models = ["declutr (seed 0)", "declutr (seed 1)", "untrained (seed 0)", "untrained (seed 1)"]
    assert board.reference(board.LeaderboardSettings(compare_to_default="untrained"), models) == "untrained"


# --- rows over seeds on the leaderboard ---------------------------------------------------------------------------

GOLD = {
    "STS12": {"MSRpar": [0.0, 1.0, 1.5, 2.5, 3.0, 4.0, 4.5, 5.0], "OnWN": [0.5, 1.0, 2.0, 3.5, 4.5, 5.0]},
    "MR": {"fold 0": [0, 1, 1, 0, 1, 0, 1], "fold 1": [1, 0, 0, 1, 1, 0]},
}
PROTOCOL = {"STS12": "cosine", "MR": "senteval"}
COLUMNS = ("STS12 senteval", "STS12 simcse", "MR senteval", "avg transfer (SentEval)")


def _predicted(rng: random.Random, noise: float, flip: float) -> dict:
    return {
        "STS12": {s: [g + rng.gauss(0, noise) for g in golds] for s, golds in GOLD["STS12"].items()},
        "MR": {s: [1 - g if rng.random() < flip else g for g in golds] for s, golds in GOLD["MR"].items()},
    }


def models() -> dict[str, dict]:
    """Three seeds of a good run, two init seeds of a poor reference, and one model of one seed."""
    rng = random.Random(3)
    out = {f"run (seed {s})": _predicted(rng, 0.8, 0.2) for s in range(3)}
    out |= {f"untrained (seed {s})": _predicted(rng, 2.5, 0.45) for s in (0, 4)}
    out["single"] = _predicted(rng, 1.5, 0.3)
    return out


def statistics_of(predicted: dict, draws: dict | None = None) -> dict[str, float]:
    """A model's column values x 100 in plain Python, on the items or on one resample's indices."""

    def take(task, stratum):
        idx = draws[task][stratum] if draws else range(len(GOLD[task][stratum]))
        return [predicted[task][stratum][i] for i in idx], [GOLD[task][stratum][i] for i in idx]

    sts = {s: take("STS12", s) for s in GOLD["STS12"]}
    mr = {s: take("MR", s) for s in GOLD["MR"]}
    accuracy = sum(sum(p == g for p, g in zip(*mr[s])) / len(mr[s][0]) for s in mr) / len(mr)
    return {
        "STS12 senteval": 100 * sum(spearman(*sts[s]) for s in sts) / len(sts),
        "STS12 simcse": 100 * spearman(sum((sts[s][0] for s in sts), []), sum((sts[s][1] for s in sts), [])),
        "MR senteval": 100 * accuracy,
        "avg transfer (SentEval)": 100 * accuracy,
    }


def scored(predicted: dict[str, dict]) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """Score rows as the evaluate stage writes them (values from scipy), and the items it keeps."""
    rows, items = [], {}
    for model, tasks in predicted.items():
        items[model] = pd.DataFrame(
            [
                {"task": t, "protocol": PROTOCOL[t], "stratum": s, "prediction": p, "gold": g}
                for t, strata in tasks.items()
                for s, preds in strata.items()
                for p, g in zip(preds, GOLD[t][s])
            ]
        )
        sts = tasks["STS12"]
        common = {"model": model, "kind": "trained", "subset": "all", "split": "test", "n": 1}
        values = {
            ("spearman", "STS12", "senteval"): np.mean(
                [stats.spearmanr(sts[s], GOLD["STS12"][s]).statistic for s in sts]
            ),
            ("spearman", "STS12", "simcse"): stats.spearmanr(
                sum(sts.values(), []), sum(GOLD["STS12"].values(), [])
            ).statistic,
            ("accuracy", "MR", "senteval"): np.mean(
                [np.mean(np.equal(tasks["MR"][s], GOLD["MR"][s])) for s in GOLD["MR"]]
            ),
        }
        rows += [
            {**common, "metric": m, "task": t, "protocol": p, "value": float(v)} for (m, t, p), v in values.items()
        ]
    return pd.DataFrame(rows), items


def test_a_row_over_seeds_is_the_mean_with_its_std_and_t_interval():
    predicted = models()
    scores, _ = scored(predicted)
    table = leaderboard(scores).set_index("model")
    assert sorted(table.index) == ["run", "single", "untrained"]
    assert list(table.loc["run", "seeds"]) == [0, 1, 2] and list(table.loc["untrained", "seeds"]) == [0, 4]
    assert table.loc["single", "seeds"] is None
    for row, seeds in (
        ("run", [f"run (seed {s})" for s in range(3)]),
        ("untrained", ["untrained (seed 0)", "untrained (seed 4)"]),
    ):
        for column in COLUMNS:
            values = [statistics_of(predicted[m])[column] for m in seeds]
            mean, sd, n = statistics.mean(values), statistics.stdev(values), len(values)
            half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
            assert table.loc[row, column] == pytest.approx(mean, abs=0.0051)
            assert table.loc[row, f"{column} std"] == pytest.approx(sd, abs=0.0051)
            assert table.loc[row, f"{column} lo"] == pytest.approx(mean - half, abs=0.0051)
            assert table.loc[row, f"{column} hi"] == pytest.approx(mean + half, abs=0.0051)
            assert table.loc[row, f"{column} per seed"] == pytest.approx(values, abs=0.0051)
    assert pd.isna(table.loc["single", "STS12 senteval std"])


def test_a_difference_over_seeds_adds_the_seeds_variance_to_the_items():
    """The items' part: per resample (the same indices for every seed of both rows) the mean over the row's seeds
    less the mean over the reference's, its variance over resamples; the seeds' part: Welch's var/n of each row's
    per-seed scores (these rows have different seeds; a row of one model adds none). The interval is the difference
    of the means +- t(0.975, Welch-Satterthwaite df) x sqrt(the sum), p two-sided from the same t. The rows' own
    intervals stay the t-interval (seed rows) and the bootstrap's (the row of one model)."""
    predicted, b, rnd = models(), 200, random.Random(11)
    draws = [
        {task: {s: [rnd.randrange(len(g)) for _ in g] for s, g in strata.items()} for task, strata in GOLD.items()}
        for _ in range(b)
    ]

    def seam(task, sizes, n):
        yield [np.array([d[task][s] for d in draws[:n]]) for s in GOLD[task]]

    scores, items = scored(predicted)
    table, comparison = add_intervals(leaderboard(scores), items, compare_to="untrained", b=b, draw=seam)
    table = table.set_index("model")
    loop = [{m: statistics_of(p, d) for m, p in predicted.items()} for d in draws]
    point = {m: statistics_of(p) for m, p in predicted.items()}
    run = [m for m in predicted if m.startswith("run")]
    reference = [m for m in predicted if m.startswith("untrained")]
    plain = leaderboard(scores).set_index("model")
    for column in COLUMNS:

        def pooled(names, r):
            return sum(r[m][column] for m in names) / len(names)

        def seeds_part(names):
            values = [point[m][column] for m in names]
            return (statistics.variance(values) / len(values), len(values) - 1) if len(values) > 1 else (0.0, 1)

        for row, names in (("run", run), ("single", ["single"])):
            items_part = statistics.variance([pooled(names, r) - pooled(reference, r) for r in loop])
            parts = [seeds_part(names), seeds_part(reference)]
            total = items_part + sum(v for v, _ in parts)
            df = total**2 / sum(v * v / k for v, k in parts)
            d = pooled(names, point) - pooled(reference, point)
            half = stats.t.ppf(0.975, df) * math.sqrt(total)
            assert table.loc[row, f"{column} diff lo"] == pytest.approx(d - half, rel=1e-3, abs=0.02), (row, column)
            assert table.loc[row, f"{column} diff hi"] == pytest.approx(d + half, rel=1e-3, abs=0.02), (row, column)
            p = 2 * stats.t.sf(abs(d) / math.sqrt(total), df)
            assert table.loc[row, f"{column} p"] == pytest.approx(p, abs=2e-3), (row, column)
            assert table.loc[row, f"{column} diff"] == pytest.approx(
                table.loc[row, column] - table.loc["untrained", column], abs=0.011
            )
        values = [r["single"][column] for r in loop]
        assert table.loc["single", f"{column} lo"] == pytest.approx(percentile(values, 2.5), abs=0.0051)
        for row in ("run", "untrained"):  # the seeds' t-interval, not the items' bootstrap
            assert table.loc[row, f"{column} lo"] == plain.loc[row, f"{column} lo"]
            assert table.loc[row, f"{column} hi"] == plain.loc[row, f"{column} hi"]
        assert pd.isna(table.loc["untrained", f"{column} diff"])
    assert comparison.comparisons == 2 * len(COLUMNS)


def test_seed_rows_read_as_such_in_markdown_csv_and_parquet(tmp_path):
    scores, items = scored(models())
    table = leaderboard(scores, items=items, compare_to="untrained")
    paths = write_leaderboard(table, [], str(tmp_path), title="T", compare_to="untrained")
    back = pd.read_parquet(paths["parquet"]).set_index("model")
    assert list(back.loc["run", "seeds"]) == [0, 1, 2]
    assert list(back.loc["run", "MR senteval per seed"]) == list(
        table.set_index("model").loc["run", "MR senteval per seed"]
    )
    csv = pd.read_csv(paths["csv"]).set_index("model")
    assert csv.loc["run", "seeds"] == "[0, 1, 2]"
    records = json.loads(json.dumps(json_records(pd.read_parquet(paths["parquet"]))))  # the flow's table artifact
    assert next(r for r in records if r["model"] == "run")["seeds"] == [0, 1, 2]
    for source in (table, pd.read_parquet(paths["parquet"])):  # publish renders the table read back
        markdown = to_markdown(source, [], title="T", compare_to="untrained")
        line = next(x for x in markdown.splitlines() if x.startswith("| run |"))
        assert "0, 1, 2 (n=3)" in line and "±" in line
        assert "Rows over several seeds (run, untrained" in markdown
        assert "t-interval" in markdown


def test_each_repeat_is_scored_as_its_own_row_named_for_its_seed(tmp_path):
    """The evaluate stage's rows: "<row> (seed s)" for the runs, the untrained encoder (its init seeds), fastText
    and a post-processed row over seeds, each reading its own seed's dataset; the untrained random baseline once."""
    cfg = config(
        tmp_path,
        "runs: {a: {}}\nevaluate:\n  baselines: {postprocess: [{model: untrained, kind: whitening}]}\n",
        "repeats=2",
        f"artifacts={tmp_path / 'art'}",
    )
    done = plan(cfg, cfg.artifacts)
    for train_label in ("train/a (seed 0)", "train/a (seed 1)"):  # the rows read what training wrote of the model
        _, name, fp = dataset_parts(done[train_label])
        with DatasetWriter(cfg.artifacts, name, fp, config={}, inputs={}, schema=None):
            pass
    rows = evaluate.instances(cfg, done)
    assert sorted(rows) == sorted(
        f"evaluate/{r}"
        for r in (
            "a (seed 0)",
            "a (seed 1)",
            "untrained (seed 0)",
            "untrained (seed 1)",
            "fasttext-bow (seed 0)",
            "fasttext-bow (seed 1)",
            "random",
            "untrained+whitening (seed 0)",
            "untrained+whitening (seed 1)",
        )
    )
    assert rows["evaluate/untrained (seed 1)"].inputs["model"] == done["init (seed 1)"] != done["init"]
    assert rows["evaluate/untrained+whitening (seed 1)"].inputs["model"] == done["init (seed 1)"]
    assert rows["evaluate/fasttext-bow (seed 1)"].inputs["model"] == done["baseline (seed 1)"]
    assert rows["evaluate/a (seed 1)"].inputs["model"] == done["train/a (seed 1)"]


def test_fasttext_repeats_train_on_the_documents_in_a_seeded_order(tmp_path):
    """fastText takes no seed for unsupervised training: a repeat's seed orders its documents instead."""
    lines = [f"document {i} {'word ' * (i % 5)}\n" for i in range(50)]
    orders = []
    for seed in (1, 1, 2):
        path = tmp_path / "corpus.txt"
        path.write_text("".join(lines))
        _shuffle_lines(str(path), seed)
        orders.append(path.read_text().splitlines(keepends=True))
    assert sorted(orders[0]) == sorted(lines) and orders[0] != lines
    assert orders[0] == orders[1] != orders[2]
    assert not (tmp_path / "corpus.txt.shuffled").exists()


@pytest.mark.ray
def test_a_new_seed_trains_only_itself_and_seeds_train_differently(tmp_path, local_ray):
    """The train stage for real (Ray Train, 2 steps of a tiny model): seed 0 alone builds the run's model; then
    seeds [0, 1] reuse it as seed 0's and build seed 1's alone. Each repeat's initial weights and pairs are one
    hand-made dataset here, so the two models differ by the training's own seed (dropout, MLM masks)."""
    import flows.pipeline_flows as flow
    from pipeline.model.transformer import HF_DIR
    from pipeline.stage import run_stage
    from tests.conftest import make_document
    from tests.helpers import tiny_model, tiny_tokenizer

    art = str(tmp_path / "art")
    with DatasetWriter(art, "init", "init0", config={}, inputs={}, schema=None) as out:
        tiny_model(Path(out.local_dir))
    tokenizer, rng = tiny_tokenizer(), np.random.default_rng(0)
    with DatasetWriter(art, "augment", "pairs0", config={}, inputs={}, schema=PAIRS) as pairs:
        for _ in range(8):
            ids = tokenizer(make_document(rng, 60), add_special_tokens=False)["input_ids"]
            pairs.write([{"anchor_ids": ids[:24], "positive_ids": [ids[16:40]]}])
    done = {
        **{label("init", s): out.path for s in range(2)},
        **{label("augment/declutr", s): pairs.path for s in range(2)},
    }
    built: list[str] = []

    def direct(stage, config, inputs, name):
        if not complete(stage.path(config, inputs, art)):
            built.append(name)
        return run_stage(stage, config, inputs, art)

    settings = ["train.max_steps=2", "train.max_length=64", "train.checkpoint_every=2", f"artifacts={art}"]
    for seeds in ("[0]", "[0, 1]"):
        flow.build(
            config(tmp_path, "runs: {a: {}}\n", f"seeds={seeds}", *settings),
            [registry.stage("train")],
            done,
            run_one=direct,
        )
    assert built == ["train/a", "train/a (seed 1)"]
    assert done["train/a (seed 0)"] == done["train/a"]
    weights = [(Path(done[f"train/a (seed {s})"]) / HF_DIR / "model.safetensors").read_bytes() for s in range(2)]
    assert weights[0] != weights[1]
