"""The checks a run gets before torch, transformers, Prefect or Ray are imported (15 s and more on a small
machine), so that a mistake in the command line answers at once: the config and its `--set` overrides, the
stage names, `model.base`, the corpus and evaluation files, the artifacts directory, the MLflow store. The
checks that need the stages' own modules follow in flows.pipeline_flows.checked."""

from __future__ import annotations

import http.client
import os
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from pipeline import objectives, registry
from pipeline.config import Config, load_config
from pipeline.errors import ConfigError, InputError
from pipeline.evaluate import given
from pipeline.evaluate.data import local_eval_data
from pipeline.tracking.config import KEY, MlflowConfig
from storage import DatasetError, check_writable

# Bad input (a file, a row, a key) and a damaged or unreadable dataset: phrased for the user, one line says it
# all, so the CLI and a failed flow run's state message show it without a traceback.
USER_ERRORS = (InputError, DatasetError)

ANSWER_SECONDS = 5  # how long a tracking server has to answer

# Stages whose check is run here: their modules import nothing heavy. The tokenizer's checks model.base (a
# directory holding a model, or a hub name, downloaded into the hub's cache).
CHECKED = ("corpus", "tokenizer")


def configured(
    config: str | None = None,
    corpus: str | list[str] | None = None,
    eval_data: str | None = None,
    artifacts: str | None = None,
    until: str | None = None,
    overrides: list[str] | None = None,
    first: str = registry.NAMES[0],
    models: list[str] | None = None,
) -> Config:
    """The run's config, loaded and checked as far as it can be without the stages' heavy modules, for the
    stages from `first` to `until`; `models`: `cpipe evaluate --model`'s, the leaderboard's rows."""
    if until is not None and until not in registry.NAMES:
        raise ConfigError(f"--until {until}: unknown stage (stages: {', '.join(registry.NAMES)})")
    sources = [corpus] if isinstance(corpus, str) else corpus
    cfg = load_config(
        config, overrides, **{"artifacts": artifacts, "corpus.sources": sources or None, "evaluate.data": eval_data}
    )
    reached = registry.NAMES[registry.NAMES.index(first) : registry.NAMES.index(until or registry.NAMES[-1]) + 1]
    if "evaluate" in reached:
        _local_files_exist(cfg.evaluate.data)
    if "augment" in reached:  # read as the flow runs, after Prefect and Ray have started (half a minute)
        # Every objective's: a file the config names is checked whether or not a run trains on it.
        for name in objectives.names():
            for key, paths in objectives.objective(name).reads(cfg).items():
                _readable_files(paths, key)
    check_writable(cfg.artifacts)
    if "leaderboard" in reached and cfg.evaluate.results_dir:  # MTEB's result files, written once it is published
        check_writable(cfg.evaluate.results_dir, "evaluate.results_dir")
    if "leaderboard" in reached:
        _compare_to_a_row(cfg.evaluate.compare_to, _rows(cfg, models, whole=first == registry.NAMES[0]))
    if cfg.tracking.mlflow is not None and {"train", "leaderboard"} & set(reached):  # reported after them
        _tracking_store(cfg.tracking.mlflow)
    for name in CHECKED:
        if name in reached:
            registry.stage(name).check(cfg)
    return cfg


def checked(
    cfg: Config,
    first: str = registry.NAMES[0],
    until: str | None = None,
    fetch: Callable[[Any, str], Any] = local_eval_data,
) -> Config:
    """`configured`'s config through the checks that need the stages' modules, as a run makes them before any work:
    the evaluation data fetched once by `fetch` where the run reaches past the data flow (a flow run passes a
    Prefect task that retries a network failure), then each stage's own check."""
    reached = registry.stages(first, until or registry.NAMES[-1])
    if any(stage.flow != "data" for stage in reached):
        cfg.evaluate.data = fetch(cfg.evaluate.data, cfg.corpus.download_dir)  # URLs: fetched once
    for stage in reached:
        if stage.name not in CHECKED:
            stage.check(cfg)
    return cfg


def _readable_files(paths: list[str], key: str) -> None:
    for path in paths:
        if "://" in path:
            continue
        if not os.path.isfile(path):
            raise ConfigError(f"{key}: no such file: {path}")
        if not os.access(path, os.R_OK):
            raise ConfigError(f"{key}: {path}: not readable")


def _local_files_exist(data: str | dict[str, str] | None) -> None:
    """evaluate.data's local paths (URLs are fetched later, once)."""
    for path in data.values() if isinstance(data, dict) else [data] if data else []:
        if "://" not in path and not os.path.exists(path):
            raise ConfigError(f"evaluate.data: {path}: no such file or directory")


def _rows(cfg: Config, models: list[str] | None, whole: bool) -> list[str] | None:
    """The leaderboard's rows as far as they are known before any work: the given models', or a whole run's (the
    config's); None for the evaluate flow alone, which may be given models or not."""
    if models:
        return list(given.rows(models))
    return list(cfg.rows()) if whole else None


def _compare_to_a_row(compare_to: str | None, rows: list[str] | None) -> None:
    """evaluate.compare_to names a row, checked before the models are scored, not after (the leaderboard's)."""
    if compare_to is not None and rows is not None and compare_to not in rows:
        raise ConfigError(
            f"evaluate.compare_to: no row named {compare_to!r} on this run's leaderboard (rows: {', '.join(rows)})"
        )


def _tracking_store(settings: MlflowConfig, timeout: float = ANSWER_SECONDS) -> None:
    """Before any work, that the store can take the reports made after training: a tracking server answers at
    the URI (any HTTP answer; what it says is MLflow's to read), a sqlite store's file can be written. A database
    server's store (postgresql, ...) and Databricks are first reached by the first report."""
    uri = settings.uri
    if uri.startswith("sqlite:"):
        file = uri.split(":///", 1)[1]
        check_writable(os.path.dirname(file), KEY)
        if os.path.exists(file) and not os.access(file, os.W_OK):
            raise ConfigError(f"{KEY} {uri}: {file} is not writable")
    elif uri.split("://", 1)[0].lower() in ("http", "https"):
        try:
            urllib.request.urlopen(uri, timeout=timeout).close()
        except urllib.error.HTTPError:
            pass  # an answer
        except (OSError, http.client.HTTPException) as e:
            reason = e.reason if isinstance(e, urllib.error.URLError) else e
            if not isinstance(reason, ssl.SSLError):  # a TLS handshake is an answer; MLflow's certificates are its own
                raise ConfigError(
                    f"{KEY} {uri}: no tracking server answers there ({str(reason) or type(reason).__name__}); "
                    "start it, or set tracking.mlflow to null to run without tracking"
                ) from None
