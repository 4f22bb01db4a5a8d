"""The optimizer and the learning-rate schedules: each objective's paper's optimizer over the encoder
(train.optimizer), and its course of the learning rate (train.schedule) as a multiplier of the peak."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from pipeline.train.config import TrainConfig


def make_optimizer(model, cfg: TrainConfig, total_steps: int):
    """AdamW with BERT's two groups (biases and LayerNorm undecayed): torch's, fused into one kernel launch a
    step on a GPU (use_gpu, or a model already placed there; the same update as the per-parameter loop, up to
    rounding), or without bias correction the HF AdamW's update (UncorrectedAdamW). SGD as CERT's MOCO.py
    builds it: one group, every weight decayed."""
    if cfg.optimizer == "sgd":
        optimizer = torch.optim.SGD(
            model.parameters(), lr=cfg.lr, momentum=cfg.sgd_momentum, weight_decay=cfg.weight_decay
        )
    else:
        decay = [p for n, p in model.named_parameters() if p.ndim > 1]
        no_decay = [p for n, p in model.named_parameters() if p.ndim <= 1]
        groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        if cfg.correct_bias:
            fused = bool(cfg.use_gpu or next(model.parameters()).is_cuda) or None
            optimizer = torch.optim.AdamW(groups, lr=cfg.lr, eps=cfg.adam_eps, fused=fused)
        else:
            optimizer = UncorrectedAdamW(groups, lr=cfg.lr, eps=cfg.adam_eps)

    def peak_share(step: int) -> float:
        if cfg.schedule == "constant":  # TSDAE's (sentence-transformers' constantlr, no warmup)
            return 1.0
        if cfg.schedule == "linear":
            return linear_decay(step, total_steps)
        if cfg.schedule == "cosine":
            return cosine(step, total_steps)
        if cfg.schedule == "allennlp-lazy":
            return allennlp_lazy(step, cfg.lr_ratio)
        return slanted_triangular(step, total_steps, cfg.cut_frac, cfg.lr_ratio)

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, peak_share)
    return optimizer, scheduler


class UncorrectedAdamW(torch.optim.Optimizer):
    """transformers' own `AdamW` (since deprecated for torch's) with correct_bias=False, which DeCLUTR's configs
    train with (AllenNLP's `huggingface_adamw`); torch's AdamW always corrects the moments' bias. Per step:
    m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  p -= lr m / (sqrt(v) + eps);  then p -= lr wd p
    (the decay on the updated weights, as HF's). Without the correction the first steps are larger:
    m / sqrt(v) starts at (1 - b1) / sqrt(1 - b2) = 3.2 times the corrected ratio."""

    def __init__(self, params, lr: float, eps: float, betas: tuple[float, float] = (0.9, 0.999)):
        super().__init__(params, {"lr": lr, "eps": eps, "betas": betas, "weight_decay": 0.0})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:  # the state torch's and HF's AdamW keep; "step" counts updates, unused here
                    state.update(step=0, exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p))
                state["step"] += 1
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                p.addcdiv_(m, v.sqrt().add_(group["eps"]), value=-group["lr"])
                if group["weight_decay"]:
                    p.add_(p, alpha=-group["lr"] * group["weight_decay"])


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


def cosine(step: int, total_steps: int) -> float:
    """MoCo v2's cosine schedule (CERT's --cos), per step where CERT's MOCO.py sets it per epoch: half a cosine
    from the peak to 0 at the end."""
    return 0.5 * (1 + math.cos(math.pi * min(step, total_steps) / max(1, total_steps)))


def allennlp_lazy(step: int, ratio: float) -> float:
    """AllenNLP 1.1's slanted_triangular with neither num_steps_per_epoch nor a sized reader (DeCLUTR's lazy
    configs): it takes the steps seen so far as the epoch's, so it is at the peak for the first batch and at
    the bottom, peak / ratio, for every batch after it."""
    return 1.0 if step == 0 else 1 / ratio
