"""train stage on Ray Train: each objective's contrastive loss (+ MLM where its paper has it) over the augment stage's pairs.

The driver (`run`) starts a TorchTrainer; each worker runs pipeline.train.loop's `train_loop` over its slice
of the pair shards (pipeline.train.shard), whose whole step is pipeline.train.step's `train_step`.
Checkpoints go through `ray.train.report`; a rerun with the same fingerprint resumes from the
latest one (Ray Train restores its run state from the same storage path). With train.eval_every, rank 0
scores the model by train.select_by every eval_every steps (pipeline.train.selection), the latest checkpoint
carries the best-scoring step's weights, and those are exported, with the curves and model card
(pipeline.train.card).
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from pydantic import model_validator

from pipeline.augment.stage import pairs_label
from pipeline.config_base import Strict
from pipeline.errors import InputError
from pipeline.init.stage import init_label
from pipeline.model.transformer import HF_DIR, ST_DIR, export, load_mlm
from pipeline.objectives import objective
from pipeline.ray_session import private_directory, ray_init, started_here
from pipeline.stage import Stage, declared_settings, runtime_defaults, section_from
from pipeline.tokenizer.loading import load_tokenizer
from pipeline.train import devset, resume, selection
from pipeline.train.batching import special_ids
from pipeline.train.card import CARD, train_info, write_card
from pipeline.train.config import STS_DEV, TrainConfig
from pipeline.train.curves import write_curves
from pipeline.train.failures import worker_input_error
from pipeline.train.loop import WORKER, WorkerConfig, load_state, train_loop
from pipeline.train.progress import loss
from pipeline.train.resources import check_before_ray, check_resources
from pipeline.train.step import make_encoder, make_scaler
from storage import DatasetWriter, arrow_filesystem, dataset_parts, read_manifest, remove

if TYPE_CHECKING:
    from pipeline.config import Config

# Ray is imported where the driver uses it (run, checkpoint_config): the stage registry, which imports every
# stage (the CLI, the flows), does not wait for it.

# What TrainConfig's fields declare runtime (how often to log and checkpoint, failures, threads, CPUs).
RUNTIME = runtime_defaults(TrainConfig)
METRICS = "metrics.parquet"
log = logging.getLogger("cpipe")


def instances(cfg: Config, done: dict[str, str]) -> dict[str, str]:
    """One model per run's repeat (pipeline.config.Training), parents first, keyed by its leaderboard row."""
    return {f"train/{row}": row for row in cfg.trainings()}


class TrainSettings(Strict):
    """The train stage's config, typed: the repeat's `train` settings (its runtime ones, which the config keeps under
    "runtime", among them), its dev data (`selection.stage_config`) and how several workers split the pairs."""

    train: TrainConfig
    dev: dict[str, Any] | None = None
    shard: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _runtime_in_train(cls, given: Any) -> Any:
        if not isinstance(given, dict) or not isinstance(given.get("train"), dict):
            return given
        rest = {k: v for k, v in given.items() if k not in RUNTIME}
        return {
            **rest,
            "train": section_from(TrainConfig, given["train"], {k: given[k] for k in RUNTIME if k in given}),
        }


def config(cfg: Config, row: str) -> dict:
    """The repeat's settings (its seed the repeat's) as TrainConfig declares them (pipeline.stage.declared_settings:
    runtime ones apart, those added since at their old value and those that decide nothing left out); a
    dev-selected run's hold its dev data."""
    run = cfg.trainings()[row].config
    settings, runtime_settings = declared_settings(run)
    dev = selection.stage_config(run, cfg.evaluate.data, cfg.evaluate.max_length)
    # Several workers split each batch by rank (pipeline.train.shard) since Ray Data stopped reading the pairs;
    # one worker reads what it read before, so only its runs keep their datasets.
    split = {"shard": "rank slices of each batch"} if run.num_workers > 1 else {}
    return {"train": settings, **({"dev": dev} if dev else {}), **split, "runtime": runtime_settings}


def inputs(cfg: Config, done: dict[str, str], row: str) -> dict[str, str]:
    """The repeat's pairs, and the init stage's model of its seed or, for a continuing run, its parent repeat's."""
    training = cfg.trainings()[row]
    start = f"train/{training.parent}" if training.parent else init_label(training.seed)
    return {"pairs": done[pairs_label(training.config)], "init": done[start]}


def steps_said(rows: int, per_step: int, max_steps: int | None) -> str:
    """The step count and why it is that: max_steps, or one pass over the pairs cutting max_steps short."""
    passes = rows // per_step
    if max_steps and max_steps <= passes:
        return f"{max_steps:,} steps of {per_step:,} pairs (max_steps; the {rows:,} pairs hold {passes:,})"
    cut = f", fewer than max_steps {max_steps:,}" if max_steps else ""
    return f"{passes:,} steps: one pass over {rows:,} pairs at {per_step:,} a step{cut}"


def needs_ray(settings: TrainSettings) -> bool:
    return True  # Ray Train


def check(cfg: Config) -> None:
    """Before any work: every dev-selected run's dev data is found (not when its training starts), and the local
    Ray the run will start can hold every run's workers (a cluster's resources are seen only once connected)."""
    runs = cfg.run_configs()
    for r in runs.values():
        selection.stage_config(r, cfg.evaluate.data, cfg.evaluate.max_length)
    ray = sys.modules.get("ray")  # already up in this process: the stage sees what it is
    if not (cfg.ray.address or os.environ.get("RAY_ADDRESS") or (ray and ray.is_initialized())):
        check_before_ray(runs, cfg.ray.num_cpus, os.cpu_count() or 1, torch.cuda.device_count())


def checkpoint_config():
    """Ray keeps the latest two checkpoints; the latest (which a restart resumes from) carries the best-scoring
    step's weights, so no other need be kept."""
    from ray.train import CheckpointConfig

    return CheckpointConfig(num_to_keep=2)


def _trainer_class():
    from ray.train.torch import TorchTrainer
    from ray.train.v2._internal.execution.failure_handling import DefaultFailurePolicy, FailureDecision

    class UsersFailuresStop(DefaultFailurePolicy):
        def make_decision(self, training_failed_error):
            """A failure of the user's to fix (worker_input_error's) comes back each time Ray Train restarts the
            workers from the latest checkpoint, after training up to the next one: the run stops at once."""
            if worker_input_error(training_failed_error) is not None:
                return FailureDecision.RAISE
            return super().make_decision(training_failed_error)

    class Trainer(TorchTrainer):
        def _initialize_and_run_controller(self, **controller_init_kwargs):
            """The controller with the failure policy above: Ray Train's own cannot be configured to stop."""
            policy = UsersFailuresStop(self.run_config.failure_config)
            return super()._initialize_and_run_controller(**{**controller_init_kwargs, "failure_policy": policy})

        def _register_sigint_handler(self, controller) -> None:
            """Ray Train's Ctrl-C handler replaces the process's own for good (it aborts the run and exits 0,
            and stays installed after fit returns): the caller's handler stays (the CLI's shuts Ray down and
            says where training resumes)."""

        def _create_default_callbacks(self) -> list:
            """Without Ray Train's placement group cleaner on a local instance we started: the cleaner (a detached
            actor) asks Ray's state API whether the controller lives, and that API, given no address there, asks
            whichever Ray instance it finds on the host. Beside another one (a second run, a test worker's) it
            finds no such controller and removes the live run's placement group, and the workers die at start
            ("Destroying worker since its placement group was removed", a ControllerError Ray does not retry).
            A local instance's placement groups end with it anyway; on a cluster the cleaner stays."""
            callbacks = super()._create_default_callbacks()
            if not started_here():
                return callbacks
            return [c for c in callbacks if type(c).__name__ != "PlacementGroupCleanerCallback"]

    return Trainer


def _torch_config(directory: str):
    """The workers' process group (gloo) on a local instance we started, met through a FileStore in the instance's
    private `directory`, which only this user reaches: Ray's own rendezvous, rank 0's TCPStore, listens on every
    interface (torch takes no address to bind), and whoever reached it could join the group or set the keys the
    workers read. Gloo's own sockets go on the loopback interface, not the one the hostname resolves to."""
    import ray
    from ray.train.torch import TorchConfig
    from ray.train.torch.config import _set_torch_distributed_env_vars, _setup_torch_process_group, _TorchBackend

    def join(rank: int, world_size: int, store: str, timeout_s: int) -> None:
        os.environ["GLOO_SOCKET_IFNAME"] = socket.if_indextoname(1)  # the loopback's index on Linux
        _setup_torch_process_group("gloo", rank, world_size, f"file://{store}", timeout_s)

    class Backend(_TorchBackend):
        def on_start(self, worker_group, backend_config) -> None:
            """Ray's on_start for its worker groups, with the store a new file each time the workers start."""
            self.store = f"{directory}/rendezvous-{uuid.uuid4().hex}"
            worker_group.execute(_set_torch_distributed_env_vars)
            n = len(worker_group)
            joined = [
                worker_group.execute_single_async(i, join, i, n, self.store, backend_config.timeout_s) for i in range(n)
            ]
            ray.get(joined)

        def on_shutdown(self, worker_group, backend_config) -> None:
            try:
                super().on_shutdown(worker_group, backend_config)
            finally:
                Path(self.store).unlink(missing_ok=True)

    class Config(TorchConfig):
        @property
        def backend_cls(self):
            return Backend

    return Config(backend="gloo")


def run(settings: TrainSettings, inputs: dict[str, str], out: DatasetWriter) -> None:
    import ray
    from ray.train import FailureConfig, LoggingConfig, RunConfig, ScalingConfig, TrainingFailedError

    cfg = settings.train
    pairs = inputs["pairs"]
    rows = read_manifest(pairs)["rows"]
    per_step = cfg.batch_size * cfg.grad_accumulation
    total_steps = min(rows // per_step, cfg.max_steps or rows)
    if total_steps < 1:
        raise InputError(
            f"train: {rows} pairs are fewer than one step of {per_step} "
            f"(batch_size {cfg.batch_size} x grad_accumulation {cfg.grad_accumulation})"
        )
    if not cfg.use_gpu:
        make_scaler(cfg.precision, "cpu")  # a precision the CPU cannot run fails here, before Ray starts
    ray_init(None, None)  # a no-op when the caller already connected to Ray
    check_resources(cfg, ray.cluster_resources(), started_here())
    tokenizer = load_tokenizer(f"{inputs['init']}/{HF_DIR}")
    special = special_ids(tokenizer, cfg.max_length)
    dev = selection.load(cfg, settings.dev, pairs, special)
    columns = objective(cfg.objective).columns(cfg.contrastive, cfg.mlm)
    # CLEAR's MLM term reads the original sentences, which pairs built before they were kept lack.
    if "original_ids" in columns and "original_ids" not in {f["name"] for f in read_manifest(pairs)["schema"] or []}:
        raise InputError(
            f"train: {pairs} has no original_ids column, which CLEAR's MLM reads; "
            "rebuild the augment stage, or set mlm: false"
        )
    # Ray Train's run state (checkpoints) lives beside the stages, on the artifacts' filesystem, which
    # every worker of a cluster can reach when it is an object store.
    runs, name = f"{dataset_parts(out.path)[0]}/_ray", f"train-{out.fp}"
    run_dir = f"{runs}/{name}"
    storage_path = fsspec.core.url_to_fs(runs)[1]
    local = None if cfg.use_gpu else private_directory()
    trainer = _trainer_class()(
        train_loop,
        # One object (Ray Train wants a dict around it), in Ray's object store: Ray Train's controller, a process
        # that trains nothing, unpickles train_loop_config, and a WorkerConfig there imported the model code
        # (torch, transformers): 5 s of CPU at every fit's start; only the workers get the object.
        train_loop_config={
            WORKER: ray.put(
                WorkerConfig(
                    train=cfg,
                    init=f"{inputs['init']}/{HF_DIR}",
                    total_steps=total_steps,
                    special=special,
                    dev=dev,
                    pairs=pairs,
                    columns=tuple(columns),
                )
            )
        },
        scaling_config=ScalingConfig(
            num_workers=cfg.num_workers, use_gpu=cfg.use_gpu, resources_per_worker={"CPU": cfg.cpus_per_worker}
        ),
        run_config=RunConfig(
            name=name,
            storage_path=storage_path,
            storage_filesystem=arrow_filesystem(runs),
            checkpoint_config=checkpoint_config(),
            failure_config=FailureConfig(max_failures=cfg.max_failures),
            # Train's own INFO lines (resources requested, each report and checkpoint) are
            # noise on the user's terminal; our steps are logged by the loop.
            logging_config=LoggingConfig(log_level="WARNING"),
        ),
        torch_config=_torch_config(local) if local else None,
    )
    # Ray Train's workers take up to minutes to start and load the pairs before the first step's line.
    log.info(
        "train: %s on %d worker(s), %s; starting them...",
        steps_said(rows, per_step, cfg.max_steps),
        cfg.num_workers,
        cfg.precision,
    )
    if resume.started_over(run_dir):
        log.warning(
            "train: %s/%s could not be read (a stop left it empty): the run starts over from step 0",
            run_dir,
            resume.SNAPSHOT,
        )
    if (latest := resume.latest_checkpoint(run_dir)) is not None:
        # Read here first: a checkpoint refused (a payload, a damaged file) inside the workers would fail each of
        # Ray's retries in turn and end in its traceback, not the one line naming the file.
        load_state(f"{storage_path}/{name}/{latest}", arrow_filesystem(runs))
    resume.started(run_dir)
    try:
        result = trainer.fit()
    except TrainingFailedError as e:
        if (user := worker_input_error(e)) is not None:
            raise user from None
        raise
    resume.finished(run_dir)  # not on an exception: a stopped run's step is read after it
    saved = load_state(result.checkpoint.path, result.checkpoint.filesystem)  # the latest: the whole run's metrics
    mlm_model = load_mlm(f"{inputs['init']}/{HF_DIR}")
    # The trained modules (the head, TSDAE's decoder) to load the checkpoint into; the encoder alone is exported.
    encoder = make_encoder(mlm_model, cfg.model_copy(update={"compile": False, "packing": False}))
    if dev is None:
        encoder.load_state_dict(saved["model"])
    else:
        best = saved["best"]
        encoder.load_state_dict(best["model"])
        by = dev["by"]
        chosen = selection.label(by, best["score"], dev["task"].kind if "task" in dev else None)
        out.extra.update(
            {
                "best_step": best["step"],
                "select_by": by,
                "best_score": best["score"],
                "selected_by": chosen,
                **({"best_dev_spearman": best["score"]} if by == STS_DEV else {}),
            }
        )
        log.info("train: exporting step %d, by %s", best["step"], chosen)
    # The projection head stays behind, unless the objective evaluates through it (keep_head); TSDAE's decoder always.
    export(encoder.mlm_model, tokenizer, out.local_dir, cfg.pooling, encoder.projection if cfg.keep_head else None)
    metrics = pa.Table.from_pylist(saved["metrics"])
    pq.write_table(metrics, f"{out.local_dir}/{METRICS}")
    write_curves(saved["metrics"], out.local_dir)
    last = saved["metrics"][-1]
    out.extra.update({"steps": saved["step"], "final_loss": last["loss"], "train_seconds": last["seconds"]})
    log.info("train: %d steps in %.0fs, final loss %s", saved["step"], last["seconds"], loss(last["loss"]))
    out.extra["card"] = train_info(
        cfg, inputs, out.extra, encoder.mlm_model.config, f"{out.local_dir}/{ST_DIR}"
    )  # kept in the manifest for the leaderboard's rewrite
    write_card(f"{out.local_dir}/{ST_DIR}", out.extra["card"])
    out.rewritten.add(f"{ST_DIR}/{CARD}")  # the leaderboard writes the model's scores into it
    # Ray's run state has served its purpose (resuming); the dataset holds the result.
    remove(run_dir)


# 3: with eval_every, the export is the checkpoint with the best dev score, not the last;
# curves and a model card beside the model. 4: rows encoded in length-sorted blocks (less padding
# computed, the same losses up to rounding); metrics count padded_tokens besides the real tokens;
# log_every, checkpoint_every, max_failures, torch_threads and cpus_per_worker left the fingerprint (RUNTIME).
# 5: blocks only with train.block_tokens (an H100 ran the default 4096 1.32x slower than one padded block);
# train.packing. 6: train.keep_head exports the head as Dense modules (simcse-sup); hard negatives.
STAGE = Stage(
    name="train",
    version="6",
    flow="train",
    section="train",
    config=config,
    inputs=inputs,
    instances=instances,
    run=run,
    settings=TrainSettings,
    runtime=RUNTIME,
    check=check,
    needs_ray=needs_ray,
    describe=devset.selected,
)
