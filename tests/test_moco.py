"""MoCo as CERT trains with it, on a tiny encoder made in the test: the key encoder is the exponential
moving average of the trained encoder, keys come from it, the loss is MoCo's builder's (each query against
[its own key, the queue], a hand loop), the queue starts as K seeded random unit vectors and takes the keys
after the loss; moco-inbatch is InfoNCE over the batch's keys and the queue; a checkpoint restores all of it."""

import pytest
import torch

from pipeline.model.transformer import SpanEncoder, load_mlm
from pipeline.train import loop
from pipeline.train.batching import collate, special_ids
from pipeline.train.config import TrainConfig
from pipeline.train.memory_bank import run_bank
from pipeline.train.moco import MomentumEncoder
from pipeline.train.optim import make_optimizer
from pipeline.train.step import train_step
from tests.test_losses import moco_inbatch_loop, moco_loop
from tests.test_precision import run_train_loop
from tests.test_train_step import pairs, tiny_encoder

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def setup(tok, **overrides):
    cfg = TrainConfig(**{"objective": "cert", "lr": 1e-2, "batch_size": 8, **overrides})
    model = tiny_encoder(tok, pooling=cfg.pooling, projection=cfg.projection)
    optimizer, scheduler = make_optimizer(model, cfg, 10)
    special = special_ids(tok)
    return cfg, model, optimizer, scheduler, special, collate(pairs(tok), special, 64, True)


def test_the_key_encoder_is_the_ema_of_the_trained_encoder(tokenizer):
    m = 0.8  # far from 1, so that four steps move the keys visibly
    cfg, model, optimizer, scheduler, special, batch = setup(tokenizer, momentum=m, loss="moco-inbatch")
    key = MomentumEncoder(model, m)
    expected = {name: p.detach().clone() for name, p in model.named_parameters()}  # a copy at first
    for _ in range(4):
        train_step(model, optimizer, scheduler, batch, cfg, special, None, key_encoder=key)
        for name, p in model.named_parameters():
            expected[name] = m * expected[name] + (1 - m) * p.detach()
    keys = dict(key.module.named_parameters())
    assert keys.keys() == expected.keys()
    for name, value in expected.items():
        torch.testing.assert_close(keys[name], value, rtol=1e-5, atol=1e-7, msg=name)
        assert keys[name].grad is None
    moved = [name for name, p in model.named_parameters() if not torch.allclose(p, keys[name])]
    assert "projection.0.weight" in moved  # the head is part of the key encoder, as in MoCo v2 and CERT


def test_moco_scores_each_query_against_its_own_key_and_the_random_initial_queue_only(tokenizer):
    # tau 1: a loss of order 1, where the batch's other keys, were they negatives, would move it visibly
    cfg, model, optimizer, scheduler, special, batch = setup(
        tokenizer, momentum=0.99, memory_bank=20, seed=3, temperature=1.0
    )
    assert cfg.loss == "moco"  # MoCo's builder wherever momentum is on and the loss is not named
    key, bank = MomentumEncoder(model, 0.99), run_bank(cfg, 32)
    queue = bank.negatives().clone()
    assert queue.shape == (20, 32)
    with torch.no_grad():
        queries = model(*batch["anchors"])[0]
        keys = key.module(*batch["positives"])[0].view(8, 2, -1).mean(1)
    expected = moco_loop(queries.double(), keys.double(), queue.double(), 1.0)
    assert expected != pytest.approx(moco_inbatch_loop(queries.double(), keys.double(), queue.double(), 1.0), rel=1e-3)
    metrics = train_step(model, optimizer, scheduler, batch, cfg, special, None, bank, key_encoder=key)
    assert metrics["contrastive_loss"] == pytest.approx(expected, rel=1e-5)
    assert torch.equal(bank.negatives()[:12], queue[8:])  # the 8 oldest random keys left first
    torch.testing.assert_close(bank.negatives()[12:], keys)  # this step's keys joined the queue after it


def test_the_initial_queue_is_unit_norm_and_drawn_from_the_runs_seed():
    cfg = TrainConfig(objective="cert", momentum=0.999, memory_bank=64, seed=5)
    queue = run_bank(cfg, 16).negatives()
    assert queue.shape == (64, 16)
    torch.testing.assert_close(queue.norm(dim=1), torch.ones(64, dtype=queue.dtype))
    assert torch.equal(run_bank(cfg, 16).negatives(), queue)  # every worker, and a rerun, starts from it
    assert not torch.allclose(run_bank(cfg.model_copy(update={"seed": 6}), 16).negatives(), queue)
    assert queue.std() > 0.1 and abs(queue.mean()) < 0.1  # spread over the sphere, not a constant
    for other in ({"loss": "moco-inbatch"}, {"momentum": None, "loss": "info-nce"}):  # XBM, in-batch MoCo: empty
        assert len(run_bank(cfg.model_copy(update=other), 16)) == 0


def test_moco_inbatch_is_infonce_of_queries_against_keys_and_the_queue(tokenizer):
    cfg, model, optimizer, scheduler, special, batch = setup(
        tokenizer, momentum=0.99, memory_bank=20, loss="moco-inbatch"
    )
    key, bank = MomentumEncoder(model, 0.99), run_bank(cfg, 32)
    assert len(bank) == 0  # its queue starts empty, as this project's MoCo did
    train_step(model, optimizer, scheduler, batch, cfg, special, None, bank, key_encoder=key)
    assert len(bank) == 8  # the first step's keys, enqueued after its loss
    queue = bank.negatives().clone()
    with torch.no_grad():
        queries = model(*batch["anchors"])[0]
        keys = key.module(*batch["positives"])[0].view(8, 2, -1).mean(1)  # each anchor's two positives
    expected = moco_inbatch_loop(queries.double(), keys.double(), queue.double(), 0.07)
    metrics = train_step(model, optimizer, scheduler, batch, cfg, special, None, bank, key_encoder=key)
    assert metrics["contrastive_loss"] == pytest.approx(expected, rel=1e-5)
    assert torch.equal(bank.negatives()[:8], queue)
    torch.testing.assert_close(bank.negatives()[8:], keys)  # this step's keys joined the queue
    train_step(model, optimizer, scheduler, batch, cfg, special, None, bank, key_encoder=key)
    assert len(bank) == 20 and torch.equal(bank.negatives()[:4], queue[4:])  # the oldest left first


def test_a_checkpoint_restores_the_key_encoder_and_the_queue(tokenizer, tmp_path):
    tiny_encoder(tokenizer).mlm_model.save_pretrained(tmp_path / "init")
    cfg = TrainConfig(
        objective="cert",
        momentum=0.9,
        memory_bank=6,
        batch_size=4,
        lr=1e-3,
        max_length=64,
        checkpoint_every=2,
        torch_threads=1,
    )
    config = loop.WorkerConfig(train=cfg, init=str(tmp_path / "init"), total_steps=4, special=special_ids(tokenizer))
    table = pairs(tokenizer, n=16)
    calm = run_train_loop(config, table)
    first = calm[0]["key_encoder"]["module"]
    assert any(not torch.equal(first[name], value) for name, value in calm[0]["model"].items())
    resumed = run_train_loop(config, table, saved=calm[0])
    a, b = calm[-1], resumed[-1]
    assert [m["loss"] for m in b["metrics"]] == pytest.approx([m["loss"] for m in a["metrics"]], rel=1e-6)
    assert torch.equal(b["bank"]["queue"], a["bank"]["queue"]) and len(a["bank"]["queue"]) == 6
    assert a["bank"]["queue"].size(1) == 128  # CERT's head width, which the queue holds
    # The export loads the checkpoint into the encoder the train stage builds from the run's settings.
    SpanEncoder(
        load_mlm(str(tmp_path / "init")), cfg.pooling, cfg.projection, projection_dim=cfg.projection_dim
    ).load_state_dict(a["model"])
    for part in ("model", "key_encoder"):
        state_a = a[part] if part == "model" else a[part]["module"]
        state_b = b[part] if part == "model" else b[part]["module"]
        for name, value in state_a.items():
            torch.testing.assert_close(state_b[name], value, rtol=0, atol=0, msg=f"{part}.{name}")
