"""A sentence embedding pooled from a transformer's last layer, alike in training, in the exported model and in
the ONNX graph. Tensor methods only: it imports no torch, so the modules that pool check their arguments first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """ "mean" over real tokens (DeCLUTR), or "cls": the first token's state (<s> / [CLS])."""
    return hidden[:, 0] if pooling == "cls" else mean_pool(hidden, attention_mask)
