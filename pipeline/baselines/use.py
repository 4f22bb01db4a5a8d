"""The Universal Sentence Encoder (Cer et al., 2018) as a baseline row, from a TF-Hub SavedModel directory.

Two USEs are published as TF2 SavedModels: universal-sentence-encoder/4, the
deep averaging network (DAN), and universal-sentence-encoder-large/5, the
Transformer; both map a batch of strings to [batch, 512] float32. They
follow TF-Hub's Reusable SavedModel API for text embeddings: the loaded object
is called on a 1-D string tensor and returns the embeddings (its
`serving_default` signature, with input "inputs" and output "outputs", is the
same function); hub.load is tf.saved_model.load once the model is local. The
TF1 Hub format of the older versions (USE 1-3, large 1-3) is not loaded; the
multilingual USEs need tensorflow-text's ops besides.

TensorFlow is the optional extra `use` (tensorflow-cpu), imported only when a
USE row is scored. tensorflow-hub is not needed: loading a local directory
is all it would do, and its tf-keras pulls the full `tensorflow` wheel.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np

from pipeline.errors import InputError
from pipeline.progress import tracked

SAVED_MODEL, TF1_HUB_MODULE = "saved_model.pb", "tfhub_module.pb"
INSTALL = "pip install -e '.[use]'"


def problem(path: str) -> str | None:
    """Why `path` cannot be scored as a USE row here, in one line, else None. Cheap (TensorFlow is found, not
    imported), for config time."""
    if importlib.util.find_spec("tensorflow") is None:
        return f"TensorFlow is not installed, and the USE row needs it: {INSTALL}"
    if "://" in path or not os.path.isdir(path):
        return f"{path}: not a local directory (unpack the TF-Hub model's archive into one)"
    if os.path.isfile(os.path.join(path, TF1_HUB_MODULE)):
        return (
            f"{path}: a TF1 Hub-format module (USE versions 1-3), which is not loaded; use "
            "universal-sentence-encoder/4 (DAN) or universal-sentence-encoder-large/5 (Transformer)"
        )
    if not os.path.isfile(os.path.join(path, SAVED_MODEL)):
        return f"{path}: not a TensorFlow SavedModel (no {SAVED_MODEL})"
    return None


class UseEncoder:
    """A text-embedding SavedModel, with pipeline.model.exported.Encoder's interface."""

    def __init__(self, path: str):
        if (why := problem(path)) is not None:
            raise InputError(why)
        # The optional extra: imported here so that the project imports without it.
        import tensorflow as tf

        self.tf, self.path = tf, path
        self.model = tf.saved_model.load(path)
        if not callable(self.model):
            raise InputError(
                f"{path}: the SavedModel is not callable on a batch of strings (TF-Hub's text "
                "embedding API), as USE 4 and USE-large 5 are"
            )

    @property
    def parameters(self) -> int:
        """The Reusable SavedModel API's `variables`: all of the model's weights."""
        return sum(int(np.prod(v.shape)) for v in getattr(self.model, "variables", ()))

    def encode(self, sentences: list[str], batch_size: int = 128) -> np.ndarray:
        out = []
        # No sentence is one empty batch, so that the result still has the model's dimension.
        batches = [sentences[i : i + batch_size] for i in range(0, len(sentences), batch_size)] or [[]]
        for batch in tracked(batches, "embedding", "batches"):
            vectors = np.asarray(self.model(self.tf.constant(batch, dtype=self.tf.string)), dtype=np.float32)
            if vectors.ndim != 2 or len(vectors) != len(batch):
                raise InputError(
                    f"{self.path}: {len(batch)} sentences embedded to shape {vectors.shape}, not [sentences, dimension]"
                )
            out.append(vectors)
        return np.concatenate(out)
