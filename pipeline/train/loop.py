"""The training loop each Ray Train worker runs: the run's steps over its shard of the pairs, checkpoints every
train.checkpoint_every steps, and with train.eval_every rank 0's score of the model by train.select_by every
eval_every steps (pipeline.train.selection), each on its own clock.

`run_loop` takes what it needs of Ray Train as plain arguments (the worker's rank, the state to resume from,
its micro-batches, the model's placement, the reports), so that tests and benchmarks run it in one process;
`train_loop`, the function Ray Train's workers run, builds them from `ray.train`. A checkpoint is a directory
holding one file, `state.pt`: the model, optimizer, schedule, loss scale, RNGs, memory bank, key encoder,
the metrics so far and, with eval_every, the best-scoring step so far with its weights ("best"): a scored step
need not be a checkpoint's, and the export is always a scored step's weights, kept in memory (on the host) from
its evaluation on and saved in every checkpoint after it.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import pickle
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import pyarrow as pa
import torch

from pipeline.errors import InputError
from pipeline.model.transformer import load_mlm
from pipeline.tokenizer.loading import load_tokenizer
from pipeline.train.batching import collate
from pipeline.train.config import TrainConfig
from pipeline.train.memory_bank import run_bank
from pipeline.train.moco import MomentumEncoder
from pipeline.train.optim import make_optimizer
from pipeline.train.progress import Progress, bar_kind, loss
from pipeline.train.scorers import make_scorer
from pipeline.train.selection import columns, improves, score_key
from pipeline.train.shard import rank_batches
from pipeline.train.step import ddp_options, make_encoder, make_scaler, train_step
from storage import DatasetError, iter_batches, no_space

STATE = "state.pt"  # a checkpoint directory's file
WORKER = "worker"  # train_loop_config's one key: the WorkerConfig, as a reference into Ray's object store


@dataclass(frozen=True)
class WorkerConfig:
    """What the driver gives every worker: the run's settings, the init model's directory, the step count, the
    tokenizer's special ids, what rank 0 scores with (selection.load's; None without eval_every), and the pairs'
    dataset and the columns its steps read (train_loop's: run_loop is given its shard)."""

    train: TrainConfig
    init: str
    total_steps: int
    special: dict
    dev: dict | None = None
    pairs: str | None = None
    columns: tuple[str, ...] = ()


def train_loop(config: dict) -> None:
    """Runs on every Ray Train worker: run_loop with Ray Train's context, latest checkpoint, the worker's slice of
    the pairs (pipeline.train.shard), model placement and reports."""
    # Ray is imported here only: run_loop, which tests and benchmarks call directly, needs none of it.
    import ray.train
    import ray.train.torch
    from ray.train.v2._internal import util as train_util
    from ray.train.v2._internal.execution import context as train_context

    # Ray 2.60 logs every report ("Reporting training result N: TrainingReport(...)") on a logger named after
    # its module's file, which RunConfig's LoggingConfig does not reach: noise on the user's terminal.
    logging.getLogger(train_context.__file__).setLevel(logging.WARNING)
    logging.getLogger(train_util.__name__).addFilter(_no_users_error_traceback)
    ctx = ray.train.get_context()
    checkpoint = ray.train.get_checkpoint()
    saved = load_state(checkpoint.path, checkpoint.filesystem) if checkpoint else None

    def report(metrics: dict, directory: str | None) -> None:
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(directory) if directory else None)

    rank, world, job = ctx.get_world_rank(), ctx.get_world_size(), ray.get(config[WORKER])
    run_loop(
        job,
        rank=rank,
        world=world,
        saved=saved,
        shard=lambda rows: rank_batches(iter_batches(job.pairs, list(job.columns), rows * world), rows, rank, world),
        prepare_model=lambda model, ddp: ray.train.torch.prepare_model(model, parallel_strategy_kwargs=ddp),
        report=report,
    )


def _no_users_error_traceback(record: logging.LogRecord) -> bool:
    """Ray Train logs a failed training function's traceback ("Error in training function: ...") on the user's
    terminal as it hands the error to the driver, in the except block that caught it: an InputError (a diverged
    loss) or a DatasetError (a full disk) is the driver's one line (pipeline.train.failures.worker_input_error), not a
    traceback."""
    return not isinstance(sys.exc_info()[1], (InputError, DatasetError))


def run_loop(
    config: WorkerConfig,
    *,
    rank: int,
    world: int,
    saved: dict | None,
    shard: Callable[[int], Iterable[pa.Table]],
    prepare_model,
    report,
    scorer=None,
) -> None:
    """Worker `rank` of `world`'s training: `config` is the driver's. `saved`: the state to resume from
    (load_state of the latest checkpoint), or None. `shard(rows)`: this worker's pairs in tables of `rows`, in
    order, a short last one dropped. `prepare_model(model, ddp_kwargs)`: the model placed on the worker's device (and wrapped in
    DDP where there are several workers). `report(metrics, directory)`: every worker's at every checkpoint;
    rank 0 passes the checkpoint's directory, which lasts as long as the call, the others None.
    `scorer(model)`: rank 0's function scoring the placed model every eval_every steps, () -> {column: value}
    (None: pipeline.train.scorers.make_scorer of config.dev)."""
    cfg, total_steps = config.train, config.total_steps
    torch.set_num_threads(cfg.torch_threads or max(1, (os.cpu_count() or 1) // world))
    torch.manual_seed(cfg.seed + rank)
    model = make_encoder(load_mlm(config.init), cfg)
    model.train()
    optimizer, scheduler = make_optimizer(model, cfg, total_steps)
    bank = run_bank(cfg, cfg.projection_dim or model.mlm_model.config.hidden_size)
    state = {"step": 0, "metrics": [], "best": None}
    if saved is not None:
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        torch.set_rng_state(saved["rng"])
        if bank is not None:
            bank.load_state_dict(saved["bank"])
        state = {"step": saved["step"], "metrics": saved["metrics"], "best": saved.get("best")}
        if rank == 0:
            print(f"resuming from step {saved['step']}", flush=True)
    model = prepare_model(model, ddp_options(cfg))
    # A copy of the (restored, placed) encoder, as MoCo initialises its key encoder; then its own state.
    key_encoder = MomentumEncoder(getattr(model, "module", model), cfg.momentum) if cfg.momentum else None
    scaler = make_scaler(cfg.precision, next(model.parameters()).device.type)
    generator = torch.Generator().manual_seed(cfg.seed * 7919 + rank)  # MLM masks
    if saved is not None:
        scaler.load_state_dict(saved["scaler"])
        if key_encoder is not None:
            key_encoder.load_state_dict(saved["key_encoder"])
        generator.set_state(saved["generator"])  # so a resumed run masks as an unbroken one would
    dev = config.dev
    if dev and rank == 0:
        scorer = (scorer or (lambda m: make_scorer(m, load_tokenizer(config.init), cfg, dev)))(model)
    unscored = {k: None for k in columns(dev["by"])} if dev else {}
    micro_batches = shard(cfg.batch_size // world)
    progress = Progress(total_steps, state["step"], cfg.log_every, bar_kind()) if rank == 0 else None
    # "seconds" counts training time across restarts, not since the latest one.
    step, started = 0, time.perf_counter() - (state["metrics"][-1]["seconds"] if state["metrics"] else 0.0)
    waited = time.perf_counter()
    for tables in grouped(micro_batches, cfg.grad_accumulation):
        if step >= total_steps:
            break
        step += 1
        if step <= state["step"]:
            continue  # resumed: these micro-batches were trained on before the checkpoint
        data_seconds = time.perf_counter() - waited  # time blocked reading pairs: is training input-bound?
        batches = [collate(table, config.special, cfg.max_length, cfg.contrastive) for table in tables]
        metrics = train_step(
            model, optimizer, scheduler, batches, cfg, config.special, generator, bank, scaler, key_encoder
        )
        if not math.isfinite(metrics["loss"]):
            raise InputError(diverged(step, total_steps, metrics))
        # "batch" identifies the rows trained on: a resumed run must neither repeat nor skip any.
        state["metrics"].append(
            {
                "step": step,
                **metrics,
                "batch": zlib.crc32(batches[0]["anchors"][0].numpy().tobytes()),
                "data_seconds": data_seconds,
                "seconds": time.perf_counter() - started,
                **unscored,
            }
        )
        state["step"] = step
        if rank == 0 and dev and scoring_due(step, cfg, total_steps):
            state["metrics"][-1].update(plain(scorer()))
            keep_best(state, getattr(model, "module", model), dev["by"])
            key = score_key(dev["by"])
            progress.write(f"step {step}/{total_steps} {key} {state['metrics'][-1][key]:.4f}")
        if checkpoint_due(step, cfg, total_steps):
            _report(report, model, optimizer, scheduler, scaler, bank, key_encoder, generator, state, rank)
        if progress is not None:
            progress.step(step, metrics)
        waited = time.perf_counter()
    if progress is not None:
        progress.close()


def diverged(step: int, total_steps: int, metrics: dict) -> str:
    """Why a run stops at a step whose loss is not finite: every step after it would train on NaN weights, and a
    model so trained must not be published (it was, with final_loss NaN), nor checkpointed."""
    losses = ", ".join(f"{k} {loss(v)}" for k, v in metrics.items() if k.endswith("_loss"))
    return (
        f"train: the loss is {metrics['loss']} at step {step} of {total_steps} ({losses}; lr {metrics['lr']:.3g}, "
        f"grad_norm {metrics['grad_norm']:.3g}): training diverged and stopped, nothing published; a lower train.lr "
        "or another train.precision may keep it finite"
    )


def checkpoint_due(step: int, cfg: TrainConfig, total_steps: int) -> bool:
    """Every checkpoint_every steps and at the last (what a restart resumes from, and what the export reads)."""
    return step == total_steps or step % cfg.checkpoint_every == 0


def scoring_due(step: int, cfg: TrainConfig, total_steps: int) -> bool:
    """Every eval_every steps and at the last, whatever checkpoint_every is."""
    return bool(cfg.eval_every) and (step == total_steps or step % cfg.eval_every == 0)


def keep_best(state: dict, module, by: str) -> None:
    """The latest evaluation's step and a host copy of its weights become state["best"] if its score improves."""
    value = state["metrics"][-1][score_key(by)]
    if improves(value, state["best"]["score"] if state["best"] else None, by):
        state["best"] = {
            "step": state["step"],
            "score": value,
            "model": {k: v.detach().to("cpu", copy=True) for k, v in module.state_dict().items()},
        }


def grouped(items, k: int):
    """Lists of k consecutive items; a shorter last group is dropped, as Ray drops a short last batch."""
    items = iter(items)
    while len(group := list(itertools.islice(items, k))) == k:
        yield group


def _report(report, model, optimizer, scheduler, scaler, bank, key_encoder, generator, state: dict, rank: int) -> None:
    module = model.module if hasattr(model, "module") else model
    with tempfile.TemporaryDirectory() as d:
        checkpoint = None
        if rank == 0:
            saved = {
                "model": module.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "scaler": scaler.state_dict(),
                "rng": torch.get_rng_state(),
                "generator": generator.get_state(),
                "bank": bank.state_dict() if bank is not None else None,
                "key_encoder": key_encoder.state_dict() if key_encoder is not None else None,
                **state,
            }
            try:
                # Into a Python file, not a path: torch's own writer, on a full disk, says "unexpected pos" and
                # nothing of why; through a file, its error is raised from the OSError.
                with open(f"{d}/{STATE}", "wb") as f:
                    torch.save(saved, f)
            except Exception as e:
                no_space(e, f"{d}/{STATE}")
                raise
            checkpoint = d
        report({"step": state["step"], "loss": state["metrics"][-1]["loss"]}, checkpoint)


def load_state(directory: str, filesystem=None) -> dict:
    """What _report saved in a checkpoint's directory, on `filesystem` (pyarrow's; None: local disk), read where
    it lies. A Ray Train checkpoint is `load_state(checkpoint.path, checkpoint.filesystem)`: its `as_directory`
    would first copy it to a temporary directory, as it does for any checkpoint not on pyarrow's own local
    filesystem, which ours is not (storage.whole_files).
    Read by torch's weights-only unpickler: a checkpoint holds only tensors and plain values, and a state.pt
    swapped in a shared artifacts directory must not run its payload on the next resume. One it refuses, or
    cannot read, is an InputError of one line naming the file."""
    path = f"{directory}/{STATE}"
    try:
        if filesystem is None:
            return torch.load(path, weights_only=True)
        with filesystem.open_input_file(path) as f:
            return torch.load(f, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError) as e:
        raise InputError(f"{path}: not a checkpoint that can be resumed safely ({_why_refused(e)})") from None


def _why_refused(e: Exception) -> str:
    """torch's refusal runs to a dozen lines of advice (among them: load with weights_only=False, the very
    thing refused here, or allow-list the payload's function); the first sentence of the line naming what it
    refused, else of the first line."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    line = next(
        (line.removeprefix("WeightsUnpickler error: ") for line in lines if line.startswith("WeightsUnpickler error:")),
        lines[0] if lines else type(e).__name__,
    )
    return line.split(". ")[0]


def plain(scores: dict) -> dict:
    """A scorer's values as Python numbers (numpy's float64 and 0-d tensors included), which the weights-only
    unpickler reads back from a checkpoint (it refuses numpy's scalars)."""
    return {k: v.item() if hasattr(v, "item") else v for k, v in scores.items()}
