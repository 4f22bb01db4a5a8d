"""The evaluate stage on a tiny model made here: every task present in the evaluation data is scored,
twice identically; every baseline kind builds and scores; Ray-parallel scoring gives the serial numbers."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd
import pytest

from pipeline.baselines.config import Baselines
from pipeline.config import Config
from pipeline.evaluate import stage as evaluate
from pipeline.evaluate.config import EvaluateConfig
from pipeline.readers.names import STS_TASKS
from pipeline.readers.transfer import TRANSFER_TASKS
from pipeline.stage import run_stage
from storage import read_table
from tests.conftest import SHARED, WORDS, write_sts


@pytest.fixture(scope="module")
def setup(evaluate_setup):
    return evaluate_setup


def concurrently(jobs: list[tuple[dict, dict]], artifacts: str) -> list[str]:
    """As the evaluate flow scores models when evaluate.workers > 1: all at once, from this process (Prefect's
    threads), each fanning its own units out on Ray."""
    with ThreadPoolExecutor(len(jobs)) as pool:
        return list(pool.map(lambda job: run_stage(evaluate.STAGE, *job, artifacts), jobs))


def scores(setup, name, spec, inputs, data=None, art=None, **settings):
    cfg = Config(evaluate=EvaluateConfig(data=data or setup["data"], batch_size=16, **settings))
    config = evaluate.config(cfg, evaluate.Row(name, spec, inputs, {"objective": "test"}))
    return read_table(run_stage(evaluate.STAGE, config, inputs, art or setup["art"])).to_pandas()


@pytest.mark.slow  # every shared task, SentEval's transfer tasks included: a minute of compute
def test_every_task_in_the_shared_data_is_scored_and_twice_the_same(setup, tmp_path):
    data = f"{SHARED}/eval" if SHARED else str(write_sts(tmp_path / "eval"))
    # Scored again, one task of each way of scoring: STS-B (cosine, SentEval's regressor, the analysis), SICK
    # (SICK-R's regressor, SICK-E's classifier on its splits), CR (k-fold).
    again = tmp_path / "again"
    if SHARED:
        for part in ("senteval/STSBenchmark", "sick2014", "senteval-classification/CR"):
            shutil.copytree(f"{data}/{part}", again / part)
    runs = [
        scores(
            setup,
            "tiny",
            {"kind": "untrained"},
            {"model": setup["model"]},
            data=d,
            kfold=3,
            art=str(tmp_path / f"run{i}"),
        )
        for i, d in enumerate((data, str(again) if SHARED else data))
    ]
    if SHARED:
        assert set(runs[1]["task"]) == {"STSB", "SICKR", "SICKE", "CR", "transfer"}, set(runs[1]["task"])
    # Not the transfer average (of the tasks there), nor the data's hash (of all of it).
    alike = [
        r[r["task"].isin(set(runs[1]["task"]) - {"transfer"})].drop(columns="data_hash").reset_index(drop=True)
        for r in runs
    ]
    pd.testing.assert_frame_equal(*alike)
    tasks = set(runs[0]["task"])
    if SHARED:  # STS12, STS-B and SICK-R; the eight transfer tasks; the analysis on STS-B
        assert {"STS12", "STSB", "SICKR", *TRANSFER_TASKS, "transfer"} <= tasks
        assert {"alignment", "uniformity", "sentence_anisotropy", "anisotropy"} <= set(runs[0]["metric"])
        similarity = runs[0][runs[0]["metric"].isin(["spearman", "pearson"])]  # alignment etc. are SimCSE's too
        protocols = set(zip(similarity["task"], similarity["protocol"]))
        assert {("STSB", "cosine"), ("STSB", "senteval"), ("SICKR", "cosine"), ("SICKR", "senteval")} <= protocols
        assert not {("STSB", "simcse"), ("SICKR", "simcse")} & protocols
    else:
        assert tasks & set(STS_TASKS)
    assert runs[0]["value"].notna().all() and (runs[0]["dimension"] == 32).all()


@pytest.mark.parametrize(
    "name,spec",
    [
        ("random", {"kind": "random", "dim": 24, "seed": 0}),
        ("vectors", {"kind": "vectors", "path": "VECTORS"}),
        ("st-cls", {"kind": "model", "path": "MODEL/sentence-transformers", "pooling": "cls"}),
    ],
)
def test_baselines_score_with_their_own_size_and_dimension(setup, tmp_path, name, spec):
    # GloVe's format, over the made-up words of the test's STS data (the shared file is read in test_vectors)
    rng = np.random.default_rng(0)
    vectors = tmp_path / "vectors.txt"
    vectors.write_text("".join(f"{w} " + " ".join(f"{x:.4f}" for x in rng.standard_normal(8)) + "\n" for w in WORDS))
    spec = {k: str(v).replace("VECTORS", str(vectors)).replace("MODEL", setup["model"]) for k, v in spec.items()}
    spec = {k: int(v) if v.isdigit() else v for k, v in spec.items()}
    table = scores(setup, name, spec, {})
    dims = {"random": 24, "vectors": 8, "st-cls": 32}
    assert (table["dimension"] == dims[name]).all() and table["value"].notna().all()
    assert (table["parameters"] == 0).all() if name == "random" else (table["parameters"] > 0).all()


def test_post_processing_is_fitted_on_the_corpus_and_changes_the_embedding(setup):
    plain = scores(setup, "tiny", {"kind": "untrained"}, {"model": setup["model"]})
    spec = {"kind": "untrained", "postprocess": {"kind": "whitening", "k": 8, "sentences": 200, "seed": 0}}
    whitened = scores(setup, "tiny+whitening", spec, {"model": setup["model"], "corpus": setup["documents"]})
    assert (whitened["dimension"] == 8).all()
    uniformity = [t.query("metric == 'sentence_anisotropy'")["value"].iloc[0] for t in (plain, whitened)]
    assert abs(uniformity[1]) < abs(uniformity[0])  # whitening removes the common direction


@pytest.mark.ray
def test_scoring_on_ray_gives_the_serial_numbers(setup, tmp_path, local_ray):
    rows = [
        evaluate.Row("tiny", {"kind": "untrained"}, {"model": setup["model"]}, {}),
        evaluate.Row("random", {"kind": "random", "dim": 16, "seed": 0}, {}, {}),
    ]

    def jobs(workers: int) -> list[tuple[dict, dict]]:
        cfg = Config(evaluate=EvaluateConfig(data=setup["data"], batch_size=16, baselines=Baselines(), workers=workers))
        return [(evaluate.config(cfg, r), r.inputs) for r in rows]

    serial = [read_table(run_stage(evaluate.STAGE, c, i, str(tmp_path / "serial"))) for c, i in jobs(1)]
    paths = concurrently(jobs(2), str(tmp_path / "ray"))
    for table, path in zip(serial, paths):
        assert read_table(path).equals(table)
