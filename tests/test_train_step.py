"""The training step on a tiny model made in the test: it learns, and each objective switch does what it says."""

import numpy as np
import pyarrow as pa
import pytest
import torch

from pipeline.config import TrainConfig
from pipeline.model import SpanEncoder, build_model
from pipeline.tokenizer import SPECIAL
from pipeline.train import collate, make_optimizer, special_ids, train_step
from tests.conftest import make_document


@pytest.fixture(scope="module")
def tokenizer():
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    rng = np.random.default_rng(0)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator([make_document(rng, 300) for _ in range(20)], vocab_size=300,
                            special_tokens=list(SPECIAL.values()))
    return PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, **SPECIAL)


def pairs(tokenizer, n=8, positives=2):
    rng = np.random.default_rng(1)
    rows = []
    for _ in range(n):
        ids = tokenizer(make_document(rng, 60), add_special_tokens=False)["input_ids"]
        rows.append({"anchor_ids": ids[:40], "positive_ids": [ids[30:50], ids[35:45]][:positives]})
    return pa.Table.from_pylist(rows)


def run_steps(tokenizer, steps=15, **overrides):
    cfg = TrainConfig(lr=3e-3, batch_size=8, **overrides).model_dump()
    model = SpanEncoder(build_model({"base": None, "hidden_size": 32, "num_layers": 1, "num_heads": 2,
                                     "intermediate_size": 64, "dropout": 0.0, "max_position_embeddings": 66,
                                     "seed": 0}, tokenizer))
    optimizer, scheduler = make_optimizer(model, cfg, steps)
    special = special_ids(tokenizer)
    batch = collate(pairs(tokenizer), special, 64, cfg["contrastive"])
    generator = torch.Generator().manual_seed(0)
    return [train_step(model, optimizer, scheduler, batch, cfg, special, generator) for _ in range(steps)]


def test_collate_wraps_spans_and_groups_positives(tokenizer):
    special = special_ids(tokenizer)
    batch = collate(pairs(tokenizer, n=3), special, 64, True)
    ids, mask = batch["anchors"]
    assert ids.shape[0] == 3 and batch["num_positives"] == 2
    assert (ids[:, 0] == special["bos"]).all()
    assert all(ids[i, int(mask[i].sum()) - 1] == special["eos"] for i in range(3))
    assert batch["positives"][0].shape[0] == 6


def test_declutr_step_learns_both_losses(tokenizer):
    history = run_steps(tokenizer)
    assert {"contrastive_loss", "mlm_loss"} <= set(history[0])
    assert history[-1]["contrastive_loss"] < history[0]["contrastive_loss"]
    assert history[-1]["mlm_loss"] < history[0]["mlm_loss"]
    assert all(h["loss"] == pytest.approx(h["contrastive_loss"] + h["mlm_loss"], rel=1e-5) for h in history)


def test_objective_switches(tokenizer):
    contrastive_only = run_steps(tokenizer, steps=2, mlm=False)[0]
    mlm_only = run_steps(tokenizer, steps=2, contrastive=False)[0]
    assert "mlm_loss" not in contrastive_only and "contrastive_loss" in contrastive_only
    assert "contrastive_loss" not in mlm_only and "mlm_loss" in mlm_only

