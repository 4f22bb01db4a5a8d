"""Earlier batches' embeddings as extra negatives: cross-batch memory (XBM; Wang et al., 2020), or,
with train.momentum, MoCo's queue of keys (He et al., 2020), whose entries come from the momentum
key encoder (pipeline.train.moco) and so drift slowly by construction.

The bank holds *positives* (in train_step: the mean of each anchor's positive
spans), not anchors, for two reasons. NT-Xent's anchor rows score each anchor
against positives, so bank entries of the same kind compete with the true
positive on equal terms. And with MLM on, anchors are embedded from corrupted
tokens while positives are clean, so positives are the better stand-ins for
"another document".

The entries are detached: they come from earlier versions of the encoder and
get no gradient (XBM's premise is that embeddings drift slowly once training
has settled, so start pushing after the first steps of warm-up).

XBM's bank, and `loss: moco-inbatch`'s queue, start empty. MoCo's queue (`loss: moco`) starts full, as
its builder.py registers it: K random unit vectors, drawn here from the run's seed so that every worker
starts from the same queue and a rerun from the same one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from pipeline.train.config import TrainConfig


class MemoryBank:
    """A FIFO queue of the last `size` embeddings pushed, oldest first."""

    def __init__(self, size: int, dim: int, seed: int | None = None):
        """Empty, or with a seed K = `size` random unit vectors (MoCo's initial queue)."""
        if size < 1:
            raise ValueError(f"memory bank size must be positive, got {size}")
        self.size, self.dim = size, dim
        self.queue = (
            torch.empty(0, dim)
            if seed is None
            else torch.nn.functional.normalize(
                torch.randn(size, dim, generator=torch.Generator().manual_seed(seed)), dim=1
            )
        )

    def __len__(self) -> int:
        return self.queue.size(0)

    def negatives(self) -> torch.Tensor:
        return self.queue

    def push(self, embeddings: torch.Tensor) -> None:
        """Push after the step's loss, so a batch is never its own negative."""
        if embeddings.dim() != 2 or embeddings.size(1) != self.dim:
            raise ValueError(f"expected embeddings of shape (N, {self.dim}), got {tuple(embeddings.shape)}")
        self.queue = torch.cat([self.queue.to(embeddings), embeddings.detach()])[-self.size :]

    def state_dict(self) -> dict:
        return {"queue": self.queue.cpu()}

    def load_state_dict(self, state: dict) -> None:
        if state["queue"].size(1) != self.dim:
            raise ValueError(f"memory bank of dim {self.dim} cannot load one of dim {state['queue'].size(1)}")
        # A bank shrunk since the checkpoint keeps its newest entries.
        self.queue = state["queue"][-self.size :]


def run_bank(cfg: TrainConfig, dim: int) -> MemoryBank | None:
    """The run's bank of `dim`-wide embeddings: none without train.memory_bank; MoCo's random queue with loss moco."""
    if not cfg.memory_bank:
        return None
    return MemoryBank(cfg.memory_bank, dim, seed=cfg.seed if cfg.loss == "moco" else None)
