"""Load an exported encoder and embed sentences: the export's pooling (and Dense head, where it keeps one),
length-sorted batches.

torch and transformers are imported when a model loads or embeds: `cpipe embed` and `cpipe export` import this
module and check their arguments first."""

from __future__ import annotations

import functools
import json
import os
from typing import TYPE_CHECKING

import numpy as np

from pipeline.errors import InputError
from pipeline.locate import ST_DIR, hf_dir, resolve, why_not_a_model
from pipeline.model.head import load_head
from pipeline.model.hf_files import quiet_transformers
from pipeline.model.pooling import pool
from pipeline.progress import tracked
from storage import local_copy

if TYPE_CHECKING:
    import torch


def st_dir(path: str) -> str | None:
    """A model directory's sentence-transformers modules: our export's `sentence-transformers/`, or the
    directory itself when it is one; None for a plain Hugging Face model."""
    return next((d for d in (f"{path}/{ST_DIR}", path) if os.path.isfile(f"{d}/modules.json")), None)


def export_pooling(path: str) -> str | None:
    """The pooling a sentence-transformers export (ours, or any ST directory) declares, if any."""
    for st in (f"{path}/{ST_DIR}", path):
        config = f"{st}/1_Pooling/config.json"
        if os.path.isfile(config):
            with open(config) as f:
                settings = json.load(f)
            # sentence-transformers >= 5 writes "pooling_mode"; older versions one flag per mode.
            mode = settings.get("pooling_mode") or next(
                (
                    k.removeprefix("pooling_mode_").removesuffix("_tokens").removesuffix("_token")
                    for k, on in settings.items()
                    if k.startswith("pooling_mode_") and on
                ),
                "mean",
            )
            if mode not in ("mean", "cls"):
                raise InputError(f"{config}: pooling {mode!r} is not supported here (mean or cls)")
            return mode
    return None


def _model_limit(config, tokenizer) -> int:
    """The longest input the model takes: RoBERTa-style models keep two position slots for padding."""
    positions = getattr(config, "max_position_embeddings", None) or tokenizer.model_max_length
    return min(tokenizer.model_max_length, positions - (2 if "roberta" in config.model_type else 0))


def eval_length(model_config, tokenizer, max_length: int) -> int:
    """The length sentences are truncated to: evaluate.max_length, within the model's limit."""
    return min(max_length, _model_limit(model_config, tokenizer))


def _inference(fn):
    """`fn` under torch.inference_mode(), as its decorator would run it; torch is imported at the call."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        import torch

        with torch.inference_mode():
            return fn(*args, **kwargs)

    return run


@_inference
def embed(
    model,
    tokenizer,
    sentences: list[str],
    pooling: str,
    max_length: int,
    batch_size: int = 128,
    head: torch.nn.Module | None = None,
) -> np.ndarray:
    """Sentence embeddings from a bare encoder (AutoModel, or an MLM's base_model), pooled by `pooling`,
    then through `head` where the model keeps one (pipeline.model.head)."""
    device = next(model.parameters()).device
    # Sorting by length keeps padding, and so wasted compute, small; rows go back in input order.
    order = np.argsort([-len(s) for s in sentences], kind="stable")
    out = np.empty((len(sentences), model.config.hidden_size), dtype=np.float32)
    for i in tracked(range(0, len(sentences), batch_size), "embedding", "batches"):
        idx = order[i : i + batch_size]
        enc = tokenizer(
            [sentences[j] for j in idx], padding=True, truncation=True, max_length=max_length, return_tensors="pt"
        ).to(device)
        hidden = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
        pooled = pool(hidden, enc["attention_mask"], pooling)
        vectors = (head(pooled) if head is not None else pooled).float().cpu().numpy()
        if vectors.shape[1] != out.shape[1]:  # a head of another width than the encoder's
            out = np.empty((len(sentences), vectors.shape[1]), dtype=np.float32)
        out[idx] = vectors
    return out


class Encoder:
    """Any Hugging Face encoder directory (ours under `hf/`, or a plain model dir), or hub name
    (pipeline.locate).

    `pooling` defaults to what the export declares, else mean: pass "cls" for
    a plain model whose [CLS] state is the sentence embedding.
    """

    def __init__(self, path: str, max_length: int = 128, device: str | None = None, pooling: str | None = None):
        import torch
        from transformers import AutoModel, AutoTokenizer

        with local_copy(resolve(path)) as local:  # a model on any fsspec URL is read whole into memory
            if why := why_not_a_model(local):
                raise InputError(why if local == path else f"{path}: {why}")
            hf = hf_dir(local)
            self.tokenizer = AutoTokenizer.from_pretrained(hf, trust_remote_code=False)
            # Its load report lists an MLM export's unused LM head and the pooler no pooling here reads, as
            # faults; a missing weight of the encoder itself is one, and is said here instead.
            with quiet_transformers():
                self.model, info = AutoModel.from_pretrained(hf, output_loading_info=True, trust_remote_code=False)
            if missing := [k for k in info["missing_keys"] if not k.startswith("pooler.")]:
                raise InputError(
                    f"{path}: {hf} lacks {len(missing)} of the encoder's weights "
                    f"({', '.join(sorted(missing)[:3])}{', ...' if len(missing) > 3 else ''})"
                )
            self.model.eval()
            self.pooling = pooling or export_pooling(local) or "mean"
            modules = st_dir(local)
            self.head = load_head(modules) if modules else None
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.model.to(self.device)
        if self.head is not None:
            self.head.to(self.device)
        self.max_length = eval_length(self.model.config, self.tokenizer, max_length)

    @property
    def parameters(self) -> int:
        # A BERT-style pooler (often freshly initialised when loading an MLM checkpoint) is never
        # used by mean or cls pooling, so it does not count towards the model's size; a kept head does.
        head = sum(p.numel() for p in self.head.parameters()) if self.head is not None else 0
        return head + sum(p.numel() for name, p in self.model.named_parameters() if not name.startswith("pooler."))

    @property
    def dimension(self) -> int:
        """The embeddings' width: the kept head's output, else the encoder's hidden size."""
        import torch

        linears = [m for m in self.head.modules() if isinstance(m, torch.nn.Linear)] if self.head is not None else []
        return linears[-1].out_features if linears else self.model.config.hidden_size

    def encode(self, sentences: list[str], batch_size: int = 128) -> np.ndarray:
        return embed(self.model, self.tokenizer, sentences, self.pooling, self.max_length, batch_size, self.head)

    @_inference
    def token_vectors(self, sentences: list[str], batch_size: int = 128) -> list[np.ndarray]:
        """Each sentence's last-layer token states in context, special tokens and padding left out."""
        order = np.argsort([-len(s) for s in sentences], kind="stable")
        out: list[np.ndarray] = [np.empty((0, self.model.config.hidden_size), dtype=np.float32)] * len(sentences)
        for i in tracked(range(0, len(sentences), batch_size), "token states", "batches"):
            idx = order[i : i + batch_size]
            enc = self.tokenizer(
                [sentences[j] for j in idx],
                padding=True,
                truncation=True,
                max_length=self.max_length,
                return_special_tokens_mask=True,
                return_tensors="pt",
            )
            words = (enc["attention_mask"].bool() & ~enc["special_tokens_mask"].bool()).numpy()
            hidden = self.model(
                input_ids=enc["input_ids"].to(self.device), attention_mask=enc["attention_mask"].to(self.device)
            ).last_hidden_state
            hidden = hidden.float().cpu().numpy()
            for row, j in enumerate(idx):
                out[j] = hidden[row][words[row]]
        return out
