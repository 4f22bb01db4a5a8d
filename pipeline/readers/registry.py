"""Every kind of the evaluation: SentEval's (STS, the transfer tasks), the file kinds (retrieval, clustering, pair
classification, reranking) and the analysis, the one list of them, in the order they are scored. A kind is one
module ending in its declaration, `KIND = Kind(...)` (pipeline.evaluate.kind), named here on one line with the
metric its leaderboard columns show, and imported only when first needed, by pipeline.evaluate.kinds (as
pipeline.registry does for stages). The metric is written here alone (the declaration reads it: Kind.main), since
the config checks `evaluate.rank_by` against the kinds' columns before, and without, importing any kind's module.
A leaf, importing nothing, so that the config may import it, and so that no import cycle closes through the lazy
import (a kind's module reaches this list, through pipeline.evaluate.kind, but never the module importing it).

It sits with the readers, not beside the kinds in pipeline/evaluate/, because the STS pair files' reader tells a
kind's `<task>.<kind>.<format>` file from a pair file by these names, and the readers (pipeline.readers.sts, which
pipeline.baselines reaches through pipeline.readers.nli) sit left of evaluate in the package order: none of them
may import a module of pipeline/evaluate/, a leaf included."""

from __future__ import annotations

# kind -> (its module, the metric its columns show: "<task> <metric>", and "avg <kind>" over its tasks)
MODULES = {
    "retrieval": ("pipeline.evaluate.retrieval", "nDCG@10"),
    "clustering": ("pipeline.evaluate.clustering", "v_measure"),
    "pairclass": ("pipeline.evaluate.pairclass", "AP"),
    "reranking": ("pipeline.evaluate.reranking", "map"),
}


# SentEval's own kinds, declared as the others are but found and shown by their own rules (STS: SentEval's
# directories and the STS pair files, columns per protocol; transfer: SentEval's classification tasks, switched by
# evaluate.transfer), so not among `names()`, which pipeline.train and the file search read as the kinds of
# `<task>.<kind>.<format>` files and BEIR folders. Scored first, in this order.
SENTEVAL = {
    "sts": ("pipeline.evaluate.sts", "spearman"),
    "transfer": ("pipeline.evaluate.transfer", "accuracy"),
}
# Kinds that describe the embedding space on other kinds' data rather than score tasks (alignment, uniformity and
# anisotropy on STS-B), scored after every task.
SPACE = {
    "analysis": ("pipeline.evaluate.analysis", "alignment"),
}


def names() -> tuple[str, ...]:
    return tuple(MODULES)


def line(name: str) -> tuple[str, str]:
    """A kind's registry line, a file kind's, SentEval's or the analysis': its module and shown metric."""
    return {**SENTEVAL, **MODULES, **SPACE}[name]


def main_metric(name: str) -> str:
    """The metric a kind's columns show, written here alone: its declaration reads it (Kind.main)."""
    return line(name)[1]


def average(name: str) -> str:
    return f"avg {name}"


def is_kind_column(column: str) -> bool:
    """Whether `column` can be a task kind's: "avg <kind>", or "<task> <its main metric>"."""
    if column in (average(k) for k in MODULES):
        return True
    return any(column.endswith(f" {main}") and len(column) > len(main) + 1 for _, main in MODULES.values())
