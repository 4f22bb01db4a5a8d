"""The training loop each Ray Train worker runs: the run's steps over its shard of the pairs, checkpoints, and
with train.eval_every the dev set's score at every checkpoint (rank 0).

`run_loop` takes what it needs of Ray Train as plain arguments (the worker's rank, the state to resume from,
its micro-batches, the model's placement, the reports), so that tests and benchmarks run it in one process;
`train_loop`, the function Ray Train's workers run, builds them from `ray.train`. A checkpoint is a directory
holding one file, `state.pt`: the model, optimizer, schedule, loss scale, RNGs, memory bank, key encoder and
the metrics so far.
"""

from __future__ import annotations

import itertools
import logging
import os
import tempfile
import time
import zlib
from collections.abc import Callable, Iterable

import pyarrow as pa
import torch

from pipeline.model.exported import embed, eval_length
from pipeline.model.transformer import load_mlm
from pipeline.tokenizer.loading import load_tokenizer
from pipeline.train.batching import collate
from pipeline.train.devset import dev_spearman
from pipeline.train.memory_bank import run_bank
from pipeline.train.moco import MomentumEncoder
from pipeline.train.optim import make_optimizer
from pipeline.train.step import ddp_options, make_encoder, make_scaler, train_step

STATE = "state.pt"  # a checkpoint directory's file


def train_loop(config: dict) -> None:
    """Runs on every Ray Train worker: run_loop with Ray Train's context, latest checkpoint, dataset shard,
    model placement and reports."""
    # Ray is imported here only: run_loop, which tests and benchmarks call directly, needs none of it.
    import ray.train
    import ray.train.torch
    from ray.train.v2._internal.execution import context as train_context

    # Ray 2.60 logs every report ("Reporting training result N: TrainingReport(...)") on a logger named after
    # its module's file, which RunConfig's LoggingConfig does not reach: noise on the user's terminal.
    logging.getLogger(train_context.__file__).setLevel(logging.WARNING)
    ctx = ray.train.get_context()
    checkpoint, saved = ray.train.get_checkpoint(), None
    if checkpoint:
        with checkpoint.as_directory() as d:
            saved = load_state(d)

    def report(metrics: dict, directory: str | None) -> None:
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(directory) if directory else None)

    run_loop(config, rank=ctx.get_world_rank(), world=ctx.get_world_size(), saved=saved,
             shard=lambda rows: ray.train.get_dataset_shard("train").iter_batches(
                 batch_size=rows, drop_last=True, batch_format="pyarrow"),
             prepare_model=lambda model, ddp: ray.train.torch.prepare_model(model, parallel_strategy_kwargs=ddp),
             report=report)


def run_loop(config: dict, *, rank: int, world: int, saved: dict | None,
             shard: Callable[[int], Iterable[pa.Table]], prepare_model, report) -> None:
    """Worker `rank` of `world`'s training: `config` is the driver's (train's settings, the init model, the
    step count, the special ids, the dev set). `saved`: the state to resume from (load_state of the latest
    checkpoint), or None. `shard(rows)`: this worker's pairs in tables of `rows`, in order, a short last
    one dropped. `prepare_model(model, ddp_kwargs)`: the model placed on the worker's device (and wrapped in
    DDP where there are several workers). `report(metrics, directory)`: every worker's at every checkpoint;
    rank 0 passes the checkpoint's directory, which lasts as long as the call, the others None."""
    cfg = config["train"]
    torch.set_num_threads(cfg["torch_threads"] or max(1, (os.cpu_count() or 1) // world))
    torch.manual_seed(cfg["seed"] + rank)
    model = make_encoder(load_mlm(config["init"]), cfg)
    model.train()
    optimizer, scheduler = make_optimizer(model, cfg, config["total_steps"])
    bank = run_bank(cfg, cfg["projection_dim"] or model.mlm_model.config.hidden_size)
    state = {"step": 0, "metrics": []}
    if saved is not None:
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        torch.set_rng_state(saved["rng"])
        if bank is not None:
            bank.load_state_dict(saved["bank"])
        state = {"step": saved["step"], "metrics": saved["metrics"]}
        if rank == 0:
            print(f"resuming from step {saved['step']}", flush=True)
    model = prepare_model(model, ddp_options(cfg))
    # A copy of the (restored, placed) encoder, as MoCo initialises its key encoder; then its own state.
    key_encoder = MomentumEncoder(getattr(model, "module", model), cfg["momentum"]) if cfg["momentum"] else None
    scaler = make_scaler(cfg["precision"], next(model.parameters()).device.type)
    generator = torch.Generator().manual_seed(cfg["seed"] * 7919 + rank)  # MLM masks
    if saved is not None:
        scaler.load_state_dict(saved["scaler"])
        if key_encoder is not None:
            key_encoder.load_state_dict(saved["key_encoder"])
        generator.set_state(saved["generator"])  # so a resumed run masks as an unbroken one would
    dev = config.get("dev")
    scorer = dev_scorer(model, load_tokenizer(config["init"]), cfg["pooling"], dev, cfg["keep_head"]) \
        if dev and rank == 0 else None
    micro_batches = shard(cfg["batch_size"] // world)
    # "seconds" counts training time across restarts, not since the latest one.
    step, started = 0, time.perf_counter() - (state["metrics"][-1]["seconds"] if state["metrics"] else 0.0)
    waited = time.perf_counter()
    for tables in grouped(micro_batches, cfg["grad_accumulation"]):
        if step >= config["total_steps"]:
            break
        step += 1
        if step <= state["step"]:
            continue  # resumed: these micro-batches were trained on before the checkpoint
        data_seconds = time.perf_counter() - waited  # time blocked on Ray Data: is training input-bound?
        batches = [collate(table, config["special"], cfg["max_length"], cfg["contrastive"]) for table in tables]
        metrics = train_step(model, optimizer, scheduler, batches, cfg, config["special"], generator, bank, scaler,
                             key_encoder)
        # "batch" identifies the rows trained on: a resumed run must neither repeat nor skip any.
        state["metrics"].append({"step": step, **metrics,
                                 "batch": zlib.crc32(batches[0]["anchors"][0].numpy().tobytes()),
                                 "data_seconds": data_seconds, "seconds": time.perf_counter() - started,
                                 **({"dev_spearman": None} if dev else {})})
        state["step"] = step
        if checkpoint_due(step, cfg, config["total_steps"]):
            if scorer is not None:
                state["metrics"][-1]["dev_spearman"] = scorer()
            _report(report, model, optimizer, scheduler, scaler, bank, key_encoder, generator, state, rank)
        if step % cfg["log_every"] == 0 and rank == 0:
            print(f"step {step}/{config['total_steps']} loss {metrics['loss']:.4f} lr {metrics['lr']:.2e}", flush=True)
        waited = time.perf_counter()


def checkpoint_due(step: int, cfg: dict, total_steps: int) -> bool:
    """Every checkpoint_every steps, every eval_every steps and at the last: with eval_every, every checkpoint
    is scored (Ray orders them by the score) and every score checkpointed (so its model can be exported)."""
    return step == total_steps or step % cfg["checkpoint_every"] == 0 or bool(
        cfg["eval_every"] and step % cfg["eval_every"] == 0)


def dev_scorer(model, tokenizer, pooling: str, dev: dict, keep_head: bool = False):
    """A function scoring the model as it is now on the dev pairs: the evaluation's tokenisation, the run's
    pooling (and head, where the export keeps it), eval mode (no dropout), no gradient; training mode is
    restored after."""
    module = getattr(model, "module", model)
    encoder = module.mlm_model.base_model
    max_length = eval_length(encoder.config, tokenizer, dev["max_length"])

    def score() -> float:
        module.eval()
        try:
            return dev_spearman(lambda sentences: embed(encoder, tokenizer, sentences, pooling, max_length,
                                                        head=module.projection if keep_head else None),
                                dev["subset"])
        finally:
            module.train()

    return score


def grouped(items, k: int):
    """Lists of k consecutive items; a shorter last group is dropped, as Ray drops a short last batch."""
    items = iter(items)
    while len(group := list(itertools.islice(items, k))) == k:
        yield group


def _report(report, model, optimizer, scheduler, scaler, bank, key_encoder, generator, state: dict,
            rank: int) -> None:
    module = model.module if hasattr(model, "module") else model
    with tempfile.TemporaryDirectory() as d:
        checkpoint = None
        if rank == 0:
            torch.save({"model": module.state_dict(), "optimizer": optimizer.state_dict(),
                        "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(),
                        "rng": torch.get_rng_state(), "generator": generator.get_state(),
                        "bank": bank.state_dict() if bank is not None else None,
                        "key_encoder": key_encoder.state_dict() if key_encoder is not None else None, **state},
                       f"{d}/{STATE}")
            checkpoint = d
        last = state["metrics"][-1]
        # Only rank 0's metrics reach Ray's checkpoint bookkeeping, and only rank 0 scores the dev set.
        score = {"dev_spearman": last["dev_spearman"]} if last.get("dev_spearman") is not None else {}
        report({"step": state["step"], "loss": last["loss"], **score}, checkpoint)


def load_state(directory: str) -> dict:
    """What _report saved in a checkpoint's directory."""
    return torch.load(f"{directory}/{STATE}", weights_only=False)
