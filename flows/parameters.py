"""The flows' parameters, described once. Prefect reads a flow's docstring "Args:" (Google style) into its
deployments' parameter schema, which `prefect deployment inspect` and the UI's run form show; `documented` writes
that section for each flow from these descriptions, so that the four flows, which share most parameters, say the
same of each."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TypeVar

from pipeline import registry

Flow = TypeVar("Flow", bound=Callable)

DESCRIBED = {
    "models": (
        "Models to score, each a model directory (Hugging Face or sentence-transformers) on the machine that runs "
        "the flow, or a hub name; they are the leaderboard's rows. Default: the pipeline's runs and baselines, "
        "trained (or reused) on the train flow's datasets."
    ),
    "config": (
        "The YAML profile, a path on the machine that runs the flow (relative to its working directory); "
        "default configs/default.yaml."
    ),
    "corpus": (
        "A local file or directory of documents, or a list of them to mix; replaces the profile's corpus.sources."
    ),
    "eval_data": (
        "The evaluation data, scored by the evaluate flow and kept out of the training data by decontamination: "
        "a directory of tasks in SentEval's layout, STS pair files (sentence1, sentence2, score) and/or retrieval, "
        "clustering, pairclass and reranking tasks, one task's directory, or one pair file; replaces the "
        "profile's evaluate.data (by default a set of URLs, downloaded)."
    ),
    "artifacts": (
        "Where the stage datasets, the leaderboard and MTEB's result files go: a directory or an fsspec URL "
        "(s3://...); default ./artifacts."
    ),
    "until": "Stop after this stage ({stages}); default {last}.",
    "overrides": (
        'Config values to override, each "key=value" with a YAML value, as `cpipe run --set` takes them, '
        'e.g. ["filter.min_tokens=1024", "runs={declutr: {}}"].'
    ),
    "resolved": (
        "Internal: the checked config a parent flow (or `cpipe run`, which checks it before Prefect starts) "
        "passes down; the parameters above are then unused."
    ),
    "done": "Internal: the datasets (label -> path) of the flows before this one, which a parent flow passes down.",
}


def documented(flow: str | None) -> Callable[[Flow], Flow]:
    """Its docstring's summary, then "Args:" describing each of its parameters as DESCRIBED says, `until`
    naming the stages of `flow` (None: all of them)."""
    stages = [s.name for s in (registry.in_flow(flow) if flow else registry.stages())]

    def document(fn: Flow) -> Flow:
        said = {**DESCRIBED, "until": DESCRIBED["until"].format(stages=", ".join(stages), last=stages[-1])}
        args = "".join(f"    {name}: {said[name]}\n" for name in inspect.signature(fn).parameters)
        fn.__doc__ = f"{inspect.cleandoc(fn.__doc__ or '')}\n\nArgs:\n{args}"
        return fn

    return document
