"""MTEB's result files (pipeline.evaluate.mteb_results) from hand-built evaluate rows: the keys and values mteb 2.x's
TaskResult.to_disk writes, in ResultCache's layout."""

from __future__ import annotations

import importlib.metadata
import json
import logging

import pyarrow as pa

from pipeline.evaluate import mteb_results
from pipeline.evaluate.stage import SCHEMA
from storage import DatasetWriter, dataset_path, read_manifest

MODEL = {
    "model": "org/enc (seed 1)",
    "kind": "model",
    "objective": "simcse",
    "recipe": None,
    "corpus": None,
    "model_fingerprint": "f" * 16,
    "parameters": 1234,
    "dimension": 8,
    "data_hash": "abcd" * 4,
}


def row(task, metric, protocol, value, n, split="test", subset="all"):
    return {
        **MODEL,
        "task": task,
        "subset": subset,
        "split": split,
        "metric": metric,
        "protocol": protocol,
        "value": value,
        "n": n,
    }


ROWS = [
    # STS12: per-subset rows and SentEval's mean are not MTEB's; SimCSE's concatenation is
    row("STS12", "spearman", "subset", 0.1, 750, subset="MSRpar"),
    row("STS12", "spearman", "senteval", 0.2, 3108),
    row("STS12", "spearman", "simcse", 0.61234567, 3108),
    row("STS12", "pearson", "simcse", 0.55, 3108),
    # STS-B: cosine on test and dev (MTEB's size: its name); the regressor and the analysis rows are not MTEB's
    row("STSB", "spearman", "cosine", 0.7, 1379),
    row("STSB", "pearson", "cosine", 0.71, 1379),
    row("STSB", "spearman", "cosine", 0.8, 1500, split="dev"),
    row("STSB", "pearson", "cosine", 0.81, 1500, split="dev"),
    row("STSB", "spearman", "senteval", 0.9, 1379),
    row("STSB", "uniformity", "simcse", -2.0, 1379),
    # SICK-R: SentEval's 4,927 test pairs, not MTEB's 9,927
    row("SICKR", "spearman", "cosine", 0.65, 4927),
    row("SICKR", "pearson", "cosine", 0.66, 4927),
    # a user's STS pair file, and the four kinds
    row("mine", "spearman", "cosine", 0.5, 10),
    row("mine", "pearson", "cosine", 0.4, 10),
    row("docs", "nDCG@10", "retrieval", 0.3, 5),
    row("docs", "MRR@10", "retrieval", 0.35, 5),
    row("docs", "Recall@100", "retrieval", 0.9, 5),
    row("docs", "MAP@100", "retrieval", 0.25, 5),
    row("dups", "AP", "pairclass", 0.75, 20),
    row("dups", "accuracy", "pairclass", 0.7, 20),
    row("dups", "F1", "pairclass", 0.72, 20),
    row("topics", "v_measure", "clustering", 0.4, 30),
    row("rr", "map", "reranking", 0.6, 4),
    row("rr", "mrr_at_10", "reranking", 0.62, 4),
    # transfer tasks are not MTEB's
    row("MR", "accuracy", "senteval", 0.77, 10662),
    row("transfer", "accuracy", "declutr", 0.8, 8),
]


def _scores(values: dict, main: str, languages: list[str]) -> list[dict]:
    return [{**values, "main_score": values[main], "hf_subset": "default", "languages": languages}]


EXPECTED_SCORES = {
    "STS12": {"test": _scores({"cosine_spearman": 0.612346, "cosine_pearson": 0.55}, "cosine_spearman", ["eng-Latn"])},
    # its dev rows are not written: mteb's TaskResult.get_score() would average them with the test split's
    "STSBenchmark": {
        "test": _scores({"cosine_spearman": 0.7, "cosine_pearson": 0.71}, "cosine_spearman", ["eng-Latn"])
    },
    "SICKR": {"test": _scores({"cosine_spearman": 0.65, "cosine_pearson": 0.66}, "cosine_spearman", ["eng-Latn"])},
    "mine": {"test": _scores({"cosine_spearman": 0.5, "cosine_pearson": 0.4}, "cosine_spearman", [])},
    "docs": {
        "test": _scores(
            {"ndcg_at_10": 0.3, "mrr_at_10": 0.35, "recall_at_100": 0.9, "map_at_100": 0.25}, "ndcg_at_10", []
        )
    },
    "dups": {"test": _scores({"cosine_ap": 0.75, "cosine_accuracy": 0.7, "cosine_f1": 0.72}, "cosine_ap", [])},
    "topics": {"test": _scores({"v_measure": 0.4}, "v_measure", [])},
    "rr": {"test": _scores({"map_at_1000": 0.6, "mrr_at_10": 0.62}, "map_at_1000", [])},
}


# MTEB's tasks among them, at MTEB's test sizes, carry the revision of the Hub dataset MTEB scores (its task
# metadata); the others (SentEval's SICK-R, a user's file, the other kinds) the evaluation data's hash.
REVISIONS = {
    "STS12": "a0d554a64d88156834ff5ae9920b964011b16384",
    "STSBenchmark": "b0fddb56ed78048fa8b90373c8a3cfc37b684831",
}
try:  # the installed mteb's version, else the one whose reader the files were checked with (docs/evaluation.md)
    MTEB_VERSION = importlib.metadata.version("mteb")
except importlib.metadata.PackageNotFoundError:
    MTEB_VERSION = "2.26.24"


def _evaluated(art: str, rows: list[dict], units: list[dict]) -> str:
    with DatasetWriter(art, "evaluate", "e0", config={"model": MODEL["model"], "max_length": 64}, inputs={}) as out:
        out.write(pa.Table.from_pylist(rows, schema=SCHEMA))
        out.extra["units"] = units
    return dataset_path(art, "evaluate", "e0")


def test_result_files_have_mtebs_keys_names_and_values(tmp_path):
    units = [
        {"unit": "sts/STS12", "seconds": 1.5},
        {"unit": "retrieval/docs", "seconds": 2.0},
        {"unit": "transfer/MR", "seconds": 9.0},
        {"unit": "analysis", "seconds": 0.5},
    ]
    evaluated = _evaluated(str(tmp_path / "art"), ROWS, units)
    results = tmp_path / "results"
    written = mteb_results.write(str(results), evaluated)
    where = results / "org__enc_(seed_1)" / ("f" * 16)
    assert sorted(written) == sorted(str(where / f"{t}.json") for t in EXPECTED_SCORES)
    assert sorted(p.name for p in where.iterdir()) == sorted(
        [f"{t}.json" for t in EXPECTED_SCORES] + ["model_meta.json"]
    )
    created = read_manifest(evaluated)["created"]
    for task, scores in EXPECTED_SCORES.items():
        with open(where / f"{task}.json") as f:
            got = json.load(f)
        assert list(got) == [
            "dataset_revision",
            "task_name",
            "mteb_version",
            "scores",
            "evaluation_time",
            "kg_co2_emissions",
            "date",
            "evaluation_phases",
        ]
        assert got["task_name"] == task and got["dataset_revision"] == REVISIONS.get(task, "abcd" * 4)
        assert got["mteb_version"] == MTEB_VERSION
        assert got["kg_co2_emissions"] is None and got["evaluation_phases"] is None
        assert got["scores"] == scores
        assert got["date"] == created
    seconds = {t: json.load(open(where / f"{t}.json"))["evaluation_time"] for t in EXPECTED_SCORES}
    assert seconds == {**{t: None for t in EXPECTED_SCORES}, "STS12": 1.5, "docs": 2.0}
    meta = json.load(open(where / "model_meta.json"))
    assert (meta["name"], meta["revision"], meta["n_parameters"], meta["embed_dim"], meta["max_tokens"]) == (
        "org/enc (seed 1)",
        "f" * 16,
        1234,
        8,
        64,
    )
    assert not [p for p in where.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_a_senteval_task_of_mtebs_size_gets_mtebs_name_and_another_keeps_ours():
    full_sick = [row("SICKR", "spearman", "cosine", 0.6, 9927), row("SICKR", "pearson", "cosine", 0.6, 9927)]
    fewer = [row("STS12", "spearman", "simcse", 0.6, 3000), row("STS12", "pearson", "simcse", 0.6, 3000)]
    assert list(mteb_results.task_results(full_sick)) == ["SICK-R"]
    assert list(mteb_results.task_results(fewer)) == ["STS12"]  # the same name either way: MTEB's is ours
    assert list(mteb_results.task_results([{**r, "task": "STSB", "n": 1000} for r in full_sick])) == ["STSB"]
    # MTEB's revision only where the task is MTEB's: a shorter STS12 is other data, named alike
    assert (
        mteb_results.task_results(full_sick)["SICK-R"]["dataset_revision"] == "20a6d6f312dd54037fe07a32d58e5e168867909d"
    )
    assert mteb_results.task_results(fewer)["STS12"]["dataset_revision"] == "abcd" * 4
    # the default profile's copies of MTEB's files are pair files named for their Hub datasets: MTEB's tasks too
    copies = [{**r, "task": "sts12-sts", "protocol": "cosine", "n": 3108} for r in fewer]
    assert mteb_results.task_results(copies)["STS12"]["dataset_revision"] == "a0d554a64d88156834ff5ae9920b964011b16384"
    mteb_sick = [{**r, "task": "sickr-mteb"} for r in full_sick]
    assert list(mteb_results.task_results(mteb_sick)) == ["SICK-R"]


def test_a_model_without_mteb_tasks_writes_nothing(tmp_path):
    evaluated = _evaluated(str(tmp_path / "art"), [row("MR", "accuracy", "senteval", 0.7, 10)], [])
    assert mteb_results.write(str(tmp_path / "results"), evaluated) == []
    assert not (tmp_path / "results").exists()


def test_an_unwritable_results_dir_is_a_one_line_error_before_any_work(tmp_path, capsys):
    from flows.cli import main

    (tmp_path / "file").write_text("")
    code = main(
        [
            "evaluate",
            "--model",
            str(tmp_path),
            "--artifacts",
            str(tmp_path / "art"),
            "--results-dir",
            f"{tmp_path}/file/r: 1",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"cpipe: error: evaluate.results_dir {tmp_path}/file/r: 1: cannot write there"), err
    assert not (tmp_path / "art").exists()


def test_a_nan_score_is_written_to_mtebs_files_as_null_with_a_warning(tmp_path, caplog):
    rows = [row("flat", "spearman", "cosine", float("nan"), 4), row("flat", "pearson", "cosine", 0.5, 4)]
    with caplog.at_level(logging.WARNING, logger="cpipe"):
        [written] = mteb_results.write(str(tmp_path / "results"), _evaluated(str(tmp_path / "art"), rows, []))
    text = open(written).read()

    def refuse(constant):
        raise ValueError(constant)

    scores = json.loads(text, parse_constant=refuse)["scores"]["test"][0]  # strict JSON: no NaN
    assert scores["cosine_spearman"] is None and scores["main_score"] is None and scores["cosine_pearson"] == 0.5
    [line] = [r.getMessage() for r in caplog.records]
    assert line == "MTEB results of org/enc (seed 1): flat test spearman is nan, written as null"


def mteb_get_score(result: dict) -> float:
    """mteb 2.x's TaskResult.get_score() with its defaults: the mean main score over every split in the file and
    every subset whose languages it lists (all of them, unfiltered)."""
    return sum(s["main_score"] for split in result["scores"].values() for s in split) / sum(
        len(split) for split in result["scores"].values()
    )


def test_mtebs_score_of_a_task_with_a_dev_split_is_its_test_score():
    rows = [
        row("STSB", "spearman", "cosine", 0.5321, 1379),
        row("STSB", "pearson", "cosine", 0.52, 1379),
        row("STSB", "spearman", "cosine", 0.6139, 1500, split="dev"),
        row("STSB", "pearson", "cosine", 0.6, 1500, split="dev"),
    ]
    [result] = mteb_results.task_results(rows).values()
    assert list(result["scores"]) == ["test"]
    assert mteb_get_score(result) == 0.5321
    # a task scored on dev alone (no test split) keeps it, as MTEB's dev-only tasks do
    [dev_only] = mteb_results.task_results([r for r in rows if r["split"] == "dev"]).values()
    assert list(dev_only["scores"]) == ["dev"] and mteb_get_score(dev_only) == 0.6139
