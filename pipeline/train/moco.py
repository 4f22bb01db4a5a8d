"""MoCo's momentum key encoder (He et al., 2020), as CERT (Fang et al., 2020) trains with it.

The key encoder starts as a copy of the trained (query) encoder, projection head included (MoCo v2
and CERT's builder.py copy the whole network, head and all), and after every optimizer step becomes

    key = m * key + (1 - m) * query

over every parameter; it never gets a gradient. Keys (the positive side of each pair) are embedded
by it, without gradient; `train.memory_bank` then holds MoCo's queue of earlier keys
(pipeline.train.memory_bank), enqueued after each loss, the oldest dropped.

It stays in training mode, as MoCo's does (its dropout draws masks like the query encoder's). MoCo's
batch shuffle only matters for BatchNorm, which a transformer has none of.
"""

from __future__ import annotations

import copy

import torch
from torch import nn


class MomentumEncoder:
    def __init__(self, model: nn.Module, momentum: float):
        if not 0 < momentum < 1:
            raise ValueError(f"momentum must lie in (0, 1), got {momentum}")
        self.momentum = momentum
        self.module = copy.deepcopy(model)
        for p in self.module.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """One EMA step towards `model`'s current weights (call after each optimizer step)."""
        for key, query in zip(self.module.parameters(), model.parameters(), strict=True):
            key.mul_(self.momentum).add_(query.detach(), alpha=1 - self.momentum)

    @torch.no_grad()
    def __call__(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.module(ids, mask)[0]

    def state_dict(self) -> dict:
        return {"module": self.module.state_dict(), "momentum": self.momentum}

    def load_state_dict(self, state: dict) -> None:
        self.module.load_state_dict(state["module"])
