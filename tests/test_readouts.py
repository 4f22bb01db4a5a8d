"""Readout-matched differences (issue 38, item 1): a row read by [CLS] is compared with the reference read by [CLS]
(an extra evaluate row, "<reference> [cls]"), never with the reference's mean-pooled scores; a reference whose
readout is fixed gives no difference to rows read otherwise. The expected numbers are computed here from the
models' weights with transformers and scipy, not by the pipeline's scoring."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.stats import spearmanr
from transformers import AutoModel, AutoTokenizer

from pipeline.config import Config
from pipeline.evaluate import encoders
from pipeline.evaluate import stage as evaluate
from pipeline.evaluate.config import EvaluateConfig
from pipeline.leaderboard import stage as board
from pipeline.leaderboard.readouts import READOUT
from pipeline.leaderboard.table import leaderboard
from pipeline.locate import HF_DIR
from pipeline.model.transformer import build_model, export
from pipeline.stage import run_stage
from storage import read_table
from tests.helpers import MAX_LENGTH, sentence, tiny_model_config, tiny_tokenizer

# A random encoder's [CLS] cosines are near-ties, which the batches' float rounding can reorder: scores agree
# with those computed here to within NOISE, far below the readout's effect the tests tell apart (> 5 points).
NOISE = 0.5
WORDS = "river stone cloud table green quiet market light winter garden music paper window glass train road".split()
COLUMN = "pairs cosine"  # the STS pair file pairs.tsv's column


def _model(out: Path, seed: int, pooling: str) -> str:
    """A tiny RoBERTa in the init stage's export layout, its weights drawn from `seed`, declaring `pooling`."""
    tokenizer = tiny_tokenizer()
    model = build_model(
        tiny_model_config(seed=seed),
        tokenizer,
    )
    export(model, tokenizer, str(out), pooling=pooling)
    return str(out)


def _sts(path: Path, n: int = 40) -> tuple[list[str], list[str], np.ndarray]:
    rng = random.Random(3)
    pairs = [(sentence(rng, WORDS, 8), sentence(rng, WORDS, 8), round(rng.uniform(0, 5), 2)) for _ in range(n)]
    path.write_text("sentence1\tsentence2\tscore\n" + "".join(f"{a}\t{b}\t{s}\n" for a, b, s in pairs))
    return [a for a, _, _ in pairs], [b for _, b, _ in pairs], np.array([s for _, _, s in pairs])


@torch.inference_mode()
def _embed(model_dir: str, sentences: list[str], pooling: str) -> np.ndarray:
    tokenizer = AutoTokenizer.from_pretrained(f"{model_dir}/{HF_DIR}")
    model = AutoModel.from_pretrained(f"{model_dir}/{HF_DIR}").eval()
    enc = tokenizer(sentences, padding=True, truncation=True, max_length=MAX_LENGTH, return_tensors="pt")
    hidden = model(**enc).last_hidden_state
    if pooling == "cls":
        return hidden[:, 0].numpy()
    mask = enc["attention_mask"].unsqueeze(-1).float()
    return ((hidden * mask).sum(1) / mask.sum(1)).numpy()


def _spearman(model_dir: str, sts, pooling: str) -> float:
    a, b = _embed(model_dir, sts[0], pooling), _embed(model_dir, sts[1], pooling)
    # Pair by pair in float32, as SentEval: a random encoder's cosines are near-ties, which float64 ranks otherwise.
    cosine = [np.dot(x, y) / (np.linalg.norm(x) * np.linalg.norm(y)) for x, y in zip(a, b)]
    return round(100 * spearmanr(cosine, sts[2]).correlation, 2)


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """Model "ref" (mean pooling) is the reference; "mine" (other weights) declares [CLS] pooling."""
    root = tmp_path_factory.mktemp("readouts")
    sts = _sts(root / "pairs.tsv")
    models = {"ref": _model(root / "ref", 0, "mean"), "mine": _model(root / "mine", 1, "cls")}
    cfg = Config(
        evaluate=EvaluateConfig(
            data=str(root / "pairs.tsv"), batch_size=16, transfer=False, analysis=False, compare_to="ref"
        )
    )
    rows = evaluate.instances(cfg, {f"model/{k}": v for k, v in models.items()})
    art = str(root / "art")
    paths = {row.name: run_stage(evaluate.STAGE, evaluate.config(cfg, row), row.inputs, art) for row in rows.values()}
    built = run_stage(board.STAGE, board.config(cfg), {f"scores-{k}": v for k, v in paths.items()}, art)
    return {"sts": sts, "models": models, "rows": rows, "paths": paths, "built": built}


def test_the_reference_is_scored_again_under_the_compared_rows_pooling(scored):
    assert sorted(scored["rows"]) == ["evaluate/mine", "evaluate/ref", "evaluate/ref [cls]"]
    again = scored["rows"]["evaluate/ref [cls]"]
    assert again.spec["pooling"] == "cls" and again.spec["path"] == scored["models"]["ref"]
    # Its own evaluate dataset: the reference's is the one it would be without the [cls] row.
    assert scored["paths"]["ref"] != scored["paths"]["ref [cls]"]
    ref = read_table(scored["paths"]["ref [cls]"]).to_pandas()
    value = ref[(ref["task"] == "pairs") & (ref["metric"] == "spearman")]["value"].iat[0]
    assert 100 * value == pytest.approx(_spearman(scored["models"]["ref"], scored["sts"], "cls"), abs=NOISE)


def test_a_cls_row_is_compared_with_the_reference_read_by_cls(scored):
    table = pd.read_parquet(f"{scored['built']}/leaderboard.parquet").set_index("model")
    sts, models = scored["sts"], scored["models"]
    mine, ref_cls, ref_mean = (
        _spearman(models["mine"], sts, "cls"),
        _spearman(models["ref"], sts, "cls"),
        _spearman(models["ref"], sts, "mean"),
    )
    assert table[READOUT].to_dict() == {"mine": "cls", "ref": "mean", "ref [cls]": "cls"}
    assert table.loc["mine", COLUMN] == pytest.approx(mine, abs=NOISE)
    assert table.loc["mine", f"{COLUMN} diff"] == pytest.approx(mine - ref_cls, abs=2 * NOISE)
    # The test tells the two apart: against the mean-pooled reference the difference would be another.
    assert abs((mine - ref_mean) - (mine - ref_cls)) > 10 * NOISE
    assert table.loc[["ref", "ref [cls]"], f"{COLUMN} diff"].isna().all()  # the references themselves
    md = Path(f"{scored['built']}/leaderboard.md").read_text()
    assert "readout: how a row's sentence embedding is read" in md
    assert "mine against ref [cls] (read by cls)" in md and "| readout |" in md


def test_a_reference_of_fixed_readout_gives_no_difference_under_another(scored):
    scores = pd.concat([read_table(p).to_pandas() for p in scored["paths"].values()], ignore_index=True)
    # "mine" as the reference, read through a kept head: the mean-pooled row cannot be compared with it.
    scores[READOUT] = scores["model"].map({"mine": "cls + head", "ref": "mean", "ref [cls]": "cls"})
    items = board.load_items(list(scored["paths"].values()))
    table = leaderboard(scores, items=items, compare_to="mine").set_index("model")
    assert pd.isna(table.loc["ref", f"{COLUMN} diff"])
    assert table.loc["ref [cls]", f"{COLUMN} diff"] == pytest.approx(
        table.loc["ref [cls]", COLUMN] - table.loc["mine", COLUMN], abs=0.011
    )
    from pipeline.leaderboard.table import to_markdown

    md = to_markdown(table.reset_index(), [], "t", compare_to="mine")
    assert "No differences for ref: their pooling is not the reference mine's (cls + head)" in md


def test_the_untrained_encoder_reads_by_the_spec_pooling(tmp_path):
    model = _model(tmp_path / "m", 0, "mean")
    sentences = ["river stone cloud", "green quiet market light"]
    cls = encoders.load({"kind": "untrained", "pooling": "cls"}, {"model": model}, MAX_LENGTH).encode(sentences)
    mean = encoders.load({"kind": "untrained"}, {"model": model}, MAX_LENGTH).encode(sentences)
    np.testing.assert_allclose(cls, _embed(model, sentences, "cls"), atol=1e-5)
    np.testing.assert_allclose(mean, _embed(model, sentences, "mean"), atol=1e-5)
