"""Dev-set model selection (train.eval_every): the run exports the checkpoint with the best dev Spearman, and a
test split or a missing dev set is a config error before any work."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from pipeline.config import Config, load_config
from pipeline.errors import ConfigError
from pipeline.init.config import ModelConfig
from pipeline.model.exported import Encoder
from pipeline.model.transformer import HF_DIR, build_model
from pipeline.stage import run_stage
from pipeline.tokenizer.loading import SPECIAL
from pipeline.train import devset, selection
from pipeline.train import stage as train
from pipeline.train.config import TrainConfig
from storage import DatasetWriter, read_manifest
from tests.conftest import WORDS, make_document
from tests.reference import spearman

STEPS, EVAL_EVERY = 8, 2


def cosines(model_dir: str, pairs: list[tuple[str, str]]) -> list[float]:
    encoder = Encoder(model_dir, max_length=64, device="cpu")
    out = []
    for a, b in pairs:
        u, v = (encoder.encode([s])[0].astype(np.float64) for s in (a, b))
        out.append(float(u @ v / (np.linalg.norm(u) * np.linalg.norm(v))))
    return out


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A tiny scratch model (the init stage's layout), pairs of its token ids, and an STS-B dev file whose gold
    scores are the initial model's own cosines: training moves away from them, so the dev scores differ."""
    from tokenizers import ByteLevelBPETokenizer
    from tokenizers.processors import RobertaProcessing
    from transformers import PreTrainedTokenizerFast

    root = tmp_path_factory.mktemp("select")
    rng = np.random.default_rng(0)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        [make_document(rng, 300) for _ in range(20)], vocab_size=300, special_tokens=list(SPECIAL.values())
    )
    bpe._tokenizer.post_processor = RobertaProcessing(
        ("</s>", bpe.token_to_id("</s>")), ("<s>", bpe.token_to_id("<s>"))
    )
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, model_max_length=64, **SPECIAL)
    model_config = {
        "base": None,
        "hidden_size": 32,
        "num_layers": 1,
        "num_heads": 2,
        "intermediate_size": 64,
        "dropout": 0.1,
        "max_position_embeddings": 66,
        "seed": 0,
    }
    with DatasetWriter(str(root / "art"), "init", "init0", config=model_config, inputs={}, schema=None) as out:
        build_model(ModelConfig(**model_config), tokenizer).save_pretrained(f"{out.local_dir}/{HF_DIR}")
        tokenizer.save_pretrained(f"{out.local_dir}/{HF_DIR}")
    init = out.path

    rows = []
    for _ in range(4 * STEPS):
        ids = tokenizer(make_document(rng, 60), add_special_tokens=False)["input_ids"]
        rows.append({"anchor_ids": ids[:24], "positive_ids": [ids[16:40]]})
    schema = pa.schema([("anchor_ids", pa.list_(pa.int32())), ("positive_ids", pa.list_(pa.list_(pa.int32())))])
    with DatasetWriter(str(root / "art"), "augment", "pairs0", config={}, inputs={}, schema=schema) as out:
        out.write(rows)

    pairs = []
    for _ in range(30):
        a = make_document(rng, 8).rstrip(".")
        words = a.split()
        # At least one word replaced by a different one: a pair of identical sentences would score exactly 1 here
        # and 1 +- float32 noise in the stage's batched scoring, and such ties would rank by that noise.
        keep = int(rng.integers(0, len(words)))
        pairs.append(
            (a, " ".join(words[:keep] + [rng.choice([w for w in WORDS if w != word]) for word in words[keep:]]))
        )
    gold = cosines(str(init), pairs)
    assert len(set(gold)) == len(gold), "tied gold scores would rank by float noise"
    stsb = root / "eval" / "STSBenchmark"
    stsb.mkdir(parents=True)
    (stsb / "sts-dev.csv").write_text(
        "".join(f"g\tx\t2012\t{i:04d}\t{g:.6f}\t{a}\t{b}\n" for i, ((a, b), g) in enumerate(zip(pairs, gold)))
    )
    return {
        "root": root,
        "inputs": {"pairs": out.path, "init": str(init)},
        "pairs": pairs,
        "gold": [float(f"{g:.6f}") for g in gold],
        "eval": str(root / "eval"),
    }


@pytest.mark.ray
def test_the_export_is_the_checkpoint_with_the_best_dev_score(setup, local_ray):
    cfg = TrainConfig(
        batch_size=4,
        max_steps=STEPS,
        lr=3e-3,
        max_length=34,
        checkpoint_every=100,
        log_every=1000,
        eval_every=EVAL_EVERY,
    )
    config = {"train": cfg.model_dump(), "dev": devset.stage_config(cfg, setup["eval"], 64)}
    path = run_stage(train.STAGE, config, setup["inputs"], str(setup["root"] / "art"))

    metrics = pd.read_parquet(f"{path}/{train.METRICS}")
    scored = metrics.dropna(subset=["dev_spearman"])
    assert list(scored["step"]) == list(range(EVAL_EVERY, STEPS + 1, EVAL_EVERY))
    assert metrics["dev_spearman"].isna().sum() == STEPS - len(scored)
    assert scored["dev_spearman"].nunique() == len(scored), "the dev scores should differ for the test to mean much"
    manifest = read_manifest(path)
    top = scored.loc[scored["dev_spearman"].idxmax()]
    assert manifest["best_step"] == top["step"] and manifest["best_dev_spearman"] == pytest.approx(top["dev_spearman"])
    assert manifest["best_step"] < STEPS, "the best checkpoint should not be the last for the test to mean much"

    # The exported model, scored here with a hand-written cosine and Spearman, scores the best checkpoint's score,
    # not the last one's.
    exported = spearman(cosines(path, setup["pairs"]), setup["gold"])
    assert exported == pytest.approx(manifest["best_dev_spearman"], abs=1e-6)
    assert exported != pytest.approx(scored["dev_spearman"].iloc[-1], abs=1e-6)


def test_a_test_split_is_no_dev_set(tmp_path):
    for path in (
        "/data/STSBenchmark/sts-test.csv",
        "/data/STS12-en-test/STS.input.MSRvid.txt",
        "/data/sick2014/SICK_test_annotated.txt",
        "/data/STS15-en-test/extra.csv",
    ):
        with pytest.raises(ValueError, match="test split"):
            TrainConfig(eval_every=10, dev_set=path)
    with pytest.raises(ConfigError, match=r"train\.dev_set: .*sts-test\.csv is a test split"):
        load_config(None, ["train.eval_every=10", "train.dev_set=/data/STSBenchmark/sts-test.csv"])
    with pytest.raises(ConfigError, match=r"runs\.r\.dev_set: .*sts-test\.csv is a test split"):
        load_config(None, ["runs={r: {eval_every: 10, dev_set: /data/STSBenchmark/sts-test.csv}}"])


def test_eval_every_without_a_dev_set_is_an_error_naming_what_was_looked_for(tmp_path, tiny_config, tiny_corpus):
    from flows.pipeline_flows import resolve

    eval_data = tmp_path / "eval"
    (eval_data / "STSBenchmark").mkdir(parents=True)
    (eval_data / "STSBenchmark" / "sts-test.csv").write_text("g\tx\t2012\t0\t1.0\ta\tb\n")
    args = dict(config=str(tiny_config), corpus=str(tiny_corpus), artifacts=str(tmp_path / "art"))
    with pytest.raises(ConfigError, match=rf"eval_every needs a dev set.*sts-dev\.csv.*{eval_data}"):
        resolve(eval_data=str(eval_data), overrides=["train.eval_every=5"], **args)
    with pytest.raises(ConfigError, match=r"eval_every needs a dev set.*evaluate\.data is not set"):
        resolve(until="train", overrides=["train.eval_every=5"], **args)
    with pytest.raises(ConfigError, match=r"train\.dev_set: .*missing-dev\.csv is not a file"):
        resolve(until="train", overrides=["train.eval_every=5", f"train.dev_set={tmp_path}/missing-dev.csv"], **args)
    (eval_data / "STSBenchmark" / "sts-dev.csv").write_text("g\tx\t2012\t0\t1.0\tc\td\n")
    resolve(eval_data=str(eval_data), overrides=["train.eval_every=5"], **args)  # found under evaluate.data


def test_the_dev_set_content_enters_the_train_fingerprint(tmp_path):
    dev = tmp_path / "STSBenchmark" / "sts-dev.csv"
    dev.parent.mkdir()
    dev.write_text("g\tx\t2012\t0\t1.0\ta\tb\ng\tx\t2012\t1\t2.0\tc\td\n")
    cfg = Config(train={"eval_every": 5}, evaluate={"data": str(tmp_path)})
    inputs = {"pairs": "/a/augment/p", "init": "/a/init/i"}
    before = train.STAGE.path(train.config(cfg, "declutr"), inputs, "/a")
    dev.write_text("g\tx\t2012\t0\t3.0\ta\tb\ng\tx\t2012\t1\t2.0\tc\td\n")
    assert train.STAGE.path(train.config(cfg, "declutr"), inputs, "/a") != before
    assert "dev" not in train.config(Config(evaluate={"data": str(tmp_path)}), "declutr")


def chosen(scores: list[tuple[int, float]], by: str) -> int:
    best = None
    for step, value in scores:
        if selection.improves(value, best[1] if best else None, by):
            best = (step, value)
    return best[0]


def test_the_best_is_the_highest_score_earliest_among_ties_never_nan():
    reports = [(2, 0.5), (4, float("nan")), (6, 0.7), (8, 0.7)]
    assert chosen(reports, "sts-dev") == 6
    assert chosen([(2, float("nan")), (4, -0.2)], "sts-dev") == 4
    assert chosen([(2, 0.5), (4, 0.3), (6, 0.3), (8, 0.4)], "heldout-loss") == 4  # lower is better
    assert chosen([(2, 0.1), (4, 0.3)], "mine") == 4  # a task's main metric: higher is better


def test_the_leaderboard_recipe_names_the_selected_step_and_what_selected_it():
    assert (
        devset.selected({"steps": 1000, "best_step": 300, "best_dev_spearman": 0.71234})
        == "selected at step 300 of 1000 by sts-dev Spearman 0.712"
    )
    assert (
        devset.selected({"steps": 1000, "best_step": 600, "selected_by": selection.label("heldout-loss", 1.2341)})
        == "selected at step 600 of 1000 by heldout-loss 1.234"
    )
    assert selection.label("mine", 0.41234, "retrieval") == "mine dev nDCG@10 0.412"
    assert devset.selected({"steps": 1000}) is None
