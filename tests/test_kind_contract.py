"""A task kind is one module and one registry line, which alone names its main metric: a toy kind, declared in this
module and registered for the test, is found in an evaluation directory, scored by the evaluate stage's units, indexed by decontamination, written to
MTEB's result files, accepted as evaluate.rank_by, and gets its column, its average and their bootstrap intervals in
a leaderboard built from hand-made score rows. No Ray: the pieces are called directly."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline.decontaminate.evalsets import eval_texts
from pipeline.evaluate import items as test_items
from pipeline.evaluate import kind, kinds, mteb_results
from pipeline.evaluate import stage as evaluate
from pipeline.evaluate.config import EvaluateConfig
from pipeline.leaderboard import bootstrap
from pipeline.leaderboard.table import leaderboard
from pipeline.readers import registry

# The toy kind: `<task>.toy.csv` files of (sentence, target) rows; an item is a hit when the sentence's embedding is
# nearer the target's than any other target's, and the task's main metric is the share of hits.
NAME, MAIN = "toy", "hits"


def find(data_dir: Path) -> list[kind.Task]:
    out = []
    for task, path in kind.task_files(Path(data_dir), NAME, (".csv",)).items():
        with open(path, newline="") as f:
            rows = [(r["sentence"], r["target"]) for r in csv.DictReader(f)]
        out.append(kind.Task(NAME, task, (str(path),), rows))
    return out


def score(task: kind.Task, embed, seed: int) -> list[dict]:
    sentences, targets = zip(*task.data)
    u, v = np.asarray(embed(list(sentences))), np.asarray(embed(list(targets)))
    nearest = np.argmin(((u[:, None, :] - v[None, :, :]) ** 2).sum(axis=2), axis=1)
    hits = (nearest == np.arange(len(u))).astype(float)
    kind.keep_items(embed, task, hits)
    return kind.rows(NAME, task.name, {MAIN: hits.mean()}, len(hits))


def share_of_hits(hits: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The kind's own bootstrap statistic: on each resample (a column of the (n, b) draw counts), the hits drawn
    over the items drawn."""
    return hits @ counts / counts.sum(axis=0)


KIND = kind.Kind(
    NAME,
    find,
    score,
    texts=lambda rows: [s for row in rows for s in row],
    statistic=lambda sample, strata, pooled: share_of_hits(sample.prediction, pooled.w),
    mteb=kind.Mteb("Retrieval", {MAIN: "hit_rate"}),
)


class Letters:
    """An encoder of a sentence by its letter counts: a model evaluate's units can call."""

    parameters = 26

    def encode(self, sentences: list[str], batch_size: int) -> np.ndarray:
        return np.array([[s.lower().count(chr(97 + i)) for i in range(26)] for s in sentences], dtype=float)


@pytest.fixture
def toy(monkeypatch, tmp_path):
    monkeypatch.setitem(registry.MODULES, NAME, (__name__, MAIN))
    data = tmp_path / "eval"
    data.mkdir()
    pairs = [("apple pie", "apple tart"), ("zebra zone", "zoo zebra"), ("quick quiz", "quiet quip"), ("moon", "zebra")]
    pd.DataFrame(pairs, columns=["sentence", "target"]).to_csv(data / "greet.toy.csv", index=False)
    return data, pairs


def test_a_registered_kind_is_found_scored_and_indexed(toy):
    data, pairs = toy
    (task,) = kinds.find_all(data)
    assert (task.kind, task.name, task.data) == (NAME, "greet", pairs)
    settings = evaluate.EvaluateSettings(
        model="toy", spec={}, about={}, data_hash="-", batch_size=8, seed=1, kfold=2, analysis=False
    )
    (unit,) = evaluate.units(settings, [kinds.Found(kinds.kind(NAME), [task], [])], Letters())
    scored = evaluate.score_unit(unit)
    (row,) = scored.rows
    assert unit.name == "toy/greet"
    assert row == {
        "task": "greet",
        "subset": "all",
        "split": "test",
        "metric": MAIN,
        "protocol": NAME,
        "value": 0.75,
        "n": 4,
    }  # "moon" is nearer "zoo zebra" than "zebra"
    (items,) = scored.items
    assert (items.task, items.protocol, items.prediction.tolist()) == ("greet", NAME, [1.0, 1.0, 1.0, 0.0])
    assert eval_texts(str(data), False, [])["greet"] == [s for p in pairs for s in p]
    before = evaluate.data_fingerprint(str(data), {"transfer": False})
    with open(data / "greet.toy.csv", "a") as f:
        f.write("sun,sunny\n")
    assert evaluate.data_fingerprint(str(data), {"transfer": False}) != before  # the kind's files are the scores' data


def test_a_registered_kind_gets_its_columns_intervals_mteb_names_and_rank_by(toy):
    rows, items = [], {}
    for model, hits in {"a": [1, 1, 1, 0, 1, 0], "b": [0, 1, 0, 0, 0, 1]}.items():
        rows += [{**r, "model": model, "data_hash": "h"} for r in kind.rows(NAME, "greet", {MAIN: np.mean(hits)}, 6)]
        items[model] = test_items.to_table(
            [test_items.Items("greet", NAME, test_items.WHOLE, np.asarray(hits, float), np.zeros(6))]
        ).to_pandas()
    table = leaderboard(pd.DataFrame(rows), items=items, compare_to="a")
    assert table["model"].tolist() == ["a", "b"]
    assert table["greet hits"].tolist() == [pytest.approx(400 / 6, abs=0.01), pytest.approx(200 / 6, abs=0.01)]
    assert table["avg toy"].tolist() == table["greet hits"].tolist()
    for column in ("greet hits", "avg toy"):  # the kind's statistic recomputes them on the resampled items
        assert (table[f"{column} lo"] <= table[column]).all() and (table[column] <= table[f"{column} hi"]).all()
        assert table[f"{column} hi"].iloc[0] > table[f"{column} lo"].iloc[0]
        assert table[f"{column} diff"].iloc[1] == pytest.approx(table[column].iloc[1] - table[column].iloc[0])
    (draws,) = bootstrap.indices("greet", [6], bootstrap.B, bootstrap.SEED)  # the task's resamples, as drawn
    for r, hits in enumerate(([1, 1, 1, 0, 1, 0], [0, 1, 0, 0, 0, 1])):
        resampled = [100 * sum(hits[i] for i in draw) / 6 for draw in draws]
        lo, hi = np.percentile(resampled, [2.5, 97.5])
        assert (table["greet hits lo"].iloc[r], table["greet hits hi"].iloc[r]) == (round(lo, 2), round(hi, 2))
    (result,) = mteb_results.task_results([r for r in rows if r["model"] == "a"]).values()
    assert result["task_name"] == "greet"
    assert (
        result["scores"]["test"][0]["hit_rate"]
        == result["scores"]["test"][0]["main_score"]
        == pytest.approx(4 / 6, abs=1e-6)
    )
    assert EvaluateConfig(rank_by="greet hits").rank_by == "greet hits"
    assert EvaluateConfig(rank_by="avg toy").rank_by == "avg toy"


def test_a_kind_whose_statistic_is_not_a_function_is_refused():
    with pytest.raises(TypeError, match="task kind toy: statistic must be a function .* not 'roc_auc'"):
        kind.Kind(NAME, find, score, texts=None, statistic="roc_auc")


def test_a_declaration_of_another_kind_than_its_registry_line_names_is_refused(monkeypatch):
    monkeypatch.setitem(registry.MODULES, "other", (__name__, MAIN))
    with pytest.raises(ValueError, match=f"{__name__} declares the kind 'toy'; its registry line names 'other'"):
        kinds.kind("other")


def test_a_kinds_main_metric_is_its_registry_lines(toy, monkeypatch):
    """The declaration writes no metric: the registry line's is its columns' and its rank_by's."""
    monkeypatch.setitem(registry.MODULES, NAME, (__name__, "share"))
    declared = kinds.kind(NAME)
    assert (declared.main, declared.column("greet").metric) == ("share", "share")
    assert EvaluateConfig(rank_by="greet share").rank_by == "greet share"
    with pytest.raises(ValueError, match="'greet hits' is not a leaderboard column"):
        EvaluateConfig(rank_by="greet hits")
