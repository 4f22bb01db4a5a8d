"""The task kinds beside STS and SentEval's transfer tasks (retrieval, clustering, pair classification, reranking):
the one list of them. A kind is one module ending in its declaration, `KIND = Kind(...)` (pipeline.evaluate.kind),
named here on one line with the metric its leaderboard columns show, and imported only when first needed, by
pipeline.evaluate.kinds (as pipeline.registry does for stages). A leaf, importing nothing, so that the config checks
`evaluate.rank_by` against the kinds' columns without importing their scorers, and so that no import cycle closes
through the lazy import (a kind's module reaches this list, through pipeline.readers.sts, but never the module
importing it). It sits with the readers because the STS pair files' reader tells a kind's `<task>.<kind>.<format>`
file from a pair file by these names."""

from __future__ import annotations

# kind -> (its module, the metric its columns show: "<task> <metric>", and "avg <kind>" over its tasks)
MODULES = {
    "retrieval": ("pipeline.evaluate.retrieval", "nDCG@10"),
    "clustering": ("pipeline.evaluate.clustering", "v_measure"),
    "pairclass": ("pipeline.evaluate.pairclass", "AP"),
    "reranking": ("pipeline.evaluate.reranking", "map"),
}


# SentEval's own kinds, declared as the others are but found and shown by their own rules (STS: SentEval's
# directories and the STS pair files; columns per protocol), so not among `names()`, which pipeline.train and the
# file search read as the kinds of `<task>.<kind>.<format>` files and BEIR folders.
SENTEVAL = {
    "sts": ("pipeline.evaluate.sts", "spearman"),
}


def names() -> tuple[str, ...]:
    return tuple(MODULES)


def line(name: str) -> tuple[str, str]:
    """A kind's registry line, a file kind's or SentEval's: its module and shown metric."""
    return MODULES[name] if name in MODULES else SENTEVAL[name]


def main_metric(name: str) -> str:
    return MODULES[name][1]


def average(name: str) -> str:
    return f"avg {name}"


def is_kind_column(column: str) -> bool:
    """Whether `column` can be a task kind's: "avg <kind>", or "<task> <its main metric>"."""
    if column in (average(k) for k in MODULES):
        return True
    return any(column.endswith(f" {main}") and len(column) > len(main) + 1 for _, main in MODULES.values())
