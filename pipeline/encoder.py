"""Load an exported encoder and embed sentences: mean pooling, length-sorted batches."""

from __future__ import annotations

import os

import numpy as np
import torch
from transformers import AutoModel, AutoTokenizer

from pipeline.model import HF_DIR, mean_pool


class Encoder:
    """Any Hugging Face encoder directory (ours under `hf/`, or a plain model dir), mean-pooled."""

    def __init__(self, path: str, max_length: int = 128, device: str | None = None):
        hf = f"{path}/{HF_DIR}" if os.path.isdir(f"{path}/{HF_DIR}") else path
        self.tokenizer = AutoTokenizer.from_pretrained(hf)
        self.model = AutoModel.from_pretrained(hf).eval()
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.model.to(self.device)
        self.max_length = max_length

    @property
    def parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    @torch.inference_mode()
    def encode(self, sentences: list[str], batch_size: int = 128) -> np.ndarray:
        # Sorting by length keeps padding, and so wasted compute, small; rows go back in input order.
        order = np.argsort([-len(s) for s in sentences], kind="stable")
        out = np.empty((len(sentences), self.model.config.hidden_size), dtype=np.float32)
        for i in range(0, len(sentences), batch_size):
            idx = order[i : i + batch_size]
            enc = self.tokenizer([sentences[j] for j in idx], padding=True, truncation=True,
                                 max_length=self.max_length, return_tensors="pt").to(self.device)
            hidden = self.model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
            out[idx] = mean_pool(hidden, enc["attention_mask"]).float().cpu().numpy()
        return out
