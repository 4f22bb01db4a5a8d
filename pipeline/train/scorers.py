"""The functions rank 0 of a run calls every train.eval_every steps (pipeline.train.loop): each scores the model
as it is now by the run's train.select_by (pipeline.train.selection) and returns the metrics row's scores.

Every score is taken in eval mode (no dropout) without gradients, training mode restored after. STS and task
scores embed sentences as the evaluation does (its tokenisation and max_length, the run's pooling,
pipeline.model.exported); the held-out loss reads the pairs' own token ids (pipeline.train.heldout).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from pipeline.evaluate import kinds
from pipeline.model.exported import embed, eval_length
from pipeline.train.config import HELDOUT_LOSS, STS_DEV, TrainConfig
from pipeline.train.devset import dev_spearman
from pipeline.train.heldout import heldout_scores
from pipeline.train.selection import TASK_SCORE


def _in_eval_mode(module, fn: Callable):
    def score():
        module.eval()
        try:
            with torch.no_grad():
                return fn()
        finally:
            module.train()

    return score


def _encode(module, tokenizer, pooling: str, max_length: int, keep_head: bool = False):
    """Embeddings as the export gives them: through the head where the export keeps it (keep_head)."""
    encoder = module.mlm_model.base_model
    length = eval_length(encoder.config, tokenizer, max_length)
    head = module.projection if keep_head else None
    return lambda sentences: embed(encoder, tokenizer, sentences, pooling, length, head=head)


def dev_scorer(model, tokenizer, pooling: str, dev: dict, keep_head: bool = False) -> Callable[[], float]:
    """The model's STS-B "cosine" Spearman on the dev pairs (`dev`: {subset, max_length})."""
    module = getattr(model, "module", model)
    encode = _encode(module, tokenizer, pooling, dev["max_length"], keep_head)
    return _in_eval_mode(module, lambda: dev_spearman(encode, dev["subset"]))


def task_score(task: kinds.Task, encode, seed: int = 0) -> float:
    """The task's main metric, by its kind's own scorer."""
    main = kinds.main_metric(task.kind)
    [row] = [r for r in kinds.module(task.kind).score(task, encode, seed) if r["metric"] == main]
    return row["value"]


def make_scorer(model, tokenizer, cfg: TrainConfig, dev: dict) -> Callable[[], dict]:
    """The run's scorer: () -> {metrics column: value}; `dev` is pipeline.train.selection.load's."""
    module = getattr(model, "module", model)
    if dev["by"] == HELDOUT_LOSS:
        return _in_eval_mode(module, lambda: heldout_scores(module, dev["batches"], cfg.loss, cfg.temperature))
    if dev["by"] == STS_DEV:
        spearman = dev_scorer(model, tokenizer, cfg.pooling, dev, cfg.keep_head)
        return lambda: {"dev_spearman": spearman()}
    encode = _encode(module, tokenizer, cfg.pooling, dev["max_length"], cfg.keep_head)
    return _in_eval_mode(module, lambda: {TASK_SCORE: task_score(dev["task"], encode)})
