"""One optimizer step: `train_step` over a step's micro-batches, each through `accumulate`.

The step: lay out the rows (pipeline.train.batching.step_inputs), zero the gradients, forward and backward
every micro-batch under `autocast` (the encoder only; the losses in float32), GradCache where train.grad_cache
cuts a micro-batch into chunks (pipeline.train.gradcache), MoCo's keys from the momentum encoder
(`embed_keys`), every worker's rows `gather`ed for the contrastive loss; then unscale (fp16's `make_scaler`),
clip, update, advance the schedule and the key encoder, unless fp16's gradients overflowed. TSDAE's step
(`reconstruct`) has no contrastive term: its decoder rebuilds each original sentence from the embedding.
"""

from __future__ import annotations

import warnings
from contextlib import nullcontext

import torch

from pipeline.errors import InputError
from pipeline.model.transformer import SpanEncoder
from pipeline.objectives import objective
from pipeline.train.batching import encode_ranges, length_blocks, padded_tokens, step_inputs
from pipeline.train.config import TrainConfig
from pipeline.train.gradcache import cached_step
from pipeline.train.losses import LOSSES, denoising


def train_step(
    model,
    optimizer,
    scheduler,
    batches,
    cfg: TrainConfig,
    special: dict,
    generator,
    bank=None,
    scaler=None,
    key_encoder=None,
) -> dict:
    """One optimizer step over `batches`: a micro-batch or a list of them (train.grad_accumulation),
    whose gradients add up to those of the step's loss: the micro-batches' mean contrastive loss
    plus MLM's mean over all their masked tokens. `scaler` is the run's make_scaler (needed in fp16);
    `key_encoder` is MoCo's (pipeline.train.moco), which follows the model after each update.
    "tokens" counts the real tokens the encoders saw, "padded_tokens" the slots they computed.
    A step whose fp16 gradients overflowed is skipped, and then neither are the weights updated nor
    the learning-rate schedule advanced (as the HF Trainer and Accelerate do): the schedule counts updates."""
    batches = [batches] if isinstance(batches, dict) else batches
    if scaler is None:
        if cfg.precision == "fp16":
            raise ValueError("fp16 needs the run's GradScaler, kept across steps: pass make_scaler(...)")
        scaler = torch.amp.GradScaler(next(model.parameters()).device.type, enabled=False)
    inputs = [step_inputs(batch, cfg, special, generator) for batch in batches]
    n_masked = sum(int(x["positions"].sum()) for x in inputs if x["positions"] is not None)
    n_targets = target_tokens(inputs, next(model.parameters()).device) if inputs[0]["targets"] is not None else 0
    optimizer.zero_grad(set_to_none=True)
    losses, tokens = (
        {},
        {
            "tokens": sum(int(x["mask"].sum()) + _tokens(x["keys"]) for x in inputs),
            "padded_tokens": sum(padded_tokens(x, cfg) for x in inputs),
        },
    )
    for i, (batch, x) in enumerate(zip(batches, inputs)):
        for name, share in accumulate(
            model,
            batch,
            x,
            cfg,
            n_masked,
            len(batches),
            bank,
            scaler.scale,
            last=i == len(batches) - 1,
            key_encoder=key_encoder,
            n_targets=n_targets,
        ).items():
            losses[name] = losses.get(name, 0.0) + share
    if not losses:  # an MLM-only step that drew no masked token has no gradient to step with
        return {
            "loss": 0.0,
            "grad_norm": 0.0,
            "lr": scheduler.get_last_lr()[0],
            "skipped": True,
            "grad_scale": scaler.get_scale(),
            **tokens,
        }
    scaler.unscale_(optimizer)  # so that the norm is clipped on the true gradients
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
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
    return {
        "loss": sum(values),
        **losses,
        "grad_norm": grad_norm,
        "lr": scheduler.get_last_lr()[0],
        "skipped": skipped,
        "grad_scale": scaler.get_scale(),
        **tokens,
    }


def _tokens(keys) -> int:
    return int(keys[1].sum()) if keys is not None else 0


def accumulate(
    model,
    batch: dict,
    x: dict,
    cfg: TrainConfig,
    n_masked: int,
    k: int,
    bank,
    scale,
    last: bool,
    key_encoder=None,
    n_targets: int = 0,
) -> dict:
    """Forward and backward of one of a step's `k` micro-batches: the rows of step_inputs through the
    encoder; the run's contrastive loss (train.loss) between each anchor and the mean of its positives
    (embedded by the key encoder with MoCo), with the pairs' hard negatives and a memory bank's or MoCo
    queue's negatives if any, plus MLM. Returns the micro-batch's shares of the step's losses (detached, on the device), which its
    backward adds (`scale`d) into `.grad`. With `grad_cache` smaller than its rows, the encoder sees that
    many rows at a time and the gradients are still the whole micro-batch's (pipeline.train.gradcache).
    The rows are those of step_inputs,
    longest first; each range of them the encoder sees is cut into length_blocks, so that it computes
    little padding, and the losses see the embeddings in step_inputs' order."""
    device, n, b = next(model.parameters()).device, x["ids"].size(0), x["anchors"]
    if x["targets"] is not None:
        return {"reconstruction_loss": reconstruct(model, x, cfg, n_targets, scale, last, device)}
    keys = embed_keys(key_encoder, x["keys"], batch["num_positives"], cfg, device) if x["keys"] is not None else None

    def encode(start: int, end: int):
        rows = (slice(start, end), slice(0, x["lengths"][start]))  # the longest row first: none is cut
        # The mask stays on the host: the encoder selects its rows by index, and the labels are picked
        # here, so that no boolean index on the device makes the host wait for the forward.
        positions = x["positions"][rows] if n_masked else None
        # Under DDP, only the step's last backward all-reduces the accumulated gradients.
        sync = last and end == n
        with (
            model.no_sync() if not sync and hasattr(model, "no_sync") else nullcontext(),
            autocast(cfg.precision, device.type),
        ):
            pooled, logits = model(
                x["ids"][rows].to(device),
                x["mask"][rows].to(device),
                positions,
                length_blocks(x["lengths"][start:end], cfg.block_tokens),
            )
        if not n_masked:
            return pooled.float()
        labels = x["original"][rows][positions].to(device)
        return pooled.float(), torch.nn.functional.cross_entropy(logits.float(), labels, reduction="sum") / n_masked

    def contrastive(z: torch.Tensor) -> torch.Tensor:
        p, z = batch["num_positives"], z[x["unsort"].to(z.device)]
        positives = gather(keys if keys is not None else z[b : b + b * p].view(b, p, -1).mean(1))
        negatives = bank.negatives() if bank is not None else None
        if bank is not None:
            bank.push(positives.detach())  # after its use as negatives: a batch is never its own negative
        hard = (
            {}
            if x["hard"] is None
            else {
                "hard_negatives": gather(z[x["hard"] : x["hard"] + b]),
                "hard_negative_weight": cfg.hard_negative_weight,
            }
        )
        loss = LOSSES[cfg.loss].fn(gather(z[:b]), positives, cfg.temperature, negatives, **hard) / k
        return loss if cfg.scale_fix else gradient_scaled(loss, 1 / world_size())

    losses = {}
    if len(encode_ranges(n, cfg)) > 1:
        step = cached_step(encode, n, cfg.grad_cache, contrastive, scale)
        losses["contrastive_loss"] = step.loss
        if n_masked:
            losses["mlm_loss"] = step.extra_loss
    else:
        z, mlm = encode(0, n) if n_masked else (encode(0, n), None)
        if cfg.contrastive:
            losses["contrastive_loss"] = contrastive(z)
        if mlm is not None:
            losses["mlm_loss"] = mlm
        if losses:
            scale(sum(losses.values())).backward()
    return {name: loss.detach() for name, loss in losses.items()}


def reconstruct(model, x: dict, cfg: TrainConfig, n_targets: int, scale, last: bool, device) -> torch.Tensor:
    """TSDAE's forward and backward of one micro-batch: its corrupted sentences encoded, the decoder rebuilding
    the originals from their embeddings. Its share of the step's loss is its summed cross-entropy over the
    tokens of the whole step, every worker's (n_targets), so the step's loss is the token mean over the global
    batch however the tokens fall to workers; DDP averages the workers' gradients, which `world` undoes.
    Returns the share summed over workers (detached): what one worker with the whole batch reports."""
    ids, mask = (t.to(device) for t in x["targets"])
    with (
        model.no_sync() if not last and hasattr(model, "no_sync") else nullcontext(),
        autocast(cfg.precision, device.type),
    ):
        _, logits = model(
            x["ids"].to(device),
            x["mask"].to(device),
            None,
            length_blocks(x["lengths"], cfg.block_tokens),
            targets=(ids, mask),
        )
    loss = denoising(logits.float(), ids, mask) / n_targets
    scale(loss * world_size()).backward()
    share = loss.detach()
    if world_size() > 1:
        torch.distributed.all_reduce(share)
    return share


def target_tokens(inputs: list[dict], device) -> int:
    """The tokens TSDAE's decoder predicts in a step (all but each sentence's first), on every worker."""
    n = torch.tensor(sum(int(x["targets"][1][:, 1:].sum()) for x in inputs), device=device)
    if world_size() > 1:
        torch.distributed.all_reduce(n)
    return int(n)


def embed_keys(key_encoder, keys: tuple, num_positives: int, cfg: TrainConfig, device) -> torch.Tensor:
    """MoCo's keys: each anchor's positives through the momentum encoder, no gradient, averaged; in
    chunks of grad_cache rows where that is set, to bound the forward's memory as the query side's."""
    ids, mask = keys
    chunk = cfg.grad_cache or ids.size(0)
    with autocast(cfg.precision, device.type):
        z = torch.cat(
            [
                key_encoder(ids[i : i + chunk].to(device), mask[i : i + chunk].to(device))
                for i in range(0, ids.size(0), chunk)
            ]
        ).float()
    return z.view(-1, num_positives, z.size(1)).mean(1)


def gradient_scaled(loss: torch.Tensor, factor: float) -> torch.Tensor:
    """`loss`'s value with `factor` times its gradient. train.scale_fix false: DeCLUTR's replicas each
    back-propagated the global contrastive loss into their own rows only, and DDP averaged, so its contrastive
    gradient was 1 / W of the global loss's against MLM's (its model.py, scale_fix false); the logged loss
    stays the loss."""
    return loss * factor + (loss * (1 - factor)).detach()


def world_size() -> int:
    initialized = torch.distributed.is_available() and torch.distributed.is_initialized()
    return torch.distributed.get_world_size() if initialized else 1


def gather(t: torch.Tensor) -> torch.Tensor:
    """Every worker's rows, so negatives span the global batch. The differentiable all_gather sends each
    worker's gradient for every row back to the row's owner; every worker computes the same global
    loss, so a row's gradient arrives world-size times, which DDP's averaging over workers undoes."""
    if world_size() == 1:
        return t
    from torch.distributed.nn.functional import all_gather  # only where torch.distributed is initialised

    return torch.cat(all_gather(t))


DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def autocast(precision: str, device_type: str):
    """The context the encoder's forward runs in (the losses run outside it, in float32). Where
    torch.autocast would warn and fall back to float32, as for a dtype the device lacks, this fails."""
    if precision == "fp32":
        return nullcontext()
    if precision == "bf16" and device_type == "cuda" and not torch.cuda.is_bf16_supported(including_emulation=False):
        raise InputError(
            f"train.precision bf16: {torch.cuda.get_device_name()} has no native bfloat16 "
            "(it needs compute capability 8.0); use fp16"
        )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            return torch.autocast(device_type, dtype=DTYPES[precision])
        except UserWarning as e:
            raise InputError(
                f"train.precision {precision}: torch {torch.__version__} cannot autocast to it on {device_type}: {e}"
            ) from None


def make_scaler(precision: str, device_type: str) -> torch.amp.GradScaler:
    """fp16's loss scaling, a pass-through in bf16 and fp32; fails here if the device cannot run `precision`."""
    autocast(precision, device_type)
    return torch.amp.GradScaler(device_type, enabled=precision == "fp16")


def make_encoder(mlm_model, cfg: TrainConfig) -> SpanEncoder:
    """The encoder a run trains, under torch.compile with train.compile; with its objective's decoder (TSDAE's)."""
    make_decoder = objective(cfg.objective).decoder
    decoder = make_decoder(mlm_model, cfg) if make_decoder is not None else None
    return SpanEncoder(
        mlm_model,
        cfg.pooling,
        cfg.projection,
        compile=cfg.compile,
        packing=cfg.packing,
        projection_dim=cfg.projection_dim,
        decoder=decoder,
    )


def ddp_options(cfg: TrainConfig) -> dict:
    """Without MLM the LM head gets no gradient, nor a projection head without the contrastive loss;
    DDP must be told, or it waits for those gradients forever."""
    return {"find_unused_parameters": not (cfg.mlm and cfg.contrastive)}
