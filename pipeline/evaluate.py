"""evaluate stage: score one encoder on every task present in the evaluation data.

STS12-16 by cosine and Spearman under both aggregations, STS-B and SICK-R by
cosine and by SentEval's relatedness regressor (pipeline.sts); the SentEval
transfer tasks (pipeline.transfer); alignment, uniformity and anisotropy on
STS-B (pipeline.analysis). Each row carries the
model's size, objective and training corpus, so a leaderboard built from any
set of these datasets explains itself.

One model's scoring splits into independent units, one per STS task, per
transfer task and the analysis, which the runtime backend runs one after
another here (sharing one loaded encoder) or as Ray tasks (each loading its
own). Every unit is a function of its own data and seed alone, and the rows
are merged in unit order, so both write the same dataset.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, NamedTuple

import pyarrow as pa

from pipeline import encoders
from pipeline.analysis import score_analysis
from pipeline.parallel import fetch, ordered_map, share
from pipeline.postprocess import Flow, PostProcessed, Whitening
from pipeline.sts import data_hash, find_sts, score_sts
from pipeline.transfer import averages, score_transfer
from pipeline.transfer_data import find_transfer, transfer_data_hash

# 3: STS is encoded task by task, one batch set per task, which can move the last bits of a score.
# 4: transfer tasks by SentEval's PyTorch classifier (transfer_protocol), on samples read and ordered as SentEval's;
# STS-B/SICK-R "cosine" and SentEval's regressor ("senteval"); anisotropy is Ethayarajh's (token level).
NAME, VERSION = "evaluate", "5"
SCHEMA = pa.schema([
    ("model", pa.string()),
    ("kind", pa.string()),
    ("objective", pa.string()),
    ("recipe", pa.string()),
    ("corpus", pa.string()),
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
# How a config without a runtime (one written by hand) is scored.
SERIAL = {"backend": "serial", "workers": 1}


def data_fingerprint(data: str, transfer: bool) -> str:
    """A hash of the evaluation data's content, so changed files invalidate every model's scores."""
    subsets, _ = find_sts(data)
    parts = [data_hash(subsets)] + ([transfer_data_hash(find_transfer(data)[0])] if transfer else [])
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:16]


def stage_config(evaluate: dict, data_fingerprint: str, name: str, spec: dict, about: dict) -> dict:
    """`spec` says how to build the encoder (pipeline.encoders); `about` is what the leaderboard says of it.

    `evaluate["workers"]` > 1 runs the units on Ray; as a runtime setting it leaves the fingerprint, and so the
    cached scores, as they are."""
    keys = ("data", "batch_size", "max_length", "transfer", "analysis", "seed", "kfold", "transfer_protocol")
    workers = evaluate["workers"]
    return {**{k: evaluate[k] for k in keys}, "data_hash": data_fingerprint, "model": name, "spec": spec,
            "about": about, "runtime": {"backend": "ray" if workers > 1 else "serial", "workers": workers}}


@dataclass(frozen=True)
class Recipe:
    """How a unit in another process, or on another machine, builds the encoder. A post-processed encoder's
    fitted transform travels in the recipe itself, not as the file kept beside the scores, which need not be
    visible where the unit runs."""

    spec: dict
    inputs: dict
    max_length: int
    transform: Whitening | Flow | None = None

    def load(self):
        encoder = encoders.load(self.spec, self.inputs, self.max_length)
        return encoder if self.transform is None else PostProcessed(encoder, self.transform)


@dataclass(frozen=True)
class Unit:
    """One independently scored part of a model's evaluation: `score(encode)` returns its rows."""

    name: str
    score: Callable[[Callable], list[dict]]
    encoder: Any  # a loaded encoder (units run in this process), else a Recipe as pipeline.parallel.share gives it
    batch_size: int


class Scored(NamedTuple):
    rows: list[dict]
    dimensions: set[int]
    parameters: int
    where: dict


class Embed:
    """What a unit scores with: called, the encoder's sentence embeddings; `tokens`, its token representations."""

    def __init__(self, encoder, batch_size: int):
        self.encoder, self.batch_size, self.dimensions = encoder, batch_size, set()

    def __call__(self, sentences: list[str]):
        vectors = self.encoder.encode(sentences, batch_size=self.batch_size)
        self.dimensions.add(vectors.shape[1])
        return vectors

    def tokens(self, sentences: list[str]):
        return encoders.token_vectors(self.encoder, sentences, self.batch_size)


def score_unit(unit: Unit) -> Scored:
    started = time.monotonic()
    source = fetch(unit.encoder)
    encoder = source.load() if isinstance(source, Recipe) else source
    embed = Embed(encoder, unit.batch_size)
    rows = unit.score(embed)
    where = {"unit": unit.name, "pid": os.getpid(), "ray_task": _ray_task(),
             "seconds": round(time.monotonic() - started, 3)}
    return Scored(rows, embed.dimensions, encoder.parameters, where)


def _analysis(embed: Embed, subsets: list, seed: int) -> list[dict]:
    return score_analysis(embed, subsets, tokens=embed.tokens, seed=seed)


def _ray_task() -> str | None:
    """The Ray task this runs as, if any, so that the manifest shows where each unit ran."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    context = ray.get_runtime_context()
    return context.get_task_id() if context.worker.mode == ray.WORKER_MODE else None


def units(config: dict, subsets: list, transfer: list, encoder) -> list[Unit]:
    """One unit per STS task, per transfer task and the analysis, in the order their rows are written."""
    def unit(name: str, score: Callable) -> Unit:
        return Unit(name, score, encoder, config["batch_size"])

    sts = [unit(f"sts/{task}", partial(score_sts, subsets=[s for s in subsets if s.task == task], seed=config["seed"]))
           for task in dict.fromkeys(s.task for s in subsets)]
    # score_transfer seeds each task's folds and classifiers itself, never by its place in the run.
    classify = [unit(f"transfer/{t.name}", partial(score_transfer, tasks=[t], seed=config["seed"], k=config["kfold"],
                                                   protocol=config["transfer_protocol"]))
                for t in transfer]
    analysis = [unit("analysis", partial(_analysis, subsets=subsets, seed=config["seed"]))] if config["analysis"] else []
    return sts + classify + analysis


def _encoder(config: dict, inputs: dict, out):
    """What the units encode with: the encoder itself when they run in this process, else the Recipe they build it
    from, shared rather than copied into each unit (a flow fitted on 768 dimensions pickles to 60 MB)."""
    spec, backend = config["spec"], config["runtime"]["backend"]
    recipe, encoder = Recipe(spec, inputs, config["max_length"]), None
    if spec.get("postprocess"):  # fitted once, here, whatever the backend
        encoder = encoders.post_processed(recipe.load(), spec["postprocess"], inputs["corpus"], out.local_dir,
                                          config["batch_size"], out)
        recipe = replace(recipe, transform=encoder.transform)
    if backend != "serial":
        return share(recipe, backend)
    return encoder if encoder is not None else recipe.load()


def run(config: dict, inputs: dict, out) -> None:
    config = {"runtime": SERIAL, **config}
    subsets, absent = find_sts(config["data"])
    transfer, absent_transfer = find_transfer(config["data"]) if config["transfer"] else ([], [])
    todo = units(config, subsets, transfer, _encoder(config, inputs, out))
    scored = list(ordered_map(score_unit, todo, config["runtime"]["backend"], config["runtime"]["workers"]))
    rows = [row for s in scored for row in s.rows]
    rows += averages(rows)  # of the transfer rows among them, so only once every transfer unit is back
    [dimension] = set().union(*(s.dimensions for s in scored))
    spec = config["spec"]
    fingerprint = inputs["model"].rstrip("/").rsplit("/", 1)[-1] if "model" in inputs else out.fp
    model = {"model": config["model"], "kind": spec["kind"], "parameters": scored[0].parameters,
             "dimension": dimension, "model_fingerprint": fingerprint, "data_hash": config["data_hash"],
             **{k: config["about"].get(k) for k in ("objective", "recipe", "corpus")}}
    out.write([{**row, **model} for row in rows])
    out.extra["absent_tasks"] = absent + absent_transfer
    out.extra["units"] = [s.where for s in scored]
    log.info("evaluate: %s on %d STS subsets and %d transfer tasks in %d units (%s, %d workers; absent: %s)",
             config["model"], len(subsets), len(transfer), len(todo), config["runtime"]["backend"],
             config["runtime"]["workers"], ", ".join(absent + absent_transfer) or "none")
