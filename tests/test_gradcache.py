"""GradCache on a tiny encoder made in the test: its gradients are the full batch's, dropout included."""

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForMaskedLM, RobertaConfig

from pipeline.model.transformer import SpanEncoder
from pipeline.train import gradcache
from pipeline.train.gradcache import cached_step
from pipeline.train.losses import nt_xent

VOCAB, MASK_ID, PAD_ID = 100, 4, 1
B, P, LENGTH, TAU = 8, 2, 12, 0.05  # 8 anchors, 2 positives each: 24 rows, laid out as train_step does


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def model():
    config = RobertaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
        max_position_embeddings=LENGTH + 4,
        pad_token_id=PAD_ID,
        type_vocab_size=1,
    )
    torch.manual_seed(0)
    return SpanEncoder(AutoModelForMaskedLM.from_config(config)).train()


@pytest.fixture(scope="module")
def batch():
    g = torch.Generator().manual_seed(1)
    n = B + B * P
    ids = torch.randint(5, VOCAB, (n, LENGTH), generator=g)
    lengths = torch.randint(4, LENGTH + 1, (n,), generator=g)
    mask = (torch.arange(LENGTH) < lengths[:, None]).long()
    ids = ids.masked_fill(mask == 0, PAD_ID)
    positions = (torch.rand(n, LENGTH, generator=g) < 0.3) & mask.bool()
    positions[B:] = False  # MLM on the anchors only
    return {"labels": ids, "ids": ids.masked_fill(positions, MASK_ID), "mask": mask, "positions": positions}


def make_encode(model, batch, mlm: bool):
    masked = int(batch["positions"].sum())

    def encode(start, end):
        positions = batch["positions"][start:end] if mlm else None
        pooled, logits = model(batch["ids"][start:end], batch["mask"][start:end], positions)
        if not mlm:
            return pooled
        labels = batch["labels"][start:end][positions]
        return pooled, F.cross_entropy(logits, labels, reduction="sum") / masked  # this chunk's share of the mean

    return encode


def contrastive(z):
    return nt_xent(z[:B], z[B:].view(B, P, -1).mean(1), TAU)


def full_batch(model, batch, chunk_size, mlm):
    """The uncached reference: one graph over the whole batch, one backward. Its chunks are
    forwarded in cached_step's order so that dropout draws the same masks (chunk_size >= n:
    a single forward of the whole batch)."""
    torch.manual_seed(0)
    model.zero_grad(set_to_none=True)
    encode, n = make_encode(model, batch, mlm), batch["ids"].size(0)
    outs = [encode(s, min(s + chunk_size, n)) for s in range(0, n, chunk_size)]
    z = torch.cat([o[0] if mlm else o for o in outs])
    loss = contrastive(z)
    extra = sum(o[1] for o in outs) if mlm else torch.zeros(())
    (loss + extra).backward()
    return loss.detach(), extra.detach(), grads(model), torch.get_rng_state()


def cached(model, batch, chunk_size, mlm):
    torch.manual_seed(0)
    model.zero_grad(set_to_none=True)
    step = cached_step(make_encode(model, batch, mlm), batch["ids"].size(0), chunk_size, contrastive)
    return step.loss, step.extra_loss, grads(model), torch.get_rng_state()


def grads(model):
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def assert_same_grads(a, b, atol=1e-5, rtol=1e-4):
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=atol, rtol=rtol, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("mlm", [False, True], ids=["contrastive", "contrastive+mlm"])
@pytest.mark.parametrize("chunk_size", [2, 4, 5, 24])
def test_gradients_equal_the_full_batch_with_dropout(model, batch, chunk_size, mlm):
    loss, extra, expected, rng = full_batch(model, batch, chunk_size, mlm)
    got_loss, got_extra, got, got_rng = cached(model, batch, chunk_size, mlm)
    torch.testing.assert_close(got_loss, loss, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(got_extra, extra, atol=1e-6, rtol=1e-6)
    assert_same_grads(got, expected)
    assert ("mlm_model.lm_head.dense.weight" in got) == mlm
    assert torch.equal(got_rng, rng)  # the RNG stream goes on as after one uncached step


@pytest.mark.parametrize("chunk_size", [2, 4, 5])
def test_gradients_equal_one_forward_of_the_whole_batch_without_dropout(model, batch, chunk_size):
    model.eval()
    try:
        loss, extra, expected, _ = full_batch(model, batch, batch["ids"].size(0), mlm=True)
        got_loss, got_extra, got, _ = cached(model, batch, chunk_size, mlm=True)
    finally:
        model.train()
    torch.testing.assert_close(got_loss, loss, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(got_extra, extra, atol=1e-6, rtol=1e-5)
    assert_same_grads(got, expected)


def test_without_replaying_the_rng_the_gradients_differ(model, batch, monkeypatch):
    """The negative control: the exactness test above catches a missing RandContext."""
    _, _, expected, _ = full_batch(model, batch, 4, mlm=True)
    monkeypatch.setattr(gradcache, "_restore_rng_state", lambda state: None)
    _, _, got, _ = cached(model, batch, 4, mlm=True)
    worst = max(((got[k] - expected[k]).abs().max() / expected[k].abs().max()).item() for k in expected)
    assert worst > 1e-2
    with pytest.raises(AssertionError):
        assert_same_grads(got, expected)


def test_under_autocast(model, batch):
    """bf16 leaves differences of a few bf16 roundings (2**-8): autocast caches each weight's bf16 copy,
    so the full batch sums the chunks' weight gradients in bf16 and GradCache sums them in fp32."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, extra, expected, _ = full_batch(model, batch, 4, mlm=True)
        got_loss, got_extra, got, _ = cached(model, batch, 4, mlm=True)
    torch.testing.assert_close(got_loss, loss)
    torch.testing.assert_close(got_extra, extra)
    assert got.keys() == expected.keys()
    errors = {k: ((got[k] - expected[k]).norm() / expected[k].norm()).item() for k in expected}
    assert max(errors.values()) < 2e-2, errors


def test_under_ddp_with_no_sync(model, batch, tmp_path):
    """One gloo process: DDP's reducer accepts the two passes (no_sync on all but the last chunk) and
    the all-reduced gradients are the full batch's."""
    import contextlib

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    _, _, expected, _ = full_batch(model, batch, 4, mlm=True)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        ddp = DistributedDataParallel(model)
        n, encode = batch["ids"].size(0), make_encode(ddp, batch, mlm=True)

        def synced_at_the_end(start, end):
            with ddp.no_sync() if end < n else contextlib.nullcontext():
                return encode(start, end)

        torch.manual_seed(0)
        model.zero_grad(set_to_none=True)
        cached_step(synced_at_the_end, n, 4, contrastive)
        assert_same_grads(grads(model), expected)
    finally:
        dist.destroy_process_group()
