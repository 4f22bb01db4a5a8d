"""The encoder: a masked-LM transformer whose mean-pooled last layer is the sentence embedding."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import torch
from torch import nn
from transformers import AutoModelForMaskedLM, RobertaConfig

from pipeline.errors import InputError
from pipeline.locate import HF_DIR, ST_DIR
from pipeline.model.head import dense_layers
from pipeline.model.hf_files import no_file_bars, portable_tokenizer, quiet_transformers
from pipeline.model.packing import PACKED, first_position, packable, packed_hidden
from pipeline.model.pooling import pool
from pipeline.tokenizer.loading import base_path
from storage import local_copy

if TYPE_CHECKING:  # init sits right of model in the package order
    from pipeline.init.config import ModelConfig

log = logging.getLogger("cpipe")

# torch.compile's backend for SpanEncoder(compile=True); tests on CPU swap in "aot_eager", which traces the
# same graphs, forward and backward, but skips inductor's C++ code generation (minutes on a small CPU).
COMPILE_BACKEND = "inductor"


def projection_head(kind: str | None, dim: int, out: int | None = None) -> nn.Module | None:
    """A head on the pooled embedding that only the loss sees; the exported encoder does not (the head is
    never saved), which keeps the representation general. "mlp": SimCLR's Linear-ReLU-Linear (CLEAR;
    MoCo v2, as CERT trains); "tanh": SimCSE's MLPLayer, Linear + Tanh; "linear"; "none" or None: no head.
    `out`: the head's output width (MoCo's dim, CERT's 128), `dim` when None."""
    out = out or dim
    if kind in (None, "none"):
        return None
    if kind == "linear":
        return nn.Linear(dim, out)
    if kind == "tanh":
        return nn.Sequential(nn.Linear(dim, out), nn.Tanh())
    if kind == "mlp":
        return nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, out))
    raise ValueError(f"unknown projection head {kind!r}: none, linear, tanh or mlp")


def scratch_config(cfg: ModelConfig, tokenizer) -> RobertaConfig:
    return RobertaConfig(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        intermediate_size=cfg.intermediate_size,
        hidden_dropout_prob=cfg.dropout,
        attention_probs_dropout_prob=cfg.dropout,
        max_position_embeddings=cfg.max_position_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        type_vocab_size=1,
    )


def build_model(cfg: ModelConfig, tokenizer) -> nn.Module:
    """From scratch (seeded) when model.base is null, else the base model's weights, with new embedding
    rows (seeded) when the tokenizer stage added tokens (CLEAR's deletion token) to the base's vocabulary."""
    torch.manual_seed(cfg.seed)
    if not cfg.base:
        return AutoModelForMaskedLM.from_config(scratch_config(cfg, tokenizer))
    model = load_base(cfg.base)
    if len(tokenizer) > model.get_input_embeddings().num_embeddings:
        torch.manual_seed(cfg.seed)
        model.resize_token_embeddings(len(tokenizer))
    return model


def load_base(base: str) -> nn.Module:
    """The base model as a masked LM. A checkpoint without the MLM head (a sentence-transformers model, a
    bare BertModel) gets a freshly initialised one, from the torch seed the caller set; this says so once."""
    with quiet_transformers():
        model, info = AutoModelForMaskedLM.from_pretrained(
            base_path(base), output_loading_info=True, trust_remote_code=False
        )
    head = mlm_head_name(model)
    fresh = sorted(k for k in info["missing_keys"] if k.startswith(f"{head}."))
    if fresh:
        log.info(
            "init: %s has no masked-LM head (%d of its weights missing); MLM trains a freshly initialised %s.%s",
            base,
            len(fresh),
            type(model).__name__,
            head,
        )
    return model


def mlm_head_name(model: nn.Module) -> str:
    """RoBERTa-style models call their masked-LM head lm_head, BERT-style ones cls."""
    for name in ("lm_head", "cls"):
        if isinstance(getattr(model, name, None), nn.Module):
            return name
    raise ValueError(f"{type(model).__name__} has no lm_head/cls masked-LM head")


def position_limit(mlm_model: nn.Module) -> int:
    """The longest input, special tokens included, the position table can index: RoBERTa-style embeddings
    number positions from padding_idx + 1 (two slots of 514 unused), BERT's from 0."""
    return mlm_model.config.max_position_embeddings - first_position(mlm_model)


class SpanEncoder(nn.Module):
    """One forward pass gives pooled embeddings and, at masked positions only, MLM logits.

    Projecting only the masked ~15% of tokens onto the vocabulary saves most of
    the LM head's cost, and one module call keeps DDP to one forward per step.
    `compile` runs the transformer body under torch.compile: the part whose shapes are a chunk's
    (rows, width) and where nearly all the FLOPs are. The head's gather of the masked tokens, whose
    count changes every step, stays eager, so it neither recompiles nor breaks the graph.
    `decoder`: a training-only module reading the embeddings (TSDAE's, pipeline.objectives.tsdae_decoder), run in the
    same forward so that DDP sees one forward a step; like the head, it is never exported.
    """

    def __init__(
        self,
        mlm_model: nn.Module,
        pooling: str = "mean",
        projection: str | None = None,
        compile: bool = False,
        packing: bool = False,
        projection_dim: int | None = None,
        decoder: nn.Module | None = None,
    ):
        super().__init__()
        self.mlm_model = mlm_model
        self.head = getattr(mlm_model, mlm_head_name(mlm_model))
        self.pooling = pooling
        self.projection = projection_head(projection, mlm_model.config.hidden_size, projection_dim)
        self.decoder = decoder
        self.packing = packing
        if packing:
            if not packable(mlm_model):
                raise InputError(
                    f"train.packing: {type(mlm_model).__name__} does not use transformers' attention "
                    "interface, which packing needs; set train.packing: false"
                )
            mlm_model.set_attn_implementation(PACKED)  # not saved: an exported model loads with the default
        if compile:
            # In place (nn.Module.compile): parameter names, state_dict and export stay the model's own.
            # Dynamic shapes, as chunks' widths and rows change every step.
            mlm_model.base_model.compile(dynamic=True, backend=COMPILE_BACKEND)

    def forward(self, input_ids, attention_mask, mlm_positions=None, chunks=None, targets=None):
        """(pooled embeddings, projected when there is a head; MLM logits at `mlm_positions`, in their
        row-major order), or with `targets` (ids, mask) the decoder's logits for them in place of MLM's.
        `chunks`: (rows, width) pairs splitting the rows, in order, into consecutive blocks each encoded apart,
        cut to its first `width` columns; when the rows are right-padded and no row of a block is longer than
        its width, only padding is left out, and neither attention (which masks it), position ids (counted from
        the left) nor pooling (over real tokens) change.
        None, or packing: every row at once, at full width."""
        pooled, logits, start = [], [], 0
        for rows, width in (None if self.packing else chunks) or [(input_ids.size(0), input_ids.size(1))]:
            block = slice(start, start + rows)
            # Copies with their own strides and offset 0: a compiled encoder guards on both, which cuts vary.
            ids, mask = (
                t[block, :width].clone(memory_format=torch.contiguous_format) for t in (input_ids, attention_mask)
            )
            hidden = (
                packed_hidden(self.mlm_model, ids, mask)
                if self.packing
                else self.mlm_model.base_model(input_ids=ids, attention_mask=mask).last_hidden_state
            )
            pooled.append(pool(hidden, mask, self.pooling))
            if mlm_positions is not None:
                # Rows picked by index, found where the mask is: on the host, the device never waits on it.
                picked = mlm_positions[block, :width].flatten().nonzero().squeeze(1).to(hidden.device)
                logits.append(self.head(hidden.flatten(0, 1).index_select(0, picked)))
            start += rows
        pooled = torch.cat(pooled) if len(pooled) > 1 else pooled[0]
        if self.projection is not None:
            pooled = self.projection(pooled)
        if targets is not None:
            return pooled, self.decoder(pooled, *targets)
        if mlm_positions is None:
            return pooled, None
        return pooled, torch.cat(logits) if len(logits) > 1 else logits[0]


def export(mlm_model: nn.Module, tokenizer, out_dir: str, pooling: str = "mean", head: nn.Module | None = None) -> None:
    """Save `hf/` (AutoModelForMaskedLM + tokenizer) and `sentence-transformers/` (Transformer + Pooling, and
    `head` as Dense modules after them where one is kept); the pooling and the head are recorded in the latter,
    where our Encoder and sentence-transformers both read them."""
    from sentence_transformers import SentenceTransformer, models

    hf = f"{out_dir}/{HF_DIR}"
    # The MLM checkpoint loaded as a bare encoder reports its unused LM head; that is expected here.
    with quiet_transformers():
        mlm_model.save_pretrained(hf)
        tokenizer.save_pretrained(hf)
        max_seq_length = min(tokenizer.model_max_length, position_limit(mlm_model))
        word = models.Transformer(hf, max_seq_length=max_seq_length)
        pooler = models.Pooling(word.get_embedding_dimension(), pooling_mode=pooling)
        dense = [
            models.Dense(
                linear.in_features,
                linear.out_features,
                bias=linear.bias is not None,
                activation_function=activation,
                init_weight=linear.weight.detach().clone(),
                init_bias=None if linear.bias is None else linear.bias.detach().clone(),
            )
            for linear, activation in (dense_layers(head) if head is not None else [])
        ]
        SentenceTransformer(modules=[word, pooler, *dense], device="cpu").save(f"{out_dir}/{ST_DIR}")
    for folder in (hf, f"{out_dir}/{ST_DIR}"):
        portable_tokenizer(folder)


def load_mlm(path: str) -> nn.Module:
    with local_copy(path) as local, no_file_bars():  # any fsspec URL, as load_tokenizer
        return AutoModelForMaskedLM.from_pretrained(local, trust_remote_code=False)
