"""Mixed precision and gradient accumulation in training, on tiny models made in the test: k micro-batches
take the step their mean loss would (GradCache and DDP included), bf16/fp16 forwards keep float32 losses,
fp16's loss scaler skips overflowed steps and is checkpointed, a resumed run goes on with the next
micro-batch, a Ray Train run counts optimizer steps, and a loss that is not finite stops the run in one line."""

from __future__ import annotations

import math
import re
import zlib

import pandas as pd
import pyarrow as pa
import pytest
import torch
from ray.train import WorkerGroupError

from pipeline.errors import InputError
from pipeline.model.transformer import HF_DIR, load_mlm
from pipeline.stage import run_stage
from pipeline.train import loop
from pipeline.train import stage as train
from pipeline.train.batching import collate, special_ids, step_inputs
from pipeline.train.config import TrainConfig
from pipeline.train.losses import LOSSES
from pipeline.train.optim import make_optimizer
from pipeline.train.step import ddp_options, make_encoder, make_scaler, train_step
from storage import DatasetWriter
from tests.conftest import free_port
from tests.test_train_step import pairs, tiny_encoder

pytestmark = pytest.mark.usefixtures("one_torch_thread")

NO_CLIP = {"lr": 1e-3, "batch_size": 4, "grad_clip": 1e9}  # clipping would hide a scale error


def micro_batches(tok, n: int = 2, contrastive: bool = True) -> list[dict]:
    rows = pairs(tok, n=4 * n)
    return [collate(rows.slice(4 * i, 4), special_ids(tok), 64, contrastive) for i in range(n)]


def step(tok, batches, generator=None, scaler=None, **overrides):
    """A fresh tiny encoder (the same weights every call) takes one train_step; its gradients and metrics."""
    cfg = TrainConfig(**{**NO_CLIP, **overrides})
    model = tiny_encoder(tok)
    optimizer, scheduler = make_optimizer(model, cfg, 10)
    generator = generator or torch.Generator().manual_seed(0)
    metrics = train_step(model, optimizer, scheduler, batches, cfg, special_ids(tok), generator, scaler=scaler)
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return grads, metrics, model, optimizer, scheduler


def assert_close_grads(got: dict, expected: dict, rel: float) -> None:
    assert got.keys() == expected.keys()
    # A key bias adds the same q.b to every key's score of a query, which softmax ignores: its exact gradient
    # is zero, and what is computed is rounding alone, which no relative tolerance bounds.
    errors = {
        k: ((got[k] - expected[k]).norm() / expected[k].norm()).item()
        for k in expected
        if not k.endswith("attention.self.key.bias")
    }
    assert max(errors.values()) < rel, errors


@pytest.mark.parametrize("grad_cache", [None, 5], ids=["whole", "grad-cache"])
def test_accumulated_step_takes_the_mean_of_its_micro_batches_gradients(tokenizer, grad_cache):
    b1, b2 = micro_batches(tokenizer)
    g1, m1, *_ = step(tokenizer, b1, mlm=False, grad_cache=grad_cache)
    g2, m2, *_ = step(tokenizer, b2, mlm=False, grad_cache=grad_cache)
    both, m, _, optimizer, scheduler = step(tokenizer, [b1, b2], mlm=False, grad_cache=grad_cache)
    assert both.keys() == g1.keys()
    for name in both:
        torch.testing.assert_close(both[name], (g1[name] + g2[name]) / 2, rtol=1e-5, atol=1e-6, msg=name)
    assert m["contrastive_loss"] == pytest.approx((m1["contrastive_loss"] + m2["contrastive_loss"]) / 2, rel=1e-6)
    assert m["tokens"] == m1["tokens"] + m2["tokens"]
    assert scheduler.last_epoch == 1  # one optimizer step for the two micro-batches
    assert {int(s["step"]) for s in optimizer.state.values()} == {1}


def test_accumulated_mlm_is_the_mean_over_every_masked_token_of_the_step(tokenizer):
    """As GradCache's chunks do, micro-batches share the step's MLM mean by their masked tokens, not equally."""
    cfg = TrainConfig(**NO_CLIP, contrastive=False)
    b1, b2 = micro_batches(tokenizer, contrastive=False)
    generator = torch.Generator().manual_seed(0)
    counts = [int(step_inputs(b, cfg, special_ids(tokenizer), generator)["positions"].sum()) for b in (b1, b2)]
    assert counts[0] != counts[1]
    generator = torch.Generator().manual_seed(0)  # the same masks again: b1's draw, then b2's
    (g1, m1, *_), (g2, m2, *_) = (step(tokenizer, b, generator, contrastive=False) for b in (b1, b2))
    both, m, *_ = step(tokenizer, [b1, b2], contrastive=False)
    c1, c2 = counts[0] / sum(counts), counts[1] / sum(counts)
    for name in both:
        torch.testing.assert_close(both[name], c1 * g1[name] + c2 * g2[name], rtol=1e-5, atol=1e-6, msg=name)
    assert m["mlm_loss"] == pytest.approx(c1 * m1["mlm_loss"] + c2 * m2["mlm_loss"], rel=1e-6)


def test_bf16_runs_the_encoder_in_bf16_and_the_losses_in_fp32(tokenizer, monkeypatch):
    batch = micro_batches(tokenizer, n=1)
    dtypes = {"layer": [], "nt_xent": []}
    nt_xent = LOSSES["nt-xent"].fn

    def recording(anchors, positives, temperature, negatives):
        dtypes["nt_xent"] += [anchors.dtype, positives.dtype]
        return nt_xent(anchors, positives, temperature, negatives)

    fp32 = step(tokenizer, batch)[1]
    monkeypatch.setitem(LOSSES, "nt-xent", LOSSES["nt-xent"]._replace(fn=recording))
    model = tiny_encoder(tokenizer)
    model.mlm_model.base_model.encoder.layer[0].output.dense.register_forward_hook(
        lambda module, args, out: dtypes["layer"].append(out.dtype)
    )
    cfg = TrainConfig(**NO_CLIP, precision="bf16")
    optimizer, scheduler = make_optimizer(model, cfg, 10)
    bf16 = train_step(model, optimizer, scheduler, batch, cfg, special_ids(tokenizer), torch.Generator().manual_seed(0))
    assert dtypes["layer"] == [torch.bfloat16]
    assert set(dtypes["nt_xent"]) == {torch.float32}
    assert next(model.parameters()).dtype == torch.float32
    for key in ("contrastive_loss", "mlm_loss"):
        assert bf16[key] == pytest.approx(fp32[key], rel=2e-2)
    assert not bf16["skipped"] and bf16["grad_scale"] == 1.0


def test_fp16_scales_the_loss_and_skips_an_overflowed_step(tokenizer):
    batch = micro_batches(tokenizer, n=1)
    fp32 = step(tokenizer, batch)[1]
    _, fp16, model, _, scheduler = step(tokenizer, batch, scaler=make_scaler("fp16", "cpu"), precision="fp16")
    assert not fp16["skipped"] and scheduler.last_epoch == 1
    assert fp16["loss"] == pytest.approx(fp32["loss"], rel=1e-2)
    assert all(p.isfinite().all() for p in model.parameters())
    with pytest.raises(ValueError, match="GradScaler"):
        step(tokenizer, batch, precision="fp16")

    huge = torch.amp.GradScaler("cpu", init_scale=2.0**40)  # the scaled gradients overflow float16
    untouched = tiny_encoder(tokenizer).state_dict()
    grads, metrics, model, optimizer, scheduler = step(tokenizer, batch, scaler=huge, precision="fp16")
    assert metrics["skipped"] and metrics["grad_scale"] == 2.0**39 and huge.get_scale() == 2.0**39
    assert not all(g.isfinite().all() for g in grads.values())
    for name, value in model.state_dict().items():
        assert torch.equal(value, untouched[name]), name
    assert not optimizer.state and scheduler.last_epoch == 0  # neither an update nor a step of the schedule


def test_the_loss_scale_is_checkpointed_and_restored(tokenizer):
    batch = micro_batches(tokenizer, n=1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=3)  # not make_scaler's defaults
    cfg = TrainConfig(**NO_CLIP, precision="fp16")
    model = tiny_encoder(tokenizer)
    optimizer, scheduler = make_optimizer(model, cfg, 10)
    generator = torch.Generator().manual_seed(0)
    for _ in range(2):
        train_step(model, optimizer, scheduler, batch, cfg, special_ids(tokenizer), generator, scaler=scaler)
    saved = {}

    def report(metrics, directory):
        saved.update(loop.load_state(directory))

    state = {"step": 2, "metrics": [{"loss": 0.0}]}
    loop._report(report, model, optimizer, scheduler, scaler, None, None, generator, state, rank=0)
    restored = make_scaler("fp16", "cpu")
    restored.load_state_dict(saved["scaler"])
    assert restored.state_dict() == scaler.state_dict()
    assert restored.get_scale() == 2.0**10 and restored.state_dict()["_growth_tracker"] == 2  # two steps unskipped


@pytest.mark.parametrize("precision,rel", [("bf16", 5e-2), ("fp16", 1e-2)])
def test_grad_cache_keeps_the_gradients_in_mixed_precision(tokenizer, precision, rel):
    """Within the dtype's rounding, which depends on how many rows a forward sees at once: bf16's biases'
    gradients in chunks of 5 rows, GradCache or not, are ~2e-2 off the whole micro-batch's (and 5e-2 off
    float32's), as the temperature (0.05) amplifies the embeddings' rounding."""
    batches = micro_batches(tokenizer)
    scalers = [torch.amp.GradScaler("cpu", init_scale=2.0**10, enabled=precision == "fp16") for _ in range(2)]
    whole, m, *_ = step(tokenizer, batches, scaler=scalers[0], precision=precision)
    cached, mc, *_ = step(tokenizer, batches, scaler=scalers[1], precision=precision, grad_cache=5)
    assert not m["skipped"] and not mc["skipped"]
    assert mc["loss"] == pytest.approx(m["loss"], rel=rel)
    assert_close_grads(cached, whole, rel)


def accumulated_step(tok, rank: int = 0, world: int = 1) -> tuple[float, dict]:
    """Two micro-batches of 8 pairs, this worker's share of each, in one step; its loss and gradients."""
    cfg = TrainConfig(**{**NO_CLIP, "batch_size": 8}, mlm=False, grad_cache=5, grad_accumulation=2)
    model = tiny_encoder(tok)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, **ddp_options(cfg))
    optimizer, scheduler = make_optimizer(model, cfg, 10)
    rows, share = pairs(tok, n=16), 8 // world
    batches = [collate(rows.slice(8 * i + rank * share, share), special_ids(tok), 64, True) for i in range(2)]
    metrics = train_step(model, optimizer, scheduler, batches, cfg, special_ids(tok), None)
    module = model.module if world > 1 else model
    return metrics["contrastive_loss"], {n: p.grad for n, p in module.named_parameters() if p.grad is not None}


def ddp_worker(rank: int, world: int, port: int, tok, out: str) -> None:
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    try:
        torch.save(accumulated_step(tok, rank, world), f"{out}.{rank}")
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.slow  # two worker processes
def test_two_workers_accumulate_the_same_step_as_one(tokenizer, tmp_path):
    """Under DDP the step's last backward all-reduces all that the step accumulated (the backwards before
    it, of the first micro-batch and of GradCache's chunks, run under no_sync): one worker's gradients."""
    import torch.multiprocessing as mp

    loss, grads = accumulated_step(tokenizer)
    out = str(tmp_path / "result")
    mp.spawn(ddp_worker, args=(2, free_port(), tokenizer, out), nprocs=2, join=True)
    for rank in range(2):
        rank_loss, rank_grads = torch.load(f"{out}.{rank}", weights_only=False)
        assert rank_loss == pytest.approx(loss, rel=1e-5) and rank_grads.keys() == grads.keys()
        for name, g in grads.items():
            torch.testing.assert_close(rank_grads[name], g, rtol=1e-4, atol=1e-6, msg=name)


def run_train_loop(config: loop.WorkerConfig, table: pa.Table, saved: dict | None = None) -> list[dict]:
    """The training loop of one worker, in this process, resuming from `saved` if given: the checkpoints it
    reports. Its micro-batches are `table`'s rows as one worker's shard gives them: fixed-size tables in order,
    the short last one dropped."""
    reports = []

    def shard(rows: int):
        return (table.slice(i, rows) for i in range(0, table.num_rows - rows + 1, rows))

    loop.run_loop(
        config,
        rank=0,
        world=1,
        saved=saved,
        shard=shard,
        prepare_model=lambda model, ddp: model,
        report=lambda metrics, directory: reports.append(loop.load_state(directory)),
    )
    return reports


def test_a_resumed_run_neither_repeats_nor_skips_micro_batches(tokenizer, tmp_path):
    tiny_encoder(tokenizer).mlm_model.save_pretrained(tmp_path / "init")
    cfg = TrainConfig(
        batch_size=4, grad_accumulation=2, precision="fp16", max_length=64, checkpoint_every=2, torch_threads=1
    )
    config = loop.WorkerConfig(train=cfg, init=str(tmp_path / "init"), total_steps=4, special=special_ids(tokenizer))
    table = pairs(tokenizer, n=34)  # 4 steps of 2 micro-batches of 4 pairs; 2 pairs left over
    calm = run_train_loop(config, table)
    assert [r["step"] for r in calm] == [2, 4]
    resumed = run_train_loop(config, table, saved=calm[0])
    assert [r["step"] for r in resumed] == [4]
    a, b = calm[-1], resumed[-1]
    special = special_ids(tokenizer)
    firsts = [
        zlib.crc32(collate(table.slice(8 * i, 4), special, 64, True)["anchors"][0].numpy().tobytes()) for i in range(4)
    ]
    assert [m["batch"] for m in b["metrics"]] == [m["batch"] for m in a["metrics"]] == firsts
    assert [m["loss"] for m in b["metrics"]] == pytest.approx([m["loss"] for m in a["metrics"]], rel=1e-6)
    assert b["scaler"] == a["scaler"] and a["scaler"]["_growth_tracker"] == 4  # fp16's scale went on counting
    for name, value in a["model"].items():
        torch.testing.assert_close(b["model"][name], value, rtol=0, atol=0, msg=name)


def train_inputs(tokenizer, rows: pa.Table, artifacts) -> dict[str, str]:
    """The train stage's inputs under `artifacts`: `rows` as the augment stage's pairs, a tiny init model."""
    schema = pa.schema([("anchor_ids", pa.list_(pa.int32())), ("positive_ids", pa.list_(pa.list_(pa.int32())))])
    with DatasetWriter(str(artifacts), "augment", "pairs", config={}, inputs={}, schema=schema) as out:
        out.write(rows)
    with DatasetWriter(str(artifacts), "init", "tiny", config={}, inputs={}) as out:
        tiny_encoder(tokenizer).mlm_model.save_pretrained(f"{out.local_dir}/{HF_DIR}")
        tokenizer.save_pretrained(f"{out.local_dir}/{HF_DIR}")
    return {"pairs": f"{artifacts}/augment/pairs", "init": f"{artifacts}/init/tiny"}


@pytest.mark.ray
@pytest.mark.parametrize("workers", [1, 2])
def test_ray_train_run_in_bf16_with_accumulation_counts_optimizer_steps(workers, tokenizer, local_ray, tmp_path):
    """Through Ray Train, on one worker and on two (the local Ray's 2 CPUs, DDP over gloo): each worker's
    micro-batches are its slice of every 4 rows in order, so rank 0, which records the metrics, trained on
    the first 4 / workers of each."""
    rows = pairs(tokenizer, n=26)  # 3 steps of 2 micro-batches of 4 pairs; 2 pairs left over
    inputs = train_inputs(tokenizer, rows, tmp_path)
    cfg = TrainConfig(
        batch_size=4, grad_accumulation=2, precision="bf16", max_length=64, torch_threads=1, num_workers=workers
    )
    path = run_stage(train.STAGE, {"train": cfg.model_dump()}, inputs, str(tmp_path))

    metrics = pd.read_parquet(f"{path}/metrics.parquet")
    assert list(metrics["step"]) == [1, 2, 3]
    special = special_ids(tokenizer)
    micro = [collate(rows.slice(4 * i, 4 // workers), special, 64, True) for i in range(6)]  # rank 0's
    first_of_each = [zlib.crc32(micro[2 * i]["anchors"][0].numpy().tobytes()) for i in range(3)]
    assert list(metrics["batch"]) == first_of_each
    assert list(metrics["tokens"]) == [
        int(
            micro[2 * i]["anchors"][1].sum()
            + micro[2 * i]["positives"][1].sum()
            + micro[2 * i + 1]["anchors"][1].sum()
            + micro[2 * i + 1]["positives"][1].sum()
        )
        for i in range(3)
    ]
    assert metrics["loss"].notna().all() and not metrics["skipped"].any()


def test_a_loss_that_is_not_finite_stops_training_naming_its_step(tokenizer, tmp_path):
    """A learning rate of 1e30 (finite: the config takes it) throws the weights out of float32's range in one update,
    and the next step's loss is NaN: training stops there in one line naming the step, and no checkpoint holds a
    step past the last finite loss (the run published final_loss NaN)."""
    tiny_encoder(tokenizer).mlm_model.save_pretrained(tmp_path / "init")
    cfg = TrainConfig(lr=1e30, batch_size=4, max_length=64, checkpoint_every=1, torch_threads=1)
    config = loop.WorkerConfig(train=cfg, init=str(tmp_path / "init"), total_steps=4, special=special_ids(tokenizer))
    with pytest.raises(InputError) as e:
        run_train_loop(config, pairs(tokenizer, n=16))
    message = str(e.value)
    match = re.fullmatch(
        r"train: the loss is (nan|inf) at step (\d) of 4 "
        r"\(contrastive_loss \S+, mlm_loss \S+; lr \S+, grad_norm \S+\): "
        r"training diverged and stopped, nothing published; a lower train.lr or another train.precision may keep it "
        r"finite",
        message,
    )
    assert match, message
    step = int(match[2])
    assert step > 1  # the first step's loss, before any update, was finite: it diverged
    # Computed apart from the loop: the same steps, from the same init and pairs, taken one by one.
    torch.manual_seed(cfg.seed)
    model = make_encoder(load_mlm(str(tmp_path / "init")), cfg)
    optimizer, scheduler = make_optimizer(model, cfg, 4)
    generator = torch.Generator().manual_seed(cfg.seed * 7919)
    table, special = pairs(tokenizer, n=16), special_ids(tokenizer)
    losses = [
        train_step(
            model, optimizer, scheduler, collate(table.slice(4 * i, 4), special, 64, True), cfg, special, generator
        )["loss"]
        for i in range(step)
    ]
    assert all(math.isfinite(x) for x in losses[:-1]) and not math.isfinite(losses[-1])


@pytest.mark.ray
def test_a_diverged_ray_train_run_is_one_line_and_publishes_nothing(tokenizer, local_ray, tmp_path):
    """The worker's error crosses Ray Train (which wraps it in every failed worker's traceback) as the one line the
    CLI prints, and no train dataset is left that looks finished."""
    inputs = train_inputs(tokenizer, pairs(tokenizer, n=16), tmp_path)
    cfg = TrainConfig(lr=1e30, batch_size=4, max_length=64, torch_threads=1, max_failures=0)
    with pytest.raises(InputError, match=r"^train: the loss is nan at step 2 of 4 \(") as e:
        run_stage(train.STAGE, {"train": cfg.model_dump()}, inputs, str(tmp_path))
    assert "\n" not in str(e.value)
    assert not list(tmp_path.glob("train/*/_SUCCESS")), "a diverged run published its model"


def test_a_workers_input_error_is_found_in_ray_trains_failure():
    diverged = InputError("train: the loss is nan at step 2 of 4")
    failure = WorkerGroupError("worker 1 failed", {0: RuntimeError("collective aborted"), 1: diverged})
    assert train.worker_input_error(failure) is diverged
    assert train.worker_input_error(WorkerGroupError("failed", {0: RuntimeError("a bug")})) is None
    assert train.worker_input_error(RuntimeError("no worker's")) is None
