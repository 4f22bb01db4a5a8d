"""The Universal Sentence Encoder row on a tiny SavedModel built here with USE 4's interface (callable on a 1-D
string tensor, [batch, 512] float32 out, `serving_default` with "inputs" and "outputs", `variables` listed):
its embeddings against numpy over the saved weights, the row the evaluate stage scores, and the one-line stop
before any work where the model or TensorFlow is missing.

TensorFlow is imported by the fixture, not at collection, so that other test runs never pay for it."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from pipeline.baselines import use
from pipeline.config import Config
from pipeline.errors import ConfigError, InputError
from pipeline.evaluate import stage as evaluate
from pipeline.stage import run_stage
from storage import read_table
from tests.conftest import write_sts

BUCKETS, DIM = 97, 512


@pytest.fixture(scope="module")
def tiny_use(tmp_path_factory):
    """A character-averaging stand-in for USE's DAN: each sentence is the mean of a table's rows, one row per
    Unicode code point mod 97 (an empty sentence: zeros). Returns the directory and the table."""
    import tensorflow as tf

    table = np.random.default_rng(0).standard_normal((BUCKETS, DIM)).astype(np.float32)
    root = tf.train.Checkpoint()
    root.table = tf.Variable(table)
    root.variables = [root.table]  # the Reusable SavedModel API's list, as TF-Hub's USE has it

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def embed(inputs):
        ids = tf.math.floormod(tf.strings.unicode_decode(inputs, "UTF-8"), BUCKETS)
        rows = tf.gather(root.table, ids)
        total = tf.reduce_sum(rows, axis=1)
        count = tf.cast(ids.row_lengths(), tf.float32)[:, None]
        return tf.math.divide_no_nan(total, count)

    root.__call__ = embed
    serving = tf.function(lambda inputs: {"outputs": embed(inputs)}, input_signature=[tf.TensorSpec([None], tf.string)])
    path = tmp_path_factory.mktemp("use") / "universal-sentence-encoder_4"
    tf.saved_model.save(root, str(path), signatures={"serving_default": serving})
    return str(path), table


def by_hand(sentences: list[str], table: np.ndarray) -> np.ndarray:
    return np.stack([table[[ord(c) % BUCKETS for c in s]].mean(axis=0) if s else np.zeros(DIM) for s in sentences])


def test_use_embeddings_are_the_models_batch_by_batch(tiny_use):
    path, table = tiny_use
    encoder = use.UseEncoder(path)
    sentences = ["A man is playing a guitar.", "", "naïve café", "x", "Two dogs run on the beach."]
    got = encoder.encode(sentences, batch_size=2)
    assert got.dtype == np.float32 and got.shape == (5, DIM)
    np.testing.assert_allclose(got, by_hand(sentences, table), rtol=1e-5, atol=1e-6)
    assert encoder.encode([]).shape == (0, DIM)
    assert encoder.parameters == BUCKETS * DIM


def test_the_evaluate_stage_scores_a_use_row(tmp_path, tiny_use):
    path, _ = tiny_use
    art = str(tmp_path / "artifacts")
    cfg = Config(
        artifacts=art,
        evaluate={
            "data": str(write_sts(tmp_path / "eval")),
            "untrained": False,
            "transfer": False,
            "analysis": False,
            "fasttext": {"enabled": False},
            "baselines": {"random": False, "use": {"path": path}},
        },
    )
    evaluate.check(cfg)  # a usable model: no error before the work
    rows = evaluate.instances(cfg, {})
    assert list(rows) == ["evaluate/use"]
    row = rows["evaluate/use"]
    table = read_table(run_stage(evaluate.STAGE, evaluate.config(cfg, row), row.inputs, art)).to_pandas()
    assert set(table["task"]) == {"STS12", "STSB"} and table["value"].notna().all()
    assert (table["kind"] == "use").all() and (table["dimension"] == DIM).all()
    assert (table["parameters"] == BUCKETS * DIM).all()
    assert (table["objective"] == "pretrained (Universal Sentence Encoder)").all()


def _config(tmp_path, path: str) -> Config:
    return Config(evaluate={"data": str(write_sts(tmp_path / "eval")), "baselines": {"use": {"path": path}}})


def test_without_tensorflow_the_run_stops_before_any_work_in_one_line(tmp_path, tiny_use, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # what the interpreter does with a package it cannot import
    with pytest.raises(ConfigError) as e:
        evaluate.check(_config(tmp_path, tiny_use[0]))
    assert str(e.value) == (
        "evaluate.baselines.use.path: TensorFlow is not installed, and the USE row needs it: pip install -e '.[use]'"
    )
    with pytest.raises(InputError, match="TensorFlow is not installed"):
        use.UseEncoder(tiny_use[0])


@pytest.mark.parametrize(
    "files, problem",
    [
        (
            {"tfhub_module.pb": "", "saved_model.pb": ""},
            "a TF1 Hub-format module (USE versions 1-3), which is not loaded",
        ),
        ({"variables.index": ""}, "not a TensorFlow SavedModel (no saved_model.pb)"),
    ],
)
def test_a_directory_that_is_no_loadable_use_stops_before_any_work_in_one_line(tmp_path, files, problem):
    model = tmp_path / "model"
    model.mkdir()
    for name, text in files.items():
        (model / name).write_text(text)
    with pytest.raises(ConfigError) as e:
        evaluate.check(_config(tmp_path, str(model)))
    assert str(e.value).startswith(f"evaluate.baselines.use.path: {model}: {problem}") and "\n" not in str(e.value)
    with pytest.raises(ConfigError, match=f"{tmp_path / 'none'}: not a local directory"):
        evaluate.check(_config(tmp_path, str(tmp_path / "none")))
