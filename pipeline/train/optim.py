"""The optimizer and the learning-rate schedules: AdamW over the encoder, and each objective's paper's
course of the learning rate (train.schedule) as a multiplier of the peak."""

from __future__ import annotations

import torch


def make_optimizer(model, cfg: dict, total_steps: int):
    """AdamW, fused into one kernel launch a step on a GPU (use_gpu, or a model already placed there; the
    same update as the per-parameter loop, up to rounding); torch's default implementation on CPU."""
    decay = [p for n, p in model.named_parameters() if p.ndim > 1]
    no_decay = [p for n, p in model.named_parameters() if p.ndim <= 1]  # biases and LayerNorm, as BERT
    fused = bool(cfg["use_gpu"] or next(model.parameters()).is_cuda) or None
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": cfg["weight_decay"]},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=cfg["lr"], fused=fused)

    def peak_share(step: int) -> float:
        if cfg["schedule"] == "constant":  # TSDAE's (sentence-transformers' constantlr, no warmup)
            return 1.0
        if cfg["schedule"] == "linear":
            return linear_decay(step, total_steps)
        return slanted_triangular(step, total_steps, cfg["cut_frac"], cfg["lr_ratio"])

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, peak_share)
    return optimizer, scheduler


def slanted_triangular(step: int, total_steps: int, cut_frac: float, ratio: float) -> float:
    """ULMFiT's schedule (Howard & Ruder, 2018, eq. 3) as a multiplier of the peak learning rate."""
    cut = max(1, int(total_steps * cut_frac))
    if step < cut:
        p = step / cut
    else:
        p = 1 - (step - cut) / max(1, cut * (1 / cut_frac - 1))
    return (1 + max(p, 0.0) * (ratio - 1)) / ratio


def linear_decay(step: int, total_steps: int) -> float:
    """The HF Trainer's default schedule (get_linear_schedule_with_warmup, no warmup), as SimCSE trains: from the
    peak learning rate down to 0 at the last step, as a multiplier of the peak."""
    return max(0.0, 1 - step / max(1, total_steps))
