"""The checks a run gets before torch, transformers, Prefect or Ray are imported (15 s and more on a small
machine), so that a mistake in the command line answers at once: the config and its `--set` overrides, the
stage names, `model.base`, the corpus and evaluation files, the artifacts directory. The checks that need
the stages' own modules follow in flows.pipeline_flows.checked."""

from __future__ import annotations

import os

from pipeline import registry
from pipeline.config import Config, load_config
from pipeline.errors import ConfigError
from storage import check_writable

# Stages whose check is run here: their modules import nothing heavy. The tokenizer's checks model.base (a
# directory holding a model, or a hub name, downloaded into the hub's cache).
CHECKED = ("corpus", "tokenizer")


def configured(config: str | None = None, corpus: str | list[str] | None = None, eval_data: str | None = None,
               artifacts: str | None = None, until: str | None = None, overrides: list[str] | None = None,
               first: str = registry.NAMES[0]) -> Config:
    """The run's config, loaded and checked as far as it can be without the stages' heavy modules, for the
    stages from `first` to `until`."""
    if until is not None and until not in registry.NAMES:
        raise ConfigError(f"--until {until}: unknown stage (stages: {', '.join(registry.NAMES)})")
    sources = [corpus] if isinstance(corpus, str) else corpus
    cfg = load_config(config, overrides, **{"artifacts": artifacts, "corpus.sources": sources or None,
                                            "evaluate.data": eval_data})
    reached = registry.NAMES[registry.NAMES.index(first):registry.NAMES.index(until or registry.NAMES[-1]) + 1]
    if "evaluate" in reached:
        _local_files_exist(cfg.evaluate.data)
    check_writable(cfg.artifacts)
    if "leaderboard" in reached and cfg.evaluate.results_dir:  # MTEB's result files, written once it is published
        check_writable(cfg.evaluate.results_dir, "evaluate.results_dir")
    for name in CHECKED:
        if name in reached:
            registry.stage(name).check(cfg)
    return cfg


def _local_files_exist(data: str | dict[str, str] | None) -> None:
    """evaluate.data's local paths (URLs are fetched later, once)."""
    for path in data.values() if isinstance(data, dict) else [data] if data else []:
        if "://" not in path and not os.path.exists(path):
            raise ConfigError(f"evaluate.data: {path}: no such file or directory")
