"""Every kind of encoder the evaluate stage scores, built from a small spec: our exported models, the
fastText bag of words, random and pretrained word vectors, any HF / sentence-transformers directory,
an InferSent export, a Universal Sentence Encoder SavedModel, and a post-processed (whitened or
flow-transformed) version of any of them."""

from __future__ import annotations

import numpy as np

from pipeline.baselines import postprocess
from pipeline.baselines.fasttext.bow import FastTextEncoder
from pipeline.baselines.fasttext.stage import MODEL_FILE
from pipeline.baselines.infersent.model import InferSentEncoder
from pipeline.baselines.use import UseEncoder
from pipeline.baselines.vectors import RandomEncoder, WordVectorEncoder
from pipeline.corpus.segment import MIN_SENTENCE_CHARS
from pipeline.corpus.sentences import sentences
from pipeline.errors import InputError
from pipeline.model.exported import Encoder

TRANSFORM_DIR = "transform"


def load(spec: dict, inputs: dict, max_length: int):
    """The encoder a spec names. Specs with a model input read it from `inputs["model"]`."""
    kind = spec["kind"]
    if kind in ("trained", "untrained"):  # a spec's pooling: a reference read as its compared rows are (readouts)
        return Encoder(inputs["model"], max_length=max_length, pooling=spec.get("pooling"))
    if kind == "fasttext":
        return FastTextEncoder(f"{inputs['model']}/{MODEL_FILE}")
    if kind == "infersent":
        return InferSentEncoder(inputs["model"])
    if kind == "random":
        return RandomEncoder(spec["dim"], spec["seed"])
    if kind == "vectors":
        return WordVectorEncoder(spec["path"])
    if kind == "model":
        return Encoder(spec["path"], max_length=max_length, pooling=spec["pooling"])
    if kind == "use":
        return UseEncoder(spec["path"])
    raise ValueError(f"unknown encoder kind {kind!r}")


def post_processed(encoder, spec: dict, corpus: str, out_dir: str, batch_size: int, out):
    """Fit the spec's transform on the corpus's first sentences (never on evaluation data), keep it
    beside the scores, and return the wrapped encoder."""
    fitting = [r["text"] for r in sentences(corpus, out, MIN_SENTENCE_CHARS, spec["sentences"])]
    if len(fitting) < 2:
        raise InputError(f"post-processing needs corpus sentences; found {len(fitting)} in {corpus}")
    if spec["kind"] == "whitening":
        transform = postprocess.fit_whitening(encoder, fitting, k=spec["k"], batch_size=batch_size)
    else:
        transform = postprocess.fit_flow(encoder, fitting, seed=spec["seed"], batch_size=batch_size)
    transform.save(f"{out_dir}/{TRANSFORM_DIR}")
    out.count("fitting_sentences", len(fitting))
    return postprocess.PostProcessed(encoder, transform)


def token_vectors(encoder, sentences: list[str], batch_size: int) -> list[np.ndarray]:
    """Each sentence's token representations in context (Ethayarajh, 2019): a transformer's last-layer states;
    for bag-of-words encoders, a word's vector, which is what the one-word sentence embeds to (words the
    vectors do not know embed to zero and are left out). Post-processing is fitted to sentence embeddings, so a
    post-processed encoder's tokens are its underlying encoder's."""
    while isinstance(encoder, postprocess.PostProcessed):
        encoder = encoder.encoder
    if isinstance(encoder, Encoder):
        return encoder.token_vectors(sentences, batch_size=batch_size)
    out = []
    for sentence in sentences:
        words = sentence.split()
        vectors = encoder.encode(words, batch_size=batch_size) if words else np.zeros((0, 1), dtype=np.float32)
        out.append(vectors[np.any(vectors != 0, axis=1)])
    return out
