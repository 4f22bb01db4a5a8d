"""The DeCLUTR objective: NT-Xent over 2AN span embeddings, plus masked language modelling."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def nt_xent(anchors: torch.Tensor, positives: torch.Tensor, temperature: float) -> torch.Tensor:
    """Symmetric NT-Xent (SimCLR's; DeCLUTR eq. 2) with cosine similarity.

    Row i of `anchors` and row i of `positives` are a positive pair; every other
    of the 2B embeddings is a negative for both. The mean over all 2B terms.
    """
    b = anchors.size(0)
    z = F.normalize(torch.cat([anchors, positives]), dim=-1)
    sim = (z @ z.T) / temperature
    sim = sim.masked_fill(torch.eye(2 * b, dtype=torch.bool, device=z.device), float("-inf"))
    targets = torch.cat([torch.arange(b, 2 * b), torch.arange(0, b)]).to(z.device)
    return F.cross_entropy(sim, targets)


def mask_tokens(input_ids: torch.Tensor, maskable: torch.Tensor, mask_id: int, vocab_size: int,
                probability: float, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masking: choose `probability` of the maskable tokens; of those 80% become
    <mask>, 10% a random token, 10% stay. Returns the corrupted ids and the chosen positions."""
    def draw(p: float, shape=input_ids.shape) -> torch.Tensor:
        return torch.rand(shape, generator=generator, device=input_ids.device) < p

    chosen = draw(probability) & maskable
    replaced = chosen & draw(0.8)
    randomised = chosen & ~replaced & draw(0.5)
    corrupted = input_ids.clone()
    corrupted[replaced] = mask_id
    corrupted[randomised] = torch.randint(vocab_size, input_ids.shape, generator=generator,
                                          device=input_ids.device)[randomised]
    return corrupted, chosen


def slanted_triangular(step: int, total_steps: int, cut_frac: float, ratio: float) -> float:
    """ULMFiT's schedule (Howard & Ruder, 2018, eq. 3) as a multiplier of the peak learning rate."""
    cut = max(1, int(total_steps * cut_frac))
    if step < cut:
        p = step / cut
    else:
        p = 1 - (step - cut) / max(1, cut * (1 / cut_frac - 1))
    return (1 + max(p, 0.0) * (ratio - 1)) / ratio
