"""Encoding a step's rows in length-sorted blocks, each padded to its own longest row (train.block_tokens), or
packed end to end with per-row attention (train.packing), computes the same losses and gradients as one
forward of every row padded to a common width (a reference written here), with and without MLM, with and
without GradCache; packed rows get the states each row gets alone (RoBERTa and BERT); the step counts real
and padded tokens; train.compile trains as eager does."""

import math

import numpy as np
import pyarrow as pa
import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForMaskedLM, BertConfig, RobertaConfig

from pipeline.errors import InputError
from pipeline.init.config import ModelConfig
from pipeline.model import transformer as model_module
from pipeline.model.packing import packed_hidden
from pipeline.model.transformer import SpanEncoder, build_model
from pipeline.train.batching import collate, length_blocks, special_ids, step_inputs
from pipeline.train.config import TrainConfig
from pipeline.train.optim import make_optimizer
from pipeline.train.step import accumulate, make_encoder, train_step
from tests.conftest import make_document

pytestmark = pytest.mark.usefixtures("one_torch_thread")
MODEL = ModelConfig(
    base=None,
    hidden_size=32,
    num_layers=2,
    num_heads=2,
    intermediate_size=64,
    dropout=0.0,
    max_position_embeddings=80,
    seed=0,
)


def uneven_pairs(tok, n=8) -> pa.Table:
    """Anchors of 3 to 70 tokens, positives of 1 to 35: blocks of very different widths."""
    rng = np.random.default_rng(3)
    rows = []
    for i in range(n):
        ids = tok(make_document(rng, 120), add_special_tokens=False)["input_ids"]
        a, p, q = 3 + (67 * i) // (n - 1), 1 + int(rng.integers(0, 35)), 1 + int(rng.integers(0, 35))
        rows.append({"anchor_ids": ids[:a], "positive_ids": [ids[a // 2 : a // 2 + p], ids[:q]]})
    return pa.Table.from_pylist(rows)


def reference(model, x: dict, cfg: TrainConfig, n_masked: int) -> torch.Tensor:
    """The padded path from the papers' formulas: every row at the common width in one forward, pooled over
    its real tokens (or its first), NT-Xent over anchors and their positives' means, MLM's mean
    cross-entropy over the masked tokens."""
    ids, mask, original = (x[k][x["unsort"]] for k in ("ids", "mask", "original"))
    hidden = model.mlm_model.base_model(input_ids=ids, attention_mask=mask).last_hidden_state
    if cfg.pooling == "cls":
        z = hidden[:, 0]
    else:
        z = torch.stack([hidden[i, : int(mask[i].sum())].mean(0) for i in range(len(ids))])
    b, p = x["anchors"], 2
    views = torch.cat([z[:b], z[b : b + b * p].view(b, p, -1).mean(1)])
    views = views / views.norm(dim=1, keepdim=True)
    sim = views @ views.T / cfg.temperature
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


@pytest.mark.parametrize(
    "mlm,grad_cache,pooling,packing",
    [
        (False, None, "mean", False),
        (True, None, "mean", False),
        (True, 5, "mean", False),
        (False, 7, "mean", False),
        (True, 5, "cls", False),
        (True, None, "mean", True),
        (True, 5, "mean", True),
        (False, None, "cls", True),
    ],
)
def test_blocks_and_packing_give_the_padded_batch_loss_and_gradients(tokenizer, mlm, grad_cache, pooling, packing):
    cfg = TrainConfig(
        batch_size=8,
        mlm=mlm,
        grad_cache=grad_cache,
        pooling=pooling,
        projection="none",
        packing=packing,
        block_tokens=0,
    )  # a block per width that differs by over 1/8
    special = special_ids(tokenizer)
    batch = collate(uneven_pairs(tokenizer), special, 64, True)
    model = make_encoder(build_model(MODEL, tokenizer), cfg).eval()
    padded_model = make_encoder(
        build_model(MODEL, tokenizer), cfg.model_copy(update={"packing": False})
    ).eval()  # same seed
    x = step_inputs(batch, cfg, special, torch.Generator().manual_seed(0))
    n_masked = int(x["positions"].sum()) if mlm else 0
    assert not mlm or n_masked > 5
    assert len(length_blocks(x["lengths"], 0)) >= 4 and x["lengths"][0] > 8 * x["lengths"][-1]

    losses = accumulate(model, batch, x, cfg, n_masked, 1, None, lambda loss: loss, last=True)
    blocked = grads(model)
    expected = reference(padded_model, x, cfg, n_masked)
    expected.backward()
    padded = grads(padded_model)

    assert float(sum(losses.values())) == pytest.approx(expected.item(), abs=1e-5)
    assert set(losses) == ({"contrastive_loss", "mlm_loss"} if mlm else {"contrastive_loss"})
    assert blocked.keys() == padded.keys()
    assert not mlm or len(padded) == len(list(model.parameters()))  # the LM head's included
    for name in padded:
        torch.testing.assert_close(blocked[name], padded[name], rtol=1e-5, atol=1e-5, msg=name)


@pytest.mark.parametrize(
    "config",
    [
        RobertaConfig(
            vocab_size=60,
            hidden_size=16,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=40,
            pad_token_id=1,
            type_vocab_size=1,
        ),
        BertConfig(
            vocab_size=60,
            hidden_size=16,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=40,
            pad_token_id=0,
            type_vocab_size=2,
        ),
    ],
    ids=["roberta", "bert"],
)
def test_packed_rows_get_the_hidden_states_each_row_gets_alone(config):
    """Positions restart at each row (RoBERTa's from padding_idx + 1, BERT's from 0), token types are 0, and
    no row attends to another: each row's states are those of the row encoded by itself, with no padding."""
    torch.manual_seed(0)
    alone = AutoModelForMaskedLM.from_config(config, attn_implementation="sdpa").eval()
    packed = AutoModelForMaskedLM.from_config(config, attn_implementation="sdpa").eval()
    packed.load_state_dict(alone.state_dict())
    encoder = SpanEncoder(packed, packing=True)
    lengths = [9, 1, 5, 30]
    ids = torch.full((4, 30), config.pad_token_id)
    mask = torch.zeros(4, 30, dtype=torch.long)
    for i, n in enumerate(lengths):
        ids[i, :n], mask[i, :n] = torch.randint(3, 60, (n,)), 1
    hidden = packed_hidden(encoder.mlm_model, ids, mask)
    for i, n in enumerate(lengths):
        expected = alone.base_model(input_ids=ids[i : i + 1, :n]).last_hidden_state[0]
        torch.testing.assert_close(hidden[i, :n], expected, rtol=1e-5, atol=1e-5)
        assert not hidden[i, n:].any()
    unpacked = encoder.mlm_model.base_model(input_ids=ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(unpacked * mask[..., None], hidden, rtol=1e-5, atol=1e-5)  # padded calls still mask


def test_packing_refuses_a_model_off_the_attention_interface(tokenizer):
    model = build_model(MODEL, tokenizer)
    type(model)._supports_attention_backend, saved = False, type(model)._supports_attention_backend
    try:
        with pytest.raises(InputError, match="train.packing"):
            SpanEncoder(model, packing=True)
    finally:
        type(model)._supports_attention_backend = saved


def test_length_blocks():
    assert length_blocks([512] * 6, 0) == [(6, 512)]  # fixed length: one block, no padding
    # 9 is within 1/8 of 10; 5 is not; 4 is not within 1/8 of 5; 2 opens its own.
    assert length_blocks([10, 9, 5, 4, 2], 0) == [(2, 10), (1, 5), (1, 4), (1, 2)]
    assert length_blocks([10, 9, 5, 4, 2], 25) == [(3, 10), (2, 4)]  # under 25 slots a block takes any row
    assert length_blocks([10, 9, 5, 4, 2], 1000) == [(5, 10)]
    assert length_blocks([10, 9, 5, 4, 2], None) == [(5, 10)]  # the default: one block


def test_step_counts_real_and_padded_tokens(tokenizer):
    cfg = TrainConfig(batch_size=8, mlm=False)
    special = special_ids(tokenizer)
    table = uneven_pairs(tokenizer)
    real = sum(min(len(a), 62) + 2 for a in table.column("anchor_ids").to_pylist()) + sum(
        min(len(p), 62) + 2 for group in table.column("positive_ids").to_pylist() for p in group
    )
    widest = max(min(len(a), 62) + 2 for a in table.column("anchor_ids").to_pylist())
    batch = collate(table, special, 64, True)
    model = make_encoder(build_model(MODEL, tokenizer), cfg)
    metrics = train_step(model, *make_optimizer(model, cfg, 2), batch, cfg, special, None)
    assert metrics["tokens"] == real and metrics["padded_tokens"] == 24 * widest  # one block: the default
    metrics = train_step(
        model, *make_optimizer(model, cfg, 2), batch, cfg.model_copy(update={"block_tokens": 0}), special, None
    )
    assert metrics["tokens"] == real < metrics["padded_tokens"] < 0.7 * 24 * widest
    packed = make_encoder(build_model(MODEL, tokenizer), cfg.model_copy(update={"packing": True}))
    metrics = train_step(
        packed, *make_optimizer(packed, cfg, 2), batch, cfg.model_copy(update={"packing": True}), special, None
    )
    assert metrics["tokens"] == real == metrics["padded_tokens"]  # packed: no slot is padding


@pytest.mark.slow  # torch.compile
@pytest.mark.parametrize("packing", [False, True])
def test_compiled_encoder_trains_as_eager(tokenizer, monkeypatch, packing):
    """With aot_eager: Dynamo's and AOTAutograd's graphs of forward and backward, without inductor's C++
    code generation, which takes over 3 minutes on the team's CPU (BENCHMARKS.md times inductor)."""
    monkeypatch.setattr(model_module, "COMPILE_BACKEND", "aot_eager")
    special = special_ids(tokenizer)
    tables = [uneven_pairs(tokenizer).take(np.random.default_rng(s).permutation(8)) for s in range(4)]
    history = {}
    for compiled in (False, True):
        # block_tokens 0: blocks of changing shapes, which must not recompile every step
        cfg = TrainConfig(batch_size=4, lr=3e-3, compile=compiled, mlm=True, packing=packing, block_tokens=0)
        torch._dynamo.reset()
        model = make_encoder(build_model(MODEL, tokenizer), cfg)
        optimizer, scheduler = make_optimizer(model, cfg, 4)
        generator = torch.Generator().manual_seed(0)
        history[compiled] = []
        for i, t in enumerate(tables):
            history[compiled].append(
                train_step(
                    model, optimizer, scheduler, collate(t.slice(0, 4), special, 64, True), cfg, special, generator
                )
            )
            if compiled and i == 0:
                after_first = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    for eager, compiled in zip(history[False], history[True]):
        assert compiled["contrastive_loss"] == pytest.approx(eager["contrastive_loss"], abs=1e-4)
        assert compiled["mlm_loss"] == pytest.approx(eager["mlm_loss"], abs=1e-4)
    assert not math.isclose(history[True][0]["loss"], history[True][-1]["loss"])
    # No recompiling after the first step. Blocks: one graph for 1-row blocks, one for the rest; packing: a graph
    # between each layer's attention calls, which run eager (pipeline.model.packing).
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == after_first <= (6 if packing else 2)
