"""Encoding a step's rows in length-sorted blocks, each padded to its own longest row, computes the same
losses and gradients as one forward of every row padded to a common width (a reference written here), with
and without MLM, with and without GradCache; the step counts real and padded tokens; train.compile trains
as eager does."""

import math

import numpy as np
import pyarrow as pa
import pytest
import torch
import torch.nn.functional as F

from pipeline import model as model_module
from pipeline import train
from pipeline.config import TrainConfig
from pipeline.model import build_model
from pipeline.train import (accumulate, collate, length_blocks, make_encoder, make_optimizer, special_ids,
                            step_inputs, train_step)
from tests.conftest import make_document
from tests.test_train_step import tokenizer  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")
MODEL = {"base": None, "hidden_size": 32, "num_layers": 2, "num_heads": 2, "intermediate_size": 64,
         "dropout": 0.0, "max_position_embeddings": 80, "seed": 0}


def uneven_pairs(tok, n=8) -> pa.Table:
    """Anchors of 3 to 70 tokens, positives of 1 to 35: blocks of very different widths."""
    rng = np.random.default_rng(3)
    rows = []
    for i in range(n):
        ids = tok(make_document(rng, 120), add_special_tokens=False)["input_ids"]
        a, p, q = 3 + (67 * i) // (n - 1), 1 + int(rng.integers(0, 35)), 1 + int(rng.integers(0, 35))
        rows.append({"anchor_ids": ids[:a], "positive_ids": [ids[a // 2:a // 2 + p], ids[:q]]})
    return pa.Table.from_pylist(rows)


def reference(model, x: dict, cfg: dict, n_masked: int) -> torch.Tensor:
    """The padded path from the papers' formulas: every row at the common width in one forward, pooled over
    its real tokens (or its first), NT-Xent over anchors and their positives' means, MLM's mean
    cross-entropy over the masked tokens."""
    ids, mask, original = (x[k][x["unsort"]] for k in ("ids", "mask", "original"))
    hidden = model.mlm_model.base_model(input_ids=ids, attention_mask=mask).last_hidden_state
    if cfg["pooling"] == "cls":
        z = hidden[:, 0]
    else:
        z = torch.stack([hidden[i, :int(mask[i].sum())].mean(0) for i in range(len(ids))])
    b, p = x["anchors"], 2
    views = torch.cat([z[:b], z[b:b + b * p].view(b, p, -1).mean(1)])
    views = views / views.norm(dim=1, keepdim=True)
    sim = views @ views.T / cfg["temperature"]
    loss = 0.0
    for i in range(2 * b):
        partner = (i + b) % (2 * b)
        others = torch.stack([sim[i, j] for j in range(2 * b) if j != i])
        loss = loss - (sim[i, partner] - torch.logsumexp(others, 0))
    loss = loss / (2 * b)
    if n_masked:
        positions = x["positions"][x["unsort"]]
        logits = model.head(hidden[positions])
        loss = loss + F.cross_entropy(logits, original[positions], reduction="sum") / n_masked
    return loss


def grads(model) -> dict:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("mlm,grad_cache,pooling", [(False, None, "mean"), (True, None, "mean"),
                                                    (True, 5, "mean"), (False, 7, "mean"), (True, 5, "cls")])
def test_blocks_give_the_padded_batch_loss_and_gradients(tokenizer, monkeypatch, mlm, grad_cache, pooling):
    monkeypatch.setattr(train, "BLOCK_TOKENS", 0)  # a block per width that differs by over 1/8
    cfg = TrainConfig(batch_size=8, mlm=mlm, grad_cache=grad_cache, pooling=pooling, projection="none").model_dump()
    special = special_ids(tokenizer)
    batch = collate(uneven_pairs(tokenizer), special, 64, True)
    model = make_encoder(build_model(MODEL, tokenizer), cfg).eval()
    x = step_inputs(batch, cfg, special, torch.Generator().manual_seed(0))
    n_masked = int(x["positions"].sum()) if mlm else 0
    assert not mlm or n_masked > 5
    assert len(length_blocks(x["lengths"])) >= 4 and x["lengths"][0] > 8 * x["lengths"][-1]

    losses = accumulate(model, batch, x, cfg, n_masked, 1, None, lambda loss: loss, last=True)
    blocked = grads(model)
    model.zero_grad(set_to_none=True)
    expected = reference(model, x, cfg, n_masked)
    expected.backward()
    padded = grads(model)

    assert sum(losses.values()) == pytest.approx(expected.item(), abs=1e-5)
    assert set(losses) == ({"contrastive_loss", "mlm_loss"} if mlm else {"contrastive_loss"})
    assert blocked.keys() == padded.keys()
    assert not mlm or len(padded) == len(list(model.parameters()))  # the LM head's included
    for name in padded:
        torch.testing.assert_close(blocked[name], padded[name], rtol=1e-5, atol=1e-5, msg=name)


def test_length_blocks():
    assert length_blocks([512] * 6, 0) == [(6, 512)]  # fixed length: one block, no padding
    # 9 is within 1/8 of 10; 5 is not; 4 is not within 1/8 of 5; 2 opens its own.
    assert length_blocks([10, 9, 5, 4, 2], 0) == [(2, 10), (1, 5), (1, 4), (1, 2)]
    assert length_blocks([10, 9, 5, 4, 2], 25) == [(3, 10), (2, 4)]  # under 25 slots a block takes any row
    assert length_blocks([10, 9, 5, 4, 2], 1000) == [(5, 10)]


def test_step_counts_real_and_padded_tokens(tokenizer, monkeypatch):
    cfg = TrainConfig(batch_size=8, mlm=False).model_dump()
    special = special_ids(tokenizer)
    table = uneven_pairs(tokenizer)
    real = sum(min(len(a), 62) + 2 for a in table.column("anchor_ids").to_pylist()) + sum(
        min(len(p), 62) + 2 for group in table.column("positive_ids").to_pylist() for p in group)
    widest = max(min(len(a), 62) + 2 for a in table.column("anchor_ids").to_pylist())
    batch = collate(table, special, 64, True)
    model = make_encoder(build_model(MODEL, tokenizer), cfg)
    metrics = train_step(model, *make_optimizer(model, cfg, 2), batch, cfg, special, None)
    assert metrics["tokens"] == real and metrics["padded_tokens"] == 24 * widest  # one block, as today
    monkeypatch.setattr(train, "BLOCK_TOKENS", 0)
    metrics = train_step(model, *make_optimizer(model, cfg, 2), batch, cfg, special, None)
    assert metrics["tokens"] == real < metrics["padded_tokens"] < 0.7 * 24 * widest


def test_compiled_encoder_trains_as_eager(tokenizer, monkeypatch):
    """With aot_eager: Dynamo's and AOTAutograd's graphs of forward and backward, without inductor's C++
    code generation, which takes over 3 minutes on the team's CPU (BENCHMARKS.md times inductor)."""
    monkeypatch.setattr(train, "BLOCK_TOKENS", 0)  # blocks of changing shapes: dynamic, no recompile per step
    monkeypatch.setattr(model_module, "COMPILE_BACKEND", "aot_eager")
    special = special_ids(tokenizer)
    tables = [uneven_pairs(tokenizer).take(np.random.default_rng(s).permutation(8)) for s in range(4)]
    history = {}
    for compiled in (False, True):
        cfg = TrainConfig(batch_size=4, lr=3e-3, compile=compiled, mlm=True).model_dump()
        torch._dynamo.reset()
        model = make_encoder(build_model(MODEL, tokenizer), cfg)
        optimizer, scheduler = make_optimizer(model, cfg, 4)
        generator = torch.Generator().manual_seed(0)
        history[compiled] = [train_step(model, optimizer, scheduler, collate(t.slice(0, 4), special, 64, True),
                                        cfg, special, generator) for t in tables]
    for eager, compiled in zip(history[False], history[True]):
        assert compiled["contrastive_loss"] == pytest.approx(eager["contrastive_loss"], abs=1e-4)
        assert compiled["mlm_loss"] == pytest.approx(eager["mlm_loss"], abs=1e-4)
    assert not math.isclose(history[True][0]["loss"], history[True][-1]["loss"])
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] <= 2  # one for 1-row blocks, one for the rest
