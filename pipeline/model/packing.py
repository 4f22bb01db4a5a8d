"""Packed sequences: a batch's rows as one sequence of real tokens, each row attending only to itself.

Padding a batch of spans to its longest row spends compute on padding (about half of a DeCLUTR step at the
paper's span lengths). Packing lays the rows' real tokens end to end, numbers positions from each row's
start, and computes attention per row through a nested jagged tensor: PyTorch's scaled_dot_product_attention
on it runs Flash attention's variable-length kernel on a GPU (attention dropout included, which the plain
varlen kernels lack) and the math path on CPU. Everything else in a transformer layer works token by token,
so it neither sees nor computes padding. The mathematics is the padded encoder's: each row's hidden states
are the ones it would get alone (tests/test_padding_free.py checks loss and gradients against padding).

The attention function is registered with transformers under PACKED and serves unpacked calls (no offsets
given) as transformers' SDPA does, with SDPA's padding mask, so one model runs both ways.
"""

from __future__ import annotations

import itertools
import logging
import warnings

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

PACKED = "cpipe_packed"
# SDPA's CPU path on a jagged tensor builds a strided nested one internally, which warns on every call.
warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors is in prototype stage")
# nested_tensor_from_jagged asks torch.fx whether it is being traced, which logs an API deprecation once.
logging.getLogger("torch.fx._symbolic_trace").setLevel(logging.ERROR)


def packed_attention(
    module: nn.Module,
    query,
    key,
    value,
    attention_mask,
    dropout: float = 0.0,
    scaling: float | None = None,
    cu_seq_lens_q: torch.Tensor | None = None,
    max_length_q: int | None = None,
    min_length_q: int | None = None,
    **kwargs,
):
    """(batch 1, heads, tokens, dim) projections of a packed sequence whose rows start at `cu_seq_lens_q`
    (the longest and shortest rows' lengths given, so that a compiled model reads no tensor's value) ->
    (1, tokens, heads, dim), each row attending within itself. Without offsets: transformers' SDPA."""
    if cu_seq_lens_q is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    return _rowwise(query[0], key[0], value[0], cu_seq_lens_q, max_length_q, min_length_q, dropout, scaling).unsqueeze(
        0
    ), None


# Eager inside a compiled model (one graph break per layer): Dynamo does not trace SDPA on a nested tensor
# (its CPU path reads sizes from tensors), and Flash's kernel gains nothing from compilation.
@torch.compiler.disable
def _rowwise(query, key, value, offsets, longest, shortest, dropout, scaling):
    q, k, v = (
        torch.nested.nested_tensor_from_jagged(
            t.transpose(0, 1), offsets, min_seqlen=shortest, max_seqlen=longest
        ).transpose(1, 2)
        for t in (query, key, value)
    )
    return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, scale=scaling).transpose(1, 2).values()


AttentionInterface.register(PACKED, packed_attention)
AttentionMaskInterface.register(PACKED, sdpa_mask)  # unpacked calls get SDPA's padding mask


def packable(mlm_model: nn.Module) -> bool:
    """Whether the model's attention goes through transformers' attention interface (and so can be packed)."""
    return bool(getattr(type(mlm_model), "_supports_attention_backend", False))


def first_position(mlm_model: nn.Module) -> int:
    """RoBERTa-style embeddings number positions from padding_idx + 1, BERT's from 0."""
    padding_idx = getattr(getattr(mlm_model.base_model, "embeddings", None), "padding_idx", None)
    return padding_idx + 1 if padding_idx is not None else 0


def packed_hidden(mlm_model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The last hidden states of right-padded rows, computed packed, laid back out as (rows, width, hidden)
    with zeros at padding (which pooling and the MLM head never read)."""
    # The rows' lengths are read once (at the step's start the device has little queued to wait for); every
    # index is then built on the host, where boolean indexing on the device would wait for it each time.
    lengths, (rows, width), device = attention_mask.sum(1).tolist(), input_ids.shape, input_ids.device
    starts = [0, *itertools.accumulate(lengths)]
    real = torch.cat([torch.arange(r * width, r * width + n) for r, n in enumerate(lengths)]).to(device)
    columns = torch.cat([torch.arange(n) for n in lengths]).to(device)
    offsets = torch.tensor(starts, dtype=torch.int64).to(device)
    ids = input_ids.flatten().index_select(0, real).unsqueeze(0)
    hidden = mlm_model.base_model(
        input_ids=ids,
        position_ids=(columns + first_position(mlm_model)).unsqueeze(0),
        token_type_ids=torch.zeros_like(ids),
        cu_seq_lens_q=offsets,
        cu_seq_lens_k=offsets,
        max_length_q=max(lengths),
        min_length_q=min(lengths),
    ).last_hidden_state[0]
    return hidden.new_zeros(rows * width, hidden.size(-1)).index_copy(0, real, hidden).view(rows, width, -1)
