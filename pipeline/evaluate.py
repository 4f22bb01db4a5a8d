"""evaluate stage: score one model on every STS task present in the evaluation data."""

from __future__ import annotations

import logging
import os

import pyarrow as pa

from pipeline.baseline import MODEL_FILE
from pipeline.bow import FastTextEncoder
from pipeline.encoder import Encoder
from pipeline.sts import data_hash, find_sts, score_sts

NAME, VERSION = "evaluate", "1"
SCHEMA = pa.schema([
    ("model", pa.string()),
    ("kind", pa.string()),
    ("model_fingerprint", pa.string()),
    ("parameters", pa.int64()),
    ("dimension", pa.int32()),
    ("task", pa.string()),
    ("subset", pa.string()),
    ("split", pa.string()),
    ("metric", pa.string()),
    ("protocol", pa.string()),
    ("value", pa.float64()),
    ("n", pa.int64()),
    ("data_hash", pa.string()),
])
log = logging.getLogger("cpipe")


def data_fingerprint(data: str) -> str:
    """A hash of the evaluation data's content, so changed files invalidate every model's scores."""
    subsets, _ = find_sts(data)
    return data_hash(subsets)


def stage_config(evaluate: dict, data: str, data_fingerprint: str, model: str, kind: str) -> dict:
    return {"data": data, "data_hash": data_fingerprint, "model": model, "kind": kind,
            "batch_size": evaluate["batch_size"], "max_length": evaluate["max_length"]}


def load_encoder(path: str, max_length: int):
    if os.path.exists(f"{path}/{MODEL_FILE}"):
        return FastTextEncoder(f"{path}/{MODEL_FILE}")
    return Encoder(path, max_length=max_length)


def run(config: dict, inputs: dict, out) -> None:
    subsets, absent = find_sts(config["data"])
    encoder = load_encoder(inputs["model"], config["max_length"])
    dims = set()

    def encode(sentences: list[str]):
        vectors = encoder.encode(sentences, batch_size=config["batch_size"])
        dims.add(vectors.shape[1])
        return vectors

    rows = score_sts(encode, subsets)
    [dimension] = dims
    model = {"model": config["model"], "kind": config["kind"], "parameters": encoder.parameters,
             "dimension": dimension, "model_fingerprint": inputs["model"].rstrip("/").rsplit("/", 1)[-1],
             "data_hash": config["data_hash"]}
    out.write([{**row, **model} for row in rows])
    out.extra["absent_tasks"] = absent
    log.info("evaluate: %s on %d STS subsets (absent: %s)", config["model"], len(subsets), ", ".join(absent) or "none")
