"""The held-out scores of train.select_by heldout-loss: the run's own contrastive loss on pairs of documents it
never trained on (pipeline.augment.heldout), with alignment and uniformity (Wang & Isola, 2020) of their
embeddings beside it.

The loss is the training loss's contrastive term as train.loss, train.temperature and the projection head
define it (so a number comparable with the training curve's contrastive_loss), on the held-out pairs in the
augment stage's order cut into batches of train.batch_size, each batch's other pairs its negatives: no memory
bank, no MoCo queue, no MLM, no dropout (eval mode), float32, and the mean over the batches. Alignment and
uniformity are computed on the exported embedding (pooled, no head), L2-normalised: alignment over every
(anchor, positive) pair, uniformity over every pair of distinct anchors (a SimCSE pair's positive is its
anchor's own sentence, so positives would count sentences twice). Lower is better for all three.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import torch

from pipeline.evaluate.analysis import alignment, uniformity
from pipeline.model.transformer import pool
from pipeline.train.batching import collate
from pipeline.train.losses import LOSSES

COLUMNS = ("heldout_loss", "heldout_alignment", "heldout_uniformity")  # what each evaluation records


def heldout_batches(table: pa.Table, special: dict, max_length: int, batch_size: int) -> list[dict]:
    """The held-out pairs as collate's batches of `batch_size` in order, a short last one dropped as training
    drops one, unless there are fewer pairs than one batch: then they are the one batch."""
    size = min(batch_size, table.num_rows)
    return [
        collate(table.slice(start, size), special, max_length, True)
        for start in range(0, table.num_rows - size + 1, size)
    ]


def _pooled(module, rows: tuple[torch.Tensor, torch.Tensor], device) -> torch.Tensor:
    ids, mask = (t.to(device) for t in rows)
    hidden = module.mlm_model.base_model(input_ids=ids, attention_mask=mask).last_hidden_state
    return pool(hidden, mask, module.pooling).float()


@torch.no_grad()
def heldout_scores(module, batches: list[dict], loss: str, temperature: float) -> dict[str, float]:
    """{heldout_loss, heldout_alignment, heldout_uniformity} of the encoder `module` (a SpanEncoder, in eval
    mode) on `batches` (heldout_batches)."""
    device = next(module.parameters()).device
    head = module.projection if module.projection is not None else (lambda z: z)
    losses, anchors, pairs = [], [], []
    for batch in batches:
        b, p = batch["anchors"][0].size(0), batch["num_positives"]
        a, pos = _pooled(module, batch["anchors"], device), _pooled(module, batch["positives"], device)
        losses.append(float(LOSSES[loss].fn(head(a), head(pos).view(b, p, -1).mean(1), temperature)))
        anchors.append(a.cpu().numpy())
        pairs.append((np.repeat(anchors[-1], p, axis=0), pos.cpu().numpy()))
    x = np.concatenate([left for left, _ in pairs])
    y = np.concatenate([right for _, right in pairs])
    return {
        "heldout_loss": float(np.mean(losses)),
        "heldout_alignment": alignment(x, y),
        "heldout_uniformity": uniformity(np.concatenate(anchors)),
    }
