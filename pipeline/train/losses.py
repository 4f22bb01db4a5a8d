"""The training losses: the contrastive losses the objectives' papers define, and BERT's masking.

Both contrastive losses score cosine similarities over a temperature and take the
mean cross-entropy of picking each row's positive. They differ in their candidates:

- `nt_xent` (SimCLR's NT-Xent; DeCLUTR eq. 2, CLEAR eq. 2): symmetric. Each of the
  2N embeddings picks its partner among the other 2N-1, so the other rows of its
  own view are negatives too.
- `info_nce` (SimCSE's `cl_forward`): one direction. Each query picks its key among
  the N keys, so N-1 negatives.
- `moco` (MoCo's builder.py, as CERT's MOCO.py trains): one direction, each query
  against its own key (logit 0) and the K queued keys only; the batch's other keys
  are not negatives until they are queued. `moco-inbatch` is `info_nce` over the
  batch's keys and the queue (this project's earlier MoCo).

`negatives` are K further candidates (a memory bank's or MoCo's queue of earlier
keys), added to the anchors'/queries' rows only: they stand in for other positives.
`hard_negatives` (supervised SimCSE: each query's contradiction) are N more candidates
for every query, as `cl_forward` scores them; `hard_negative_weight` is added to the
logit of each query's own one (a log-space weight, after the temperature, as there).

Each loss is declared once, in LOSSES (`Loss`): its name, which the train config accepts as `train.loss`, its
function, and what a model card calls it. The config reads it before torch may be imported (pipeline.preflight),
so torch is imported in the functions, not with this module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import torch


def _similarities(rows: torch.Tensor, candidates: torch.Tensor, temperature: float) -> torch.Tensor:
    import torch.nn.functional as F

    return F.normalize(rows, dim=-1) @ F.normalize(candidates.to(rows), dim=-1).T / temperature


def nt_xent(
    anchors: torch.Tensor, positives: torch.Tensor, temperature: float, negatives: torch.Tensor | None = None
) -> torch.Tensor:
    """Row i of `anchors` and of `positives` are a pair; the mean over all 2N rows of -log(partner's share).
    The anchor rows' softmax also runs over `negatives`; the positive rows' over the 2N-1 only."""
    import torch
    import torch.nn.functional as F

    b = anchors.size(0)
    z = torch.cat([anchors, positives])
    sim = _similarities(z, z, temperature).masked_fill(
        torch.eye(2 * b, dtype=torch.bool, device=z.device), float("-inf")
    )
    if negatives is not None and negatives.numel():
        extra = _similarities(anchors, negatives, temperature)
        sim = torch.cat([sim, torch.cat([extra, extra.new_full(extra.shape, float("-inf"))])], dim=1)
    targets = torch.cat([torch.arange(b, 2 * b), torch.arange(0, b)]).to(z.device)
    return F.cross_entropy(sim, targets)


def info_nce(
    queries: torch.Tensor,
    keys: torch.Tensor,
    temperature: float,
    negatives: torch.Tensor | None = None,
    hard_negatives: torch.Tensor | None = None,
    hard_negative_weight: float = 0.0,
) -> torch.Tensor:
    """Row i of `queries` picks key i among all N `keys`, the N `hard_negatives` (if any) and the K
    `negatives`; the mean over the N queries."""
    import torch
    import torch.nn.functional as F

    n = queries.size(0)
    parts = [keys, *(t.to(keys) for t in (hard_negatives, negatives) if t is not None and t.numel())]
    sim = _similarities(queries, torch.cat(parts) if len(parts) > 1 else keys, temperature)
    if hard_negatives is not None and hard_negative_weight:
        own = torch.arange(n, device=sim.device)
        sim = sim.index_put((own, own + keys.size(0)), sim[own, own + keys.size(0)] + hard_negative_weight)
    return F.cross_entropy(sim, torch.arange(n, device=queries.device))


def moco(queries: torch.Tensor, keys: torch.Tensor, temperature: float, negatives: torch.Tensor) -> torch.Tensor:
    """Row i of `queries` picks key i, at logit 0, among [key i, the K `negatives`]; the mean over the N queries."""
    import torch
    import torch.nn.functional as F

    q, k = F.normalize(queries, dim=-1), F.normalize(keys.to(queries), dim=-1)
    logits = torch.cat([(q * k).sum(-1, keepdim=True), _similarities(q, negatives, 1.0)], dim=1) / temperature
    return F.cross_entropy(logits, torch.zeros(q.size(0), dtype=torch.long, device=q.device))


def denoising(logits: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """TSDAE's reconstruction loss, summed: the cross-entropy of each original token after the first
    (<s>/[CLS], the decoder's start) under the decoder's logits from the position before it (pipeline.
    objectives.tsdae_decoder), padding left out. The caller divides by the tokens counted over every worker."""
    import torch.nn.functional as F

    labels = ids[:, 1:].masked_fill(mask[:, 1:] == 0, -100)
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="sum")


def mask_tokens(
    input_ids: torch.Tensor,
    maskable: torch.Tensor,
    mask_id: int,
    vocab_size: int,
    probability: float,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masking: choose `probability` of the maskable tokens; of those 80% become
    <mask>, 10% a random token, 10% stay. Returns the corrupted ids and the chosen positions."""
    import torch

    def draw(p: float, shape=input_ids.shape) -> torch.Tensor:
        return torch.rand(shape, generator=generator, device=input_ids.device) < p

    chosen = draw(probability) & maskable
    replaced = chosen & draw(0.8)
    randomised = chosen & ~replaced & draw(0.5)
    corrupted = input_ids.clone()
    corrupted[replaced] = mask_id
    corrupted[randomised] = torch.randint(vocab_size, input_ids.shape, generator=generator, device=input_ids.device)[
        randomised
    ]
    return corrupted, chosen


class Loss(NamedTuple):
    name: str  # train.loss
    fn: Callable[..., torch.Tensor]
    label: str  # what the model card's "loss" row says it is (pipeline.train.card)


LOSSES = {
    loss.name: loss
    for loss in (
        Loss("nt-xent", nt_xent, "NT-Xent (symmetric, 2N-2 in-batch negatives)"),
        Loss("info-nce", info_nce, "InfoNCE (one direction, N-1 negatives)"),
        Loss("moco", moco, "MoCo's InfoNCE (each query against its own key and the queue of earlier keys)"),
        Loss("moco-inbatch", info_nce, "InfoNCE against the batch's keys and MoCo's queue of earlier keys"),
        Loss(
            "denoising",
            denoising,
            "the decoder's cross-entropy over the original sentence's tokens (the decoder is not exported)",
        ),
    )
}
