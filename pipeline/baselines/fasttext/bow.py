"""Bag-of-words baseline: fastText skipgram vectors trained on the filtered corpus, averaged per sentence.

It tells whether a contrastive encoder beats what the same corpus gives with
no transformer at all.

fastText is imported where it trains or loads a model: CLEAR's objective, which the config imports, imports this
module at its top.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from pipeline.baselines.fasttext.config import FASTTEXT_MIN_THREADS, FastTextBaseline
from storage import local_copy

log = logging.getLogger("cpipe")
DEFAULTS = FastTextBaseline()
MODEL_FILE = "fasttext.bin"  # in the baseline stage's dataset


def _one_line(text: str) -> str:
    # fastText reads one document per line and rejects newlines at inference.
    return text.replace("\r", " ").replace("\n", " ").lower()


def train_fasttext(
    texts: Iterable[str],
    out_path: str,
    dim: int = DEFAULTS.dim,
    epoch: int = DEFAULTS.epoch,
    min_count: int = DEFAULTS.min_count,
    threads: int = DEFAULTS.threads,
    bucket: int = DEFAULTS.bucket,
    seed: int = 0,
) -> str:
    """Train skipgram vectors on texts (lowercased, one document per line); save the binary model to out_path.

    fastText 0.9.3 takes no seed for unsupervised training (it always uses 0), and several threads are not
    bit-reproducible anyway: a repeat's `seed` other than 0 trains on the documents in a seeded order instead
    (pipeline.repeats), 0 in the texts' own. `bucket` sizes the subword hash table: fastText's default of 2M
    makes an ~800 MB model at dim 100.
    """
    import fasttext

    if threads < FASTTEXT_MIN_THREADS:
        raise ValueError(
            f"fastText needs threads >= {FASTTEXT_MIN_THREADS} here (fewer gives NaN vectors), got {threads}"
        )
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    # The corpus file sits beside the model: a filtered corpus can outgrow /tmp.
    fd, corpus = tempfile.mkstemp(dir=out.parent, prefix=".fasttext-corpus.", suffix=".txt")
    tmp_model = f"{out}.tmp"
    try:
        n_docs = 0
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            for text in texts:
                line = _one_line(text).strip()
                if line:
                    f.write(line + "\n")
                    n_docs += 1
        if n_docs == 0:
            raise ValueError("no text to train fastText on: every document is empty")
        if seed:
            _shuffle_lines(corpus, seed)
        # Training says nothing for up to minutes: fastText's own progress (verbose) redraws a line with carriage returns.
        log.info(
            "fastText: training skipgram vectors on %s documents (%d dimensions, %d epochs, %d threads)...",
            f"{n_docs:,}",
            dim,
            epoch,
            threads,
        )
        model = fasttext.train_unsupervised(
            corpus, model="skipgram", dim=dim, epoch=epoch, minCount=min_count, thread=threads, bucket=bucket, verbose=0
        )
        model.save_model(tmp_model)
        os.replace(tmp_model, out)
    finally:
        for leftover in (corpus, f"{corpus}.shuffled", tmp_model):
            Path(leftover).unlink(missing_ok=True)
    return str(out)


def _shuffle_lines(path: str, seed: int) -> None:
    """Rewrite the file with its lines in a seeded order, holding one offset per line, not the lines."""
    with open(path, "rb") as f:
        ends = np.cumsum(np.fromiter((len(line) for line in f), dtype=np.int64))
    starts = ends - np.diff(ends, prepend=0)
    with open(path, "rb") as src, open(f"{path}.shuffled", "wb") as dst:
        for i in np.random.default_rng(seed).permutation(len(ends)):
            src.seek(starts[i])
            dst.write(src.read(ends[i] - starts[i]))
    os.replace(f"{path}.shuffled", path)


class FastTextEncoder:
    """Sentence vector = fastText's average of L2-normalised word vectors."""

    def __init__(self, model_path: str):
        import fasttext

        with local_copy(str(model_path)) as local:  # any fsspec URL; fastText reads the file whole
            self.model = fasttext.load_model(local)
        self.dim = self.model.get_dimension()

    @property
    def parameters(self) -> int:
        rows, dim = self.model.get_input_matrix().shape  # word and subword-bucket vectors
        return rows * dim

    def encode(self, sentences: list[str], batch_size: int | None = None) -> np.ndarray:
        """`batch_size` is accepted for a common encoder interface; fastText embeds one sentence at a time."""
        out = np.zeros((len(sentences), self.dim), dtype=np.float32)
        for i, sentence in enumerate(sentences):
            out[i] = self.model.get_sentence_vector(_one_line(sentence))
        return out
