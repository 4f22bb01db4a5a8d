"""Supervised SimCSE: its NLI triplets (a hand-built JSONL, SICK's real train file counted here on its own),
the train step's loss against a loop over cl_forward with hard negatives, and the export that keeps the head
(sentence-transformers' embeddings equal ours). The loss itself: tests/test_losses.py; 2 workers = 1:
tests/test_distributed.py."""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch

from pipeline.augment import stage as augment
from pipeline.augment.config import AugmentConfig
from pipeline.config import Config
from pipeline.errors import InputError
from pipeline.evaluate.config import EvaluateConfig
from pipeline.model.exported import Encoder
from pipeline.model.transformer import ST_DIR, export
from pipeline.stage import run_stage
from pipeline.tokenizer.loading import load_tokenizer
from pipeline.train.batching import collate, special_ids
from pipeline.train.config import TrainConfig
from pipeline.train.optim import make_optimizer
from pipeline.train.step import train_step
from storage import read_manifest, read_table
from tests.helpers import tiny_tokenizer
from tests.test_losses import cl_forward_hard_loop
from tests.test_train_step import pairs, tiny_encoder

SHARED = os.environ.get("CPIPE_SHARED_DATA")

NLI = [  # (premise, hypothesis, gold label)
    ("A man plays a guitar on stage.", "A man is playing music.", "entailment"),
    ("A man plays a guitar on stage.", "Nobody is on the stage.", "contradiction"),
    ("A man plays a guitar on stage.", "The man is famous.", "neutral"),
    ("A man plays a guitar on stage.", "Someone performs.", "entailment"),
    ("Two dogs run in a field.", "Animals are outside.", "entailment"),  # no contradiction: left out
    ("Two dogs run in a field.", "The dogs are fast.", "neutral"),
    ("A child reads a book.", "The child is asleep.", "contradiction"),  # no entailment: left out
    ("A child reads a book.", "A kid is reading.", "-"),  # no gold label: dropped
    ("A woman cooks dinner.", "A person makes food.", "entailment"),
    ("A woman cooks dinner.", "The woman is swimming.", "contradiction"),
    ("A woman cooks dinner.", "Nobody cooks.", "contradiction"),
    ("A woman cooks dinner.", "A woman prepares a meal.", "entailment"),
]


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("tokenizer")
    tiny_tokenizer().save_pretrained(path)
    return str(path)


def triplet_rows(art: Path, tok: str, evaluate_data: str | None = None, **simcse_sup) -> tuple[list[dict], dict]:
    cfg = Config(augment=AugmentConfig(simcse_sup=simcse_sup), evaluate=EvaluateConfig(data=evaluate_data))
    path = run_stage(
        augment.STAGE, augment.config(cfg, TrainConfig(objective="simcse-sup")), {"tokenizer": tok}, str(art)
    )
    return read_table(path).to_pylist(), read_manifest(path)


def test_triplets_from_an_nli_jsonl(tmp_path, tok_dir):
    nli = tmp_path / "snli_1.0_train.jsonl"
    nli.write_text("".join(json.dumps({"sentence1": p, "sentence2": h, "gold_label": g}) + "\n" for p, h, g in NLI))
    rows, manifest = triplet_rows(tmp_path / "art", tok_dir, nli=[str(nli)], epochs=2)
    # Each entailment once a epoch, the premise's contradictions taken in turn.
    expected = {
        ("A man plays a guitar on stage.", "A man is playing music.", "Nobody is on the stage."),
        ("A man plays a guitar on stage.", "Someone performs.", "Nobody is on the stage."),
        ("A woman cooks dinner.", "A person makes food.", "The woman is swimming."),
        ("A woman cooks dinner.", "A woman prepares a meal.", "Nobody cooks."),
    }
    assert len(rows) == 2 * len(expected)
    tok = load_tokenizer(tok_dir)
    for epoch in (0, 1):
        got = [(r["anchor_text"], *r["positive_text"], r["negative_text"]) for r in rows if r["epoch"] == epoch]
        assert sorted(got) == sorted(expected)
    for r in rows:
        assert r["objective"] == "simcse-sup"
        assert r["anchor_ids"] == tok(r["anchor_text"], add_special_tokens=False)["input_ids"]
        assert r["positive_ids"] == [tok(r["positive_text"][0], add_special_tokens=False)["input_ids"]]
        assert r["negative_ids"] == tok(r["negative_text"], add_special_tokens=False)["input_ids"]
    counts = manifest["counts"]
    assert (counts["premise_without_contradiction"], counts["premise_without_entailment"], counts["no_gold_label"]) == (
        1,
        1,
        1,
    )
    assert manifest["triplets"] == 4


def sick_triplet_count(path: Path) -> int:
    """Entailment pairs whose premise (sentence_A) has a contradiction in the file."""
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    contradicted = {r["sentence_A"] for r in rows if r["entailment_judgment"] == "CONTRADICTION"}
    return sum(r["entailment_judgment"] == "ENTAILMENT" and r["sentence_A"] in contradicted for r in rows)


@pytest.mark.skipif(not SHARED, reason="CPIPE_SHARED_DATA is not set (path to the team's shared data directory)")
def test_triplets_from_sicks_train_split_by_default(tmp_path, tok_dir):
    eval_data = Path(SHARED) / "eval"
    rows, manifest = triplet_rows(tmp_path / "art", tok_dir, evaluate_data=str(eval_data), epochs=1)
    expected = sick_triplet_count(next(eval_data.rglob("SICK_train.txt")))
    assert expected == 148  # of SICK train's 4,500 pairs, 1,299 entailments
    assert len(rows) == manifest["triplets"] == expected
    assert all(r["negative_text"] != r["positive_text"][0] for r in rows)


def test_nli_files_are_not_judged_by_their_names(tmp_path):
    cfg = lambda **s: Config(augment=AugmentConfig(simcse_sup=s), evaluate=EvaluateConfig(data=str(tmp_path)))
    run = TrainConfig(objective="simcse-sup")
    with pytest.raises(InputError, match="SICK_train.txt under evaluate.data"):
        augment.config(cfg(), run)
    # Splits the evaluation does not score are training data whatever their names (scored ones: test_eval_content)
    for name in ("snli_1.0_test.jsonl", "multinli_1.0_dev_matched.jsonl", "protest_train.jsonl"):
        (tmp_path / name).write_text("")
        assert augment.config(cfg(nli=[str(tmp_path / name)]), run)
    train = tmp_path / "snli_1.0_train.jsonl"
    train.write_text("")
    before = augment.config(cfg(nli=[str(train)]), run)
    train.write_text("{}\n")  # edited: the pairs are made again
    assert augment.config(cfg(nli=[str(train)]), run) != before


def with_negatives(rows: pa.Table) -> pa.Table:
    """The train-step tests' pairs with a hard negative each: another row's anchor, cut short."""
    anchors = rows.column("anchor_ids").to_pylist()
    return rows.append_column(
        "negative_ids", pa.array([a[5:25] for a in anchors[1:] + anchors[:1]], pa.list_(pa.int32()))
    )


@pytest.mark.parametrize("weight, grad_cache", [(0.0, None), (0.7, 3)])
def test_the_train_step_scores_hard_negatives_as_cl_forward(tokenizer, weight, grad_cache):
    """The first step's loss against the loop over embeddings taken here from the same encoder (no dropout):
    anchors, entailments and contradictions each through [CLS] and the Linear+Tanh head."""
    cfg = TrainConfig(objective="simcse-sup", batch_size=6, hard_negative_weight=weight, grad_cache=grad_cache)
    model = tiny_encoder(tokenizer, pooling=cfg.pooling, projection=cfg.projection)
    special = special_ids(tokenizer)
    batch = collate(with_negatives(pairs(tokenizer, n=6, positives=1)), special, 32, True)

    def embedded(name: str) -> torch.Tensor:
        with torch.no_grad():
            return model(*batch[name])[0].double()

    z1, z2, z3 = embedded("anchors"), embedded("positives"), embedded("negatives")
    optimizer, scheduler = make_optimizer(model, cfg, 2)
    loss = train_step(model, optimizer, scheduler, batch, cfg, special, None)["contrastive_loss"]
    assert loss == pytest.approx(cl_forward_hard_loop(z1, z2, z3, 0.05, weight), rel=1e-5)


def test_the_export_keeps_the_head_and_sentence_transformers_embeds_as_we_do(tmp_path, tokenizer):
    from sentence_transformers import SentenceTransformer

    torch.manual_seed(3)
    model = tiny_encoder(tokenizer, pooling="cls", projection="tanh").eval()
    export(model.mlm_model, tokenizer, str(tmp_path), "cls", model.projection)
    modules = json.loads((tmp_path / ST_DIR / "modules.json").read_text())
    assert [m["type"].rsplit(".", 1)[-1] for m in modules] == ["Transformer", "Pooling", "Dense"]
    sentences = ["kabar lobar mifen", "nudos pefen rogil sihom tujut", "zebar"]
    st = SentenceTransformer(str(tmp_path / ST_DIR), device="cpu").encode(sentences, convert_to_numpy=True)
    ours = Encoder(str(tmp_path), max_length=64, device="cpu")
    assert ours.dimension == 32
    np.testing.assert_allclose(ours.encode(sentences), st, atol=1e-5)
    # ... and both are the trained head over [CLS]: tanh(W h + b).
    linear = model.projection[0]
    for sentence, vector in zip(sentences, st):
        ids = tokenizer(sentence, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            cls = model.mlm_model.base_model(input_ids=ids).last_hidden_state[0, 0]
            expected = torch.tanh(linear.weight @ cls + linear.bias).numpy()
        np.testing.assert_allclose(vector, expected, atol=1e-5)
    assert not math.isclose(float(np.abs(st).max()), 0.0)


def test_the_profile_and_the_objective_train_what_the_paper_does():
    """run_sup_example.sh: batch 4 x 128, lr 5e-5, max_seq_length 32, 3 epochs, temp 0.05, pooler_type cls
    (the MLP kept), eval_steps 125, fp16; hard_negative_weight 0 (its default)."""
    from pipeline.config import load_config

    cfg = load_config(Path(__file__).resolve().parents[1] / "configs" / "simcse-sup.yaml")
    run = cfg.run_configs()["simcse-sup"]
    assert (run.batch_size, run.lr, run.max_length, run.temperature, run.eval_every) == (512, 5e-5, 32, 0.05, 125)
    assert (run.pooling, run.projection, run.keep_head, run.loss, run.mlm) == ("cls", "tanh", True, "info-nce", False)
    assert run.hard_negative_weight == 0 and run.precision == "fp16" and run.grad_cache < run.batch_size
    assert cfg.augment.simcse_sup.epochs == 3 and AugmentConfig().simcse_sup.epochs == 3
    assert "tanh head kept" in run.recipe() and "hard negatives (weight 0)" in run.recipe()
    plain = TrainConfig(objective="simcse-sup")
    assert (plain.keep_head, plain.pooling, plain.projection) == (True, "cls", "tanh")
    assert not TrainConfig(objective="simcse").keep_head
    for bad in ({"loss": "nt-xent"}, {"projection": "none"}):
        with pytest.raises(ValueError, match="info-nce|keep_head"):
            TrainConfig(objective="simcse-sup", **bad)
    with pytest.raises(ValueError, match="hard_negative_weight"):
        TrainConfig(objective="simcse", hard_negative_weight=1.0)
