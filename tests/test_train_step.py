"""The training step on a tiny model made in the test: it learns, and each objective switch does what it says."""

import numpy as np
import pyarrow as pa
import pytest
import torch

from pipeline.model.exported import Encoder
from pipeline.model.transformer import SpanEncoder, build_model, export
from pipeline.train.batching import collate, special_ids
from pipeline.train.config import TrainConfig
from pipeline.train.memory_bank import MemoryBank
from pipeline.train.optim import make_optimizer
from pipeline.train.step import train_step
from tests.conftest import make_document
from tests.helpers import tiny_model_config


def pairs(tokenizer, n=8, positives=2):
    rng = np.random.default_rng(1)
    rows = []
    for _ in range(n):
        ids = tokenizer(make_document(rng, 60), add_special_tokens=False)["input_ids"]
        rows.append({"anchor_ids": ids[:40], "positive_ids": [ids[30:50], ids[35:45]][:positives]})
    return pa.Table.from_pylist(rows)


def tiny_encoder(tokenizer, **kwargs) -> SpanEncoder:
    return SpanEncoder(
        build_model(
            tiny_model_config(),
            tokenizer,
        ),
        **kwargs,
    )


def run_steps(tokenizer, steps=15, model=None, bank=None, **overrides):
    cfg = TrainConfig(lr=3e-3, batch_size=8, **overrides)
    model = model or tiny_encoder(tokenizer, pooling=cfg.pooling, projection=cfg.projection)
    optimizer, scheduler = make_optimizer(model, cfg, steps)
    special = special_ids(tokenizer)
    batch = collate(pairs(tokenizer), special, 64, cfg.contrastive)
    generator = torch.Generator().manual_seed(0)
    return [train_step(model, optimizer, scheduler, batch, cfg, special, generator, bank) for _ in range(steps)]


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


def test_gradient_caching_takes_the_same_steps_as_the_whole_batch(tokenizer):
    models = [tiny_encoder(tokenizer) for _ in range(3)]
    whole = run_steps(tokenizer, steps=3, model=models[0])
    for model, chunk in zip(models[1:], (4, 7)):  # 24 rows: anchors and their positives, in chunks
        cached = run_steps(tokenizer, steps=3, model=model, grad_cache=chunk)
        for a, b in zip(whole, cached):
            assert a["contrastive_loss"] == pytest.approx(b["contrastive_loss"], rel=1e-4)
            assert a["mlm_loss"] == pytest.approx(b["mlm_loss"], rel=1e-4)
        for p, q in zip(models[0].parameters(), model.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


def test_memory_bank_fills_with_positives_and_adds_negatives(tokenizer):
    bank = MemoryBank(size=12, dim=32)
    with_bank = run_steps(tokenizer, steps=3, bank=bank)
    without = run_steps(tokenizer, steps=3)
    assert len(bank) == 12  # 8 positives a step, capped at 12
    assert with_bank[0]["contrastive_loss"] == pytest.approx(without[0]["contrastive_loss"])  # empty at step 1
    assert with_bank[1]["contrastive_loss"] != pytest.approx(without[1]["contrastive_loss"])


def test_projection_head_trains_but_is_not_exported_and_cls_pooling_is(tokenizer, tmp_path):
    model = tiny_encoder(tokenizer, pooling="cls", projection="mlp")
    before = [p.clone() for p in model.projection.parameters()]
    run_steps(tokenizer, steps=2, model=model, pooling="cls", projection="mlp")
    assert any(not torch.equal(a, b) for a, b in zip(before, model.projection.parameters()))
    export(model.mlm_model, tokenizer, str(tmp_path), pooling="cls")
    encoder = Encoder(str(tmp_path))
    assert encoder.pooling == "cls" and encoder.parameters == sum(
        p.numel() for p in model.mlm_model.base_model.parameters()
    )
    sentences = ["kabar dosfen", "mimor lonap pexqua"]
    with torch.inference_mode():
        enc = tokenizer(sentences, padding=True, return_tensors="pt")
        cls = model.mlm_model.base_model(**enc).last_hidden_state[:, 0].numpy()
    np.testing.assert_allclose(encoder.encode(sentences), cls, rtol=1e-4, atol=1e-5)
