"""Batching: the augment stage's rows to the padded tensors the encoder reads.

`special_ids` are the tokenizer's ids that training treats specially; `collate` wraps, cuts and pads a
micro-batch's spans; `step_inputs` lays out the rows one step's encoder embeds (MLM-masked where MLM reads
them, sorted longest first); `length_blocks` and `encode_ranges` cut those rows into what the encoder sees
at a time, and `padded_tokens` counts the slots that computes.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pyarrow as pa
import torch
from transformers.tokenization_utils_base import VERY_LARGE_INTEGER

from pipeline.errors import InputError
from pipeline.objectives import objective
from pipeline.tokenizer.loading import DEL_TOKEN
from pipeline.train.losses import mask_tokens

if TYPE_CHECKING:
    from pipeline.train.config import TrainConfig

log = logging.getLogger("cpipe")


def special_ids(tokenizer, max_length: int | None = None) -> dict:
    """The ids training treats specially; "del" is CLEAR's deletion token, None where the tokenizer has none.
    "positions": the longest input the model takes (the init stage's model_max_length), to which collate
    cuts spans; a train.max_length beyond it is said once, here."""
    positions = tokenizer.model_max_length if tokenizer.model_max_length < VERY_LARGE_INTEGER else None
    if max_length and positions and max_length > positions:
        log.info(
            "train: max_length %d is beyond the model's %d positions; spans are cut to %d tokens",
            max_length,
            positions,
            positions,
        )
    return {
        "bos": tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.cls_token_id,
        "eos": tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id,
        "pad": tokenizer.pad_token_id,
        "mask": tokenizer.mask_token_id,
        "vocab": len(tokenizer),
        "del": tokenizer.convert_tokens_to_ids(DEL_TOKEN) if DEL_TOKEN in tokenizer.get_vocab() else None,
        "positions": positions,
    }


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
    sentence (`original_ids`), which its MLM term reads; supervised SimCSE's a hard negative (`negative_ids`).
    No token_type_ids: every token is segment 0."""
    max_length = min(max_length, special.get("positions") or max_length)

    def wrap(ids: list[int]) -> list[int]:
        return [special["bos"], *ids[: max_length - 2], special["eos"]]

    anchors = [wrap(a) for a in batch.column("anchor_ids").to_pylist()]
    out = {"anchors": pad(anchors, special["pad"]), "num_positives": 0}
    if with_positives:
        positives = batch.column("positive_ids").to_pylist()
        out["num_positives"] = len(positives[0])
        out["positives"] = pad([wrap(p) for group in positives for p in group], special["pad"])
    if with_positives and "negative_ids" in batch.column_names and batch.column("negative_ids").null_count == 0:
        out["negatives"] = pad([wrap(n) for n in batch.column("negative_ids").to_pylist()], special["pad"])
    if "original_ids" in batch.column_names and batch.column("original_ids").null_count == 0:
        out["originals"] = pad([wrap(o) for o in batch.column("original_ids").to_pylist()], special["pad"])
    return out


def step_inputs(batch: dict, cfg: TrainConfig, special: dict, generator) -> dict:
    """The rows the trained encoder embeds: anchors; their positives, unless a momentum encoder embeds
    those (`keys`); hard negatives where the pairs have them (from row `hard`; as cl_forward, the trained
    encoder embeds them); for CLEAR's MLM, the original sentences. MLM masks the originals where there are any
    (CLEAR eq. 3: MLM on the original sentence, the contrastive loss between the two unmasked views), else
    the anchors (DeCLUTR). `positions` marks the masked tokens and `original` holds the true ids.
    TSDAE's positives are the original sentences its decoder rebuilds (`targets`), not encoded.
    The rows are sorted longest first (`lengths`), so that consecutive rows encode together with little
    padding (length_blocks); `unsort` puts their embeddings back in the order above (targets come sorted)."""
    moco = cfg.contrastive and cfg.momentum is not None
    denoise = cfg.contrastive and cfg.loss == "denoising"
    if cfg.mlm and objective(cfg.objective).mlm_on_originals and "originals" not in batch:
        raise InputError(
            "train: CLEAR's MLM needs the original sentences (the pairs' original_ids); "
            "rebuild the augment stage, or set mlm: false"
        )
    target = ("originals" if "originals" in batch else "anchors") if cfg.mlm else None
    parts = [
        name
        for name, wanted in (
            ("anchors", cfg.contrastive or target == "anchors"),
            ("positives", cfg.contrastive and not (moco or denoise)),
            ("negatives", cfg.contrastive and "negatives" in batch),
            ("originals", target == "originals"),
        )
        if wanted
    ]
    width = max(batch[name][0].size(1) for name in parts)
    ids, masks, originals, positions = [], [], [], []
    for name in parts:
        part, mask = batch[name]
        chosen, corrupted = torch.zeros_like(part, dtype=torch.bool), part
        if name == target:
            corrupted, chosen = mask_tokens(
                part, maskable(part, mask, special), special["mask"], special["vocab"], cfg.mlm_probability, generator
            )
        ids.append(_widen(corrupted, width, special["pad"]))
        originals.append(_widen(part, width, special["pad"]))
        masks.append(_widen(mask, width, 0))
        positions.append(_widen(chosen, width, False))
    mask = torch.cat(masks)
    lengths = mask.sum(1)
    hard = sum(batch[name][0].size(0) for name in parts[: parts.index("negatives")]) if "negatives" in parts else None
    order = torch.argsort(lengths, descending=True, stable=True)
    return {
        "ids": torch.cat(ids)[order],
        "mask": mask[order],
        "original": torch.cat(originals)[order],
        "positions": torch.cat(positions)[order] if target else None,
        "lengths": lengths[order].tolist(),
        "unsort": torch.argsort(order),
        "anchors": batch["anchors"][0].size(0),
        "hard": hard,
        "keys": batch["positives"] if moco else None,
        "targets": tuple(t[order] for t in batch["positives"]) if denoise else None,
    }


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


def encode_ranges(n: int, cfg: TrainConfig) -> list[tuple[int, int]]:
    """The row ranges [start, end) the encoder sees at a time: grad_cache's chunks when it caches, else all."""
    if cfg.contrastive and cfg.grad_cache and cfg.grad_cache < n:
        return [(start, min(start + cfg.grad_cache, n)) for start in range(0, n, cfg.grad_cache)]
    return [(0, n)]


def padded_tokens(x: dict, cfg: TrainConfig) -> int:
    """Token slots the encoders compute for one micro-batch's step_inputs (once each, though GradCache
    encodes every row twice), padding included; against the real tokens, the share spent on padding."""
    slots = (
        sum(x["lengths"])
        if cfg.packing
        else sum(
            rows * width
            for start, end in encode_ranges(len(x["lengths"]), cfg)
            for rows, width in length_blocks(x["lengths"][start:end], cfg.block_tokens)
        )
    )
    return slots + (x["keys"][0].numel() if x["keys"] is not None else 0)


def maskable(ids: torch.Tensor, mask: torch.Tensor, special: dict) -> torch.Tensor:
    """Real tokens MLM may choose: never <s>, </s>, nor CLEAR's deletion token, which stands for a
    deleted word and has no original to predict."""
    never = [special[k] for k in ("bos", "eos", "del") if special.get(k) is not None]
    return mask.bool() & ~torch.isin(ids, torch.tensor(never, device=ids.device))


def _widen(t: torch.Tensor, width: int, value) -> torch.Tensor:
    return torch.nn.functional.pad(t, (0, width - t.size(1)), value=value)
