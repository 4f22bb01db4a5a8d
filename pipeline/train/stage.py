"""train stage on Ray Train: each objective's contrastive loss (+ MLM where its paper has it) over the augment stage's pairs.

The driver (`run`) starts a TorchTrainer over a Ray Dataset of the pair shards;
each worker runs `train_loop`, whose whole step is `train_step`. Checkpoints go
through `ray.train.report`; a rerun with the same fingerprint resumes from the
latest one (Ray Train restores its run state from the same storage path). With train.eval_every, rank 0
scores the model on the dev set at every checkpoint (pipeline.train.devset), Ray keeps the best-scoring
checkpoints besides the latest, and the best one is exported.
"""

from __future__ import annotations

import itertools
import logging
import os
import tempfile
import time
import warnings
import zlib
from contextlib import nullcontext

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from transformers.tokenization_utils_base import VERY_LARGE_INTEGER

from pipeline.config import Config, TrainConfig
from pipeline.encoders.exported import embed, eval_length
from pipeline.train.curves import write_curves
# The dev set's scoring (scipy) and the model card (pandas, fastText) are imported where the driver or
# rank 0 uses them: the training step (bench.train_mfu) runs where only torch and transformers are.
from pipeline.corpus.tokenizer import DEL_TOKEN, load_tokenizer
from pipeline.encoders.transformer import HF_DIR, ST_DIR, SpanEncoder, export, load_mlm
from pipeline.errors import InputError
from pipeline.ray_session import ray_init
from pipeline.stage import runtime
from pipeline.train.gradcache import cached_step
from pipeline.train.losses import LOSSES, mask_tokens
from pipeline.train.memory_bank import MemoryBank
from pipeline.train.moco import MomentumEncoder
from pipeline.train.optim import make_optimizer
from storage import arrow_filesystem, read_manifest, remove, shards

# 3: with eval_every, the export is the checkpoint with the best dev score, not the last;
# curves and a model card beside the model. 4: rows encoded in length-sorted blocks (less padding
# computed, the same losses up to rounding); metrics count padded_tokens besides the real tokens;
# log_every, checkpoint_every, max_failures, torch_threads and cpus_per_worker left the fingerprint (RUNTIME).
# 5: blocks only with train.block_tokens (an H100 ran the default 4096 1.32x slower than one padded block);
# train.packing.
NAME, VERSION = "train", "5"
# How often to log and checkpoint, how many failures to survive, threads and CPUs: the same model either way.
# num_workers and use_gpu stay in the fingerprint: the workers split each batch (and seed and shard by rank),
# and a GPU computes other floats. With eval_every, every checkpoint is scored and may be the one exported,
# so checkpoint_every is fingerprinted then.
RUNTIME = {k: TrainConfig.model_fields[k].default
           for k in ("log_every", "checkpoint_every", "max_failures", "torch_threads", "cpus_per_worker")}
SCHEMA = None
METRICS = "metrics.parquet"
log = logging.getLogger("cpipe")


def pad(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    longest = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), longest), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), longest), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.as_tensor(s)
        mask[i, : len(s)] = 1
    return ids, mask


def collate(batch: pa.Table, special: dict, max_length: int, with_positives: bool) -> dict:
    """Wrap each span in <s> ... </s> (BERT: [CLS] ... [SEP]), as the tokenizer does for sentences, cut to
    max_length tokens or the model's position limit, and pad. CLEAR's pairs also hold the original
    sentence (`original_ids`), which its MLM term reads. No token_type_ids: every token is segment 0."""
    max_length = min(max_length, special.get("positions") or max_length)

    def wrap(ids: list[int]) -> list[int]:
        return [special["bos"], *ids[: max_length - 2], special["eos"]]

    anchors = [wrap(a) for a in batch.column("anchor_ids").to_pylist()]
    out = {"anchors": pad(anchors, special["pad"]), "num_positives": 0}
    if with_positives:
        positives = batch.column("positive_ids").to_pylist()
        out["num_positives"] = len(positives[0])
        out["positives"] = pad([wrap(p) for group in positives for p in group], special["pad"])
    if "original_ids" in batch.column_names and batch.column("original_ids").null_count == 0:
        out["originals"] = pad([wrap(o) for o in batch.column("original_ids").to_pylist()], special["pad"])
    return out


def step_inputs(batch: dict, cfg: dict, special: dict, generator) -> dict:
    """The rows the trained encoder embeds: anchors; their positives, unless a momentum encoder embeds
    those (`keys`); for CLEAR's MLM, the original sentences. MLM masks the originals where there are any
    (CLEAR eq. 3: MLM on the original sentence, the contrastive loss between the two unmasked views), else
    the anchors (DeCLUTR). `positions` marks the masked tokens and `original` holds the true ids.
    The rows are sorted longest first (`lengths`), so that consecutive rows encode together with little
    padding (length_blocks); `unsort` puts their embeddings back in the order above."""
    moco = cfg["contrastive"] and cfg["momentum"] is not None
    if cfg["mlm"] and cfg["objective"] == "clear" and "originals" not in batch:
        raise InputError("train: CLEAR's MLM needs the original sentences (the pairs' original_ids); "
                         "rebuild the augment stage, or set mlm: false")
    target = ("originals" if "originals" in batch else "anchors") if cfg["mlm"] else None
    parts = [name for name, wanted in (("anchors", cfg["contrastive"] or target == "anchors"),
                                       ("positives", cfg["contrastive"] and not moco),
                                       ("originals", target == "originals")) if wanted]
    width = max(batch[name][0].size(1) for name in parts)
    ids, masks, originals, positions = [], [], [], []
    for name in parts:
        part, mask = batch[name]
        chosen, corrupted = torch.zeros_like(part, dtype=torch.bool), part
        if name == target:
            corrupted, chosen = mask_tokens(part, maskable(part, mask, special), special["mask"], special["vocab"],
                                            cfg["mlm_probability"], generator)
        ids.append(_widen(corrupted, width, special["pad"]))
        originals.append(_widen(part, width, special["pad"]))
        masks.append(_widen(mask, width, 0))
        positions.append(_widen(chosen, width, False))
    mask = torch.cat(masks)
    lengths = mask.sum(1)
    order = torch.argsort(lengths, descending=True, stable=True)
    return {"ids": torch.cat(ids)[order], "mask": mask[order], "original": torch.cat(originals)[order],
            "positions": torch.cat(positions)[order] if target else None, "lengths": lengths[order].tolist(),
            "unsort": torch.argsort(order), "anchors": batch["anchors"][0].size(0),
            "keys": batch["positives"] if moco else None}


def length_blocks(lengths: list[int], min_tokens: int | None) -> list[tuple[int, int]]:
    """(rows, width) blocks of rows sorted longest first, each padded only to its own longest row: a row
    joins the open block while that block holds fewer than `min_tokens` slots (train.block_tokens), or when
    the row is at least 7/8 of the block's width (little padding); otherwise it opens a new block.
    None: one block, every row padded to the longest."""
    if min_tokens is None:
        return [(len(lengths), lengths[0])] if lengths else []
    blocks: list[list[int]] = []
    for length in lengths:
        if blocks and (blocks[-1][0] * blocks[-1][1] < min_tokens or 8 * length >= 7 * blocks[-1][1]):
            blocks[-1][0] += 1
        else:
            blocks.append([1, length])
    return [(rows, width) for rows, width in blocks]


def encode_ranges(n: int, cfg: dict) -> list[tuple[int, int]]:
    """The row ranges [start, end) the encoder sees at a time: grad_cache's chunks when it caches, else all."""
    if cfg["contrastive"] and cfg["grad_cache"] and cfg["grad_cache"] < n:
        return [(start, min(start + cfg["grad_cache"], n)) for start in range(0, n, cfg["grad_cache"])]
    return [(0, n)]


def padded_tokens(x: dict, cfg: dict) -> int:
    """Token slots the encoders compute for one micro-batch's step_inputs (once each, though GradCache
    encodes every row twice), padding included; against the real tokens, the share spent on padding."""
    slots = sum(x["lengths"]) if cfg["packing"] else sum(
        rows * width for start, end in encode_ranges(len(x["lengths"]), cfg)
        for rows, width in length_blocks(x["lengths"][start:end], cfg["block_tokens"]))
    return slots + (x["keys"][0].numel() if x["keys"] is not None else 0)


def maskable(ids: torch.Tensor, mask: torch.Tensor, special: dict) -> torch.Tensor:
    """Real tokens MLM may choose: never <s>, </s>, nor CLEAR's deletion token, which stands for a
    deleted word and has no original to predict."""
    never = [special[k] for k in ("bos", "eos", "del") if special.get(k) is not None]
    return mask.bool() & ~torch.isin(ids, torch.tensor(never, device=ids.device))


DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def autocast(precision: str, device_type: str):
    """The context the encoder's forward runs in (the losses run outside it, in float32). Where
    torch.autocast would warn and fall back to float32, as for a dtype the device lacks, this fails."""
    if precision == "fp32":
        return nullcontext()
    if precision == "bf16" and device_type == "cuda" and not torch.cuda.is_bf16_supported(including_emulation=False):
        raise InputError(f"train.precision bf16: {torch.cuda.get_device_name()} has no native bfloat16 "
                         "(it needs compute capability 8.0); use fp16")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            return torch.autocast(device_type, dtype=DTYPES[precision])
        except UserWarning as e:
            raise InputError(f"train.precision {precision}: torch {torch.__version__} cannot autocast to it "
                             f"on {device_type}: {e}") from None


def make_scaler(precision: str, device_type: str) -> torch.amp.GradScaler:
    """fp16's loss scaling, a pass-through in bf16 and fp32; fails here if the device cannot run `precision`."""
    autocast(precision, device_type)
    return torch.amp.GradScaler(device_type, enabled=precision == "fp16")


def train_step(model, optimizer, scheduler, batches, cfg: dict, special: dict, generator, bank=None,
               scaler=None, key_encoder=None) -> dict:
    """One optimizer step over `batches`: a micro-batch or a list of them (train.grad_accumulation),
    whose gradients add up to those of the step's loss: the micro-batches' mean contrastive loss
    plus MLM's mean over all their masked tokens. `scaler` is the run's make_scaler (needed in fp16);
    `key_encoder` is MoCo's (pipeline.train.moco), which follows the model after each update.
    "tokens" counts the real tokens the encoders saw, "padded_tokens" the slots they computed.
    A step whose fp16 gradients overflowed is skipped, and then neither are the weights updated nor
    the learning-rate schedule advanced (as the HF Trainer and Accelerate do): the schedule counts updates."""
    batches = [batches] if isinstance(batches, dict) else batches
    if scaler is None:
        if cfg["precision"] == "fp16":
            raise ValueError("fp16 needs the run's GradScaler, kept across steps: pass make_scaler(...)")
        scaler = torch.amp.GradScaler(next(model.parameters()).device.type, enabled=False)
    inputs = [step_inputs(batch, cfg, special, generator) for batch in batches]
    n_masked = sum(int(x["positions"].sum()) for x in inputs if x["positions"] is not None)
    optimizer.zero_grad(set_to_none=True)
    losses, tokens = {}, {"tokens": sum(int(x["mask"].sum()) + _tokens(x["keys"]) for x in inputs),
                          "padded_tokens": sum(padded_tokens(x, cfg) for x in inputs)}
    for i, (batch, x) in enumerate(zip(batches, inputs)):
        for name, share in accumulate(model, batch, x, cfg, n_masked, len(batches), bank, scaler.scale,
                                      last=i == len(batches) - 1, key_encoder=key_encoder).items():
            losses[name] = losses.get(name, 0.0) + share
    if not losses:  # an MLM-only step that drew no masked token has no gradient to step with
        return {"loss": 0.0, "grad_norm": 0.0, "lr": scheduler.get_last_lr()[0], "skipped": True,
                "grad_scale": scaler.get_scale(), **tokens}
    scaler.unscale_(optimizer)  # so that the norm is clipped on the true gradients
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["grad_clip"])
    scale = scaler.get_scale()
    scaler.step(optimizer)  # skips the update if the gradients hold an inf or a NaN (fp16 only)
    scaler.update()
    skipped = scaler.get_scale() < scale
    if not skipped:
        scheduler.step()
        if key_encoder is not None:
            key_encoder.update(getattr(model, "module", model))
    # One device-to-host copy per step, after the update is queued: a float() per loss would stall the
    # host (and the GPU behind it) mid-step.
    *values, grad_norm = torch.stack([*losses.values(), grad_norm.float()]).tolist()
    losses = dict(zip(losses, values))
    return {"loss": sum(values), **losses, "grad_norm": grad_norm, "lr": scheduler.get_last_lr()[0],
            "skipped": skipped, "grad_scale": scaler.get_scale(), **tokens}


def _tokens(keys) -> int:
    return int(keys[1].sum()) if keys is not None else 0


def accumulate(model, batch: dict, x: dict, cfg: dict, n_masked: int, k: int, bank, scale, last: bool,
               key_encoder=None) -> dict:
    """Forward and backward of one of a step's `k` micro-batches: the rows of step_inputs through the
    encoder; the run's contrastive loss (train.loss) between each anchor and the mean of its positives
    (embedded by the key encoder with MoCo), with a memory bank's or MoCo queue's negatives if any, plus
    MLM. Returns the micro-batch's shares of the step's losses (detached, on the device), which its
    backward adds (`scale`d) into `.grad`. With `grad_cache` smaller than its rows, the encoder sees that
    many rows at a time and the gradients are still the whole micro-batch's (pipeline.train.gradcache).
    The rows are those of step_inputs,
    longest first; each range of them the encoder sees is cut into length_blocks, so that it computes
    little padding, and the losses see the embeddings in step_inputs' order."""
    device, n, b = next(model.parameters()).device, x["ids"].size(0), x["anchors"]
    keys = embed_keys(key_encoder, x["keys"], batch["num_positives"], cfg, device) if x["keys"] is not None else None

    def encode(start: int, end: int):
        rows = (slice(start, end), slice(0, x["lengths"][start]))  # the longest row first: none is cut
        # The mask stays on the host: the encoder selects its rows by index, and the labels are picked
        # here, so that no boolean index on the device makes the host wait for the forward.
        positions = x["positions"][rows] if n_masked else None
        # Under DDP, only the step's last backward all-reduces the accumulated gradients.
        sync = last and end == n
        with model.no_sync() if not sync and hasattr(model, "no_sync") else nullcontext(), \
                autocast(cfg["precision"], device.type):
            pooled, logits = model(x["ids"][rows].to(device), x["mask"][rows].to(device), positions,
                                   length_blocks(x["lengths"][start:end], cfg["block_tokens"]))
        if not n_masked:
            return pooled.float()
        labels = x["original"][rows][positions].to(device)
        return pooled.float(), torch.nn.functional.cross_entropy(logits.float(), labels, reduction="sum") / n_masked

    def contrastive(z: torch.Tensor) -> torch.Tensor:
        p, z = batch["num_positives"], z[x["unsort"].to(z.device)]
        positives = gather(keys if keys is not None else z[b:b + b * p].view(b, p, -1).mean(1))
        negatives = bank.negatives() if bank is not None else None
        if bank is not None:
            bank.push(positives.detach())  # after its use as negatives: a batch is never its own negative
        return LOSSES[cfg["loss"]](gather(z[:b]), positives, cfg["temperature"], negatives) / k

    losses = {}
    if len(encode_ranges(n, cfg)) > 1:
        step = cached_step(encode, n, cfg["grad_cache"], contrastive, scale)
        losses["contrastive_loss"] = step.loss
        if n_masked:
            losses["mlm_loss"] = step.extra_loss
    else:
        z, mlm = encode(0, n) if n_masked else (encode(0, n), None)
        if cfg["contrastive"]:
            losses["contrastive_loss"] = contrastive(z)
        if mlm is not None:
            losses["mlm_loss"] = mlm
        if losses:
            scale(sum(losses.values())).backward()
    return {name: loss.detach() for name, loss in losses.items()}


def embed_keys(key_encoder, keys: tuple, num_positives: int, cfg: dict, device) -> torch.Tensor:
    """MoCo's keys: each anchor's positives through the momentum encoder, no gradient, averaged; in
    chunks of grad_cache rows where that is set, to bound the forward's memory as the query side's."""
    ids, mask = keys
    chunk = cfg["grad_cache"] or ids.size(0)
    with autocast(cfg["precision"], device.type):
        z = torch.cat([key_encoder(ids[i:i + chunk].to(device), mask[i:i + chunk].to(device))
                       for i in range(0, ids.size(0), chunk)]).float()
    return z.view(-1, num_positives, z.size(1)).mean(1)


def ddp_options(cfg: dict) -> dict:
    """Without MLM the LM head gets no gradient, nor a projection head without the contrastive loss;
    DDP must be told, or it waits for those gradients forever."""
    return {"find_unused_parameters": not (cfg["mlm"] and cfg["contrastive"])}


def gather(t: torch.Tensor) -> torch.Tensor:
    """Every worker's rows, so negatives span the global batch. The differentiable all_gather sends each
    worker's gradient for every row back to the row's owner; every worker computes the same global
    loss, so a row's gradient arrives world-size times, which DDP's averaging over workers undoes."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()) \
            or torch.distributed.get_world_size() == 1:
        return t
    from torch.distributed.nn.functional import all_gather

    return torch.cat(all_gather(t))


def _widen(t: torch.Tensor, width: int, value) -> torch.Tensor:
    return torch.nn.functional.pad(t, (0, width - t.size(1)), value=value)


def make_encoder(mlm_model, cfg: dict) -> SpanEncoder:
    """The encoder a run trains, under torch.compile with train.compile."""
    return SpanEncoder(mlm_model, cfg["pooling"], cfg["projection"], compile=cfg["compile"], packing=cfg["packing"])


def special_ids(tokenizer, max_length: int | None = None) -> dict:
    """The ids training treats specially; "del" is CLEAR's deletion token, None where the tokenizer has none.
    "positions": the longest input the model takes (the init stage's model_max_length), to which collate
    cuts spans; a train.max_length beyond it is said once, here."""
    positions = tokenizer.model_max_length if tokenizer.model_max_length < VERY_LARGE_INTEGER else None
    if max_length and positions and max_length > positions:
        log.info("train: max_length %d is beyond the model's %d positions; spans are cut to %d tokens",
                 max_length, positions, positions)
    return {"bos": tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.cls_token_id,
            "eos": tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id,
            "pad": tokenizer.pad_token_id, "mask": tokenizer.mask_token_id, "vocab": len(tokenizer),
            "del": tokenizer.convert_tokens_to_ids(DEL_TOKEN) if DEL_TOKEN in tokenizer.get_vocab() else None,
            "positions": positions}


def train_loop(config: dict) -> None:
    """Runs on every Ray Train worker."""
    import ray.train
    import ray.train.torch
    from ray.train.v2._internal.execution import context as train_context

    # Ray 2.60 logs every report ("Reporting training result N: TrainingReport(...)") on a logger named after
    # its module's file, which RunConfig's LoggingConfig does not reach: noise on the user's terminal.
    logging.getLogger(train_context.__file__).setLevel(logging.WARNING)
    cfg = config["train"]
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    torch.set_num_threads(cfg["torch_threads"] or max(1, (os.cpu_count() or 1) // world))
    torch.manual_seed(cfg["seed"] + rank)
    model = make_encoder(load_mlm(config["init"]), cfg)
    model.train()
    optimizer, scheduler = make_optimizer(model, cfg, config["total_steps"])
    bank = MemoryBank(cfg["memory_bank"], model.mlm_model.config.hidden_size) if cfg["memory_bank"] else None
    state = {"step": 0, "metrics": []}
    checkpoint = ray.train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            saved = torch.load(f"{d}/state.pt", weights_only=False)
            model.load_state_dict(saved["model"])
            optimizer.load_state_dict(saved["optimizer"])
            scheduler.load_state_dict(saved["scheduler"])
            torch.set_rng_state(saved["rng"])
            if bank is not None:
                bank.load_state_dict(saved["bank"])
            state = {"step": saved["step"], "metrics": saved["metrics"]}
    model = ray.train.torch.prepare_model(model, parallel_strategy_kwargs=ddp_options(cfg))
    # A copy of the (restored, placed) encoder, as MoCo initialises its key encoder; then its own state.
    key_encoder = MomentumEncoder(getattr(model, "module", model), cfg["momentum"]) if cfg["momentum"] else None
    scaler = make_scaler(cfg["precision"], next(model.parameters()).device.type)
    generator = torch.Generator().manual_seed(cfg["seed"] * 7919 + rank)  # MLM masks
    if checkpoint:
        scaler.load_state_dict(saved["scaler"])
        if key_encoder is not None:
            key_encoder.load_state_dict(saved["key_encoder"])
        generator.set_state(saved["generator"])  # so a resumed run masks as an unbroken one would
    dev = config.get("dev")
    scorer = dev_scorer(model, load_tokenizer(config["init"]), cfg["pooling"], dev) if dev and rank == 0 else None
    micro_batches = ray.train.get_dataset_shard("train").iter_batches(
        batch_size=cfg["batch_size"] // world, drop_last=True, batch_format="pyarrow")
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
            _report(model, optimizer, scheduler, scaler, bank, key_encoder, generator, state, rank)
        if step % cfg["log_every"] == 0 and rank == 0:
            print(f"step {step}/{config['total_steps']} loss {metrics['loss']:.4f} lr {metrics['lr']:.2e}", flush=True)
        waited = time.perf_counter()


def checkpoint_due(step: int, cfg: dict, total_steps: int) -> bool:
    """Every checkpoint_every steps, every eval_every steps and at the last: with eval_every, every checkpoint
    is scored (Ray orders them by the score) and every score checkpointed (so its model can be exported)."""
    return step == total_steps or step % cfg["checkpoint_every"] == 0 or bool(
        cfg["eval_every"] and step % cfg["eval_every"] == 0)


def dev_scorer(model, tokenizer, pooling: str, dev: dict):
    """A function scoring the model as it is now on the dev pairs: the evaluation's tokenisation, the run's
    pooling, eval mode (no dropout), no gradient; training mode is restored after."""
    from pipeline.train.devset import dev_spearman

    module = getattr(model, "module", model)
    encoder = module.mlm_model.base_model
    max_length = eval_length(encoder.config, tokenizer, dev["max_length"])

    def score() -> float:
        module.eval()
        try:
            return dev_spearman(lambda sentences: embed(encoder, tokenizer, sentences, pooling, max_length),
                                dev["subset"])
        finally:
            module.train()

    return score


def grouped(items, k: int):
    """Lists of k consecutive items; a shorter last group is dropped, as Ray drops a short last batch."""
    items = iter(items)
    while len(group := list(itertools.islice(items, k))) == k:
        yield group


def _report(model, optimizer, scheduler, scaler, bank, key_encoder, generator, state: dict, rank: int) -> None:
    import ray.train

    module = model.module if hasattr(model, "module") else model
    with tempfile.TemporaryDirectory() as d:
        checkpoint = None
        if rank == 0:
            torch.save({"model": module.state_dict(), "optimizer": optimizer.state_dict(),
                        "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(),
                        "rng": torch.get_rng_state(), "generator": generator.get_state(),
                        "bank": bank.state_dict() if bank is not None else None,
                        "key_encoder": key_encoder.state_dict() if key_encoder is not None else None, **state},
                       f"{d}/state.pt")
            checkpoint = ray.train.Checkpoint.from_directory(d)
        last = state["metrics"][-1]
        # Only rank 0's metrics reach Ray's checkpoint bookkeeping, and only rank 0 scores the dev set.
        score = {"dev_spearman": last["dev_spearman"]} if last.get("dev_spearman") is not None else {}
        ray.train.report({"step": state["step"], "loss": last["loss"], **score}, checkpoint=checkpoint)


def instances(cfg: Config, done: dict[str, str]) -> dict[str, tuple]:
    """One model per run, parents first."""
    return {f"{NAME}/{name}": (name,) for name in cfg.training_order()}


def config(cfg: Config, name: str) -> dict:
    """The run's settings; a dev-selected run's hold its dev set. init_from stays out: the parent's dataset is an
    input, so its fingerprint is part of the child's, and renaming the parent rebuilds nothing."""
    from pipeline.train import devset

    run = cfg.run_configs()[name]
    settings = run.model_dump(exclude={"init_from"})
    moved = [k for k in RUNTIME if not (k == "checkpoint_every" and run.eval_every)]
    dev = devset.stage_config(settings, cfg.evaluate.data, cfg.evaluate.max_length)
    return {"train": {k: v for k, v in settings.items() if k not in moved}, **({"dev": dev} if dev else {}),
            "runtime": {k: settings[k] for k in moved}}


def inputs(done: dict[str, str], cfg: Config, name: str) -> dict[str, str]:
    """The run's pairs, and the init stage's model or, for a continuing run, its parent's."""
    run = cfg.run_configs()[name]
    return {"pairs": done[f"augment/{run.pairs}"], "init": done[f"{NAME}/{run.init_from}" if run.init_from else "init"]}


def needs_ray(config: dict) -> bool:
    return True  # Ray Train


def dev_set(config: dict) -> dict | None:
    """The dev pairs and the evaluation's max_length, read once here for the workers; None without eval_every."""
    if config["train"]["eval_every"] is None:
        return None
    if not config.get("dev"):
        raise InputError("train: eval_every is set but the stage config names no dev set "
                         "(pipeline.train.devset.stage_config builds it)")
    from pipeline.evaluate.sts import data_hash
    from pipeline.train.devset import read_dev

    subset = read_dev(config["dev"]["file"])
    if data_hash([subset]) != config["dev"]["hash"]:
        raise InputError(f"train: {config['dev']['file']} changed after the run was configured; start it again")
    return {"subset": subset, "max_length": config["dev"]["max_length"]}


def checkpoint_config(scored: bool):
    """Ray keeps the latest checkpoint (which a restart resumes from) whatever the ordering, and besides it the
    best two by dev score when there is one, else the last two."""
    from ray.train import CheckpointConfig

    if not scored:
        return CheckpointConfig(num_to_keep=2)
    return CheckpointConfig(num_to_keep=2, checkpoint_score_attribute="dev_spearman", checkpoint_score_order="max")


def _load(checkpoint) -> dict:
    with checkpoint.as_directory() as d:
        return torch.load(f"{d}/state.pt", weights_only=False)


def run(config: dict, inputs: dict, out) -> None:
    import ray.data
    from ray.train import FailureConfig, LoggingConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from pipeline.train.devset import best
    from pipeline.model.card import train_info, write_card

    cfg = {**runtime(config, RUNTIME), **config["train"]}  # the loop reads both
    pairs = inputs["pairs"]
    rows = read_manifest(pairs)["rows"]
    per_step = cfg["batch_size"] * cfg["grad_accumulation"]
    total_steps = min(rows // per_step, cfg["max_steps"] or rows)
    if total_steps < 1:
        raise InputError(f"train: {rows} pairs are fewer than one step of {per_step} "
                         f"(batch_size {cfg['batch_size']} x grad_accumulation {cfg['grad_accumulation']})")
    if not cfg["use_gpu"]:
        make_scaler(cfg["precision"], "cpu")  # a precision the CPU cannot run fails here, before Ray starts
    tokenizer = load_tokenizer(f"{inputs['init']}/{HF_DIR}")
    dev = dev_set(config)
    ray_init(None, None)  # a no-op when the caller already connected to Ray
    data_context = ray.data.DataContext.get_current()
    data_context.execution_options.preserve_order = True  # batches in the augment stage's order, run after run
    data_context.enable_progress_bars = False  # per-block bars flood the flow's log; steps are logged instead
    columns = ["anchor_ids", "positive_ids"] if cfg["contrastive"] else ["anchor_ids"]
    if cfg["mlm"] and cfg["objective"] == "clear":  # CLEAR's MLM term reads the original sentences
        if "original_ids" not in {f["name"] for f in read_manifest(pairs)["schema"] or []}:
            raise InputError(f"train: {pairs} has no original_ids column, which CLEAR's MLM reads; "
                             "rebuild the augment stage, or set mlm: false")
        columns.append("original_ids")
    dataset = ray.data.read_parquet(shards(pairs), columns=columns, filesystem=arrow_filesystem(pairs))
    # Ray Train's run state (checkpoints) lives beside the stages, on the artifacts' filesystem, which
    # every worker of a cluster can reach when it is an object store.
    runs = f"{out.path.rsplit('/', 2)[0]}/_ray"
    runs_dir = fsspec.core.url_to_fs(runs)[1]
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={"train": cfg, "init": f"{inputs['init']}/{HF_DIR}", "total_steps": total_steps,
                           "special": special_ids(tokenizer, cfg["max_length"]), "dev": dev},
        scaling_config=ScalingConfig(num_workers=cfg["num_workers"], use_gpu=cfg["use_gpu"],
                                     resources_per_worker={"CPU": cfg["cpus_per_worker"]}),
        run_config=RunConfig(name=f"train-{out.fp}", storage_path=runs_dir,
                             storage_filesystem=arrow_filesystem(runs),
                             checkpoint_config=checkpoint_config(dev is not None),
                             failure_config=FailureConfig(max_failures=cfg["max_failures"]),
                             # Train's own INFO lines (resources requested, each report and checkpoint) are
                             # noise on the user's terminal; our steps are logged by the loop.
                             logging_config=LoggingConfig(log_level="WARNING")),
        datasets={"train": dataset},
    )
    log.info("train: %d steps of %d pairs on %d worker(s), %s", total_steps, per_step, cfg["num_workers"],
             cfg["precision"])
    result = trainer.fit()
    saved = _load(result.checkpoint)  # the latest: the whole run's metrics
    mlm_model = load_mlm(f"{inputs['init']}/{HF_DIR}")
    encoder = SpanEncoder(mlm_model, cfg["pooling"], cfg["projection"])
    if dev is None:
        encoder.load_state_dict(saved["model"])
    else:
        chosen = best([{**metrics, "checkpoint": c} for c, metrics in result.best_checkpoints])
        encoder.load_state_dict(_load(chosen["checkpoint"])["model"])
        out.extra.update({"best_step": chosen["step"], "best_dev_spearman": chosen["dev_spearman"]})
        log.info("train: exporting step %d, dev Spearman %.4f", chosen["step"], chosen["dev_spearman"])
    export(encoder.mlm_model, tokenizer, out.local_dir, cfg["pooling"])  # the projection head stays behind
    metrics = pa.Table.from_pylist(saved["metrics"])
    pq.write_table(metrics, f"{out.local_dir}/{METRICS}")
    write_curves(saved["metrics"], out.local_dir)
    last = saved["metrics"][-1]
    out.extra.update({"steps": saved["step"], "final_loss": last["loss"], "train_seconds": last["seconds"]})
    log.info("train: %d steps in %.0fs, final loss %.4f", saved["step"], last["seconds"], last["loss"])
    out.extra["card"] = train_info(cfg, inputs, out.extra, encoder.mlm_model.config)  # kept in the manifest for the leaderboard's rewrite
    write_card(f"{out.local_dir}/{ST_DIR}", out.extra["card"])
    # Ray's run state has served its purpose (resuming); the dataset holds the result.
    remove(f"{runs}/train-{out.fp}")
