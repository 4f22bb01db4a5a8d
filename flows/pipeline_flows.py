"""The flows: `data` (corpus -> tokenizer -> filter -> decontaminate -> [backtranslate] -> augment), `train`
(init -> the runs), `evaluate` (score models into the leaderboard), and `full-pipeline`, which runs the three in turn.

Each stage says what it builds and in which flow (pipeline.stage); pipeline.registry orders them; a flow builds
its own stages in that order."""

from __future__ import annotations

from collections.abc import Callable

import tasks  # noqa: F401  (sets logging before prefect is imported)

from prefect import flow, get_run_logger

from pipeline import preflight, registry
from pipeline.config import Config
from pipeline.evaluate import mteb_results
from pipeline.evaluate.data import local_eval_data
from pipeline.evaluate.stage import user_models
from pipeline.stage import Stage
from tasks.build import publish_leaderboard, run, run_all


def resolve(config: str | None = None, corpus: str | list[str] | None = None, eval_data: str | None = None,
            artifacts: str | None = None, until: str | None = None, overrides: list[str] | None = None,
            first: str = registry.NAMES[0]) -> Config:
    """Load and check everything the stages from `first` to `until` need before any work starts."""
    return checked(preflight.configured(config, corpus, eval_data, artifacts, until, overrides, first), first, until)


def checked(cfg: Config, first: str = registry.NAMES[0], until: str | None = None) -> Config:
    """Pre-flight's config (pipeline.preflight.configured) through the checks that need the stages' modules:
    the evaluation data fetched once when the run reaches past the data flow, then each stage's own check."""
    reached = registry.stages(first, until or registry.NAMES[-1])
    if any(stage.flow != "data" for stage in reached):
        cfg.evaluate.data = local_eval_data(cfg.evaluate.data, cfg.corpus.download_dir)  # URLs: fetched once
    for stage in reached:
        if stage.name not in preflight.CHECKED:
            stage.check(cfg)
    return cfg


def build(cfg: Config, stages: list[Stage], done: dict[str, str], until: str | None = None,
          run_one: Callable[[Stage, dict, dict[str, str], str], str] | None = None) -> bool:
    """Build every instance of each stage in turn into `done` (label -> dataset path); True once `until` is
    built. Each instance is a Prefect task, one after another (a run may continue the one before it), or all
    at once for a stage that says so; `run_one(stage, config, inputs, label)` builds them instead (a notebook,
    a test: `pipeline.stage.run_stage` without Prefect)."""
    for stage in stages:
        keys = stage.keys(cfg, done)
        if stage.side_by_side(cfg) and run_one is None:
            jobs = {label.replace("/", "-"): (stage.name, stage.config(cfg, key), stage.inputs(cfg, done, key))
                    for label, key in keys.items()}
            built = run_all(jobs, cfg.artifacts, cfg.ray)
            done.update({label: built[label.replace("/", "-")] for label in keys})
        else:
            for label, key in keys.items():
                config, inputs = stage.config(cfg, key), stage.inputs(cfg, done, key)
                done[label] = run_one(stage, config, inputs, label) if run_one else \
                    run(stage.name, config, inputs, cfg.artifacts, label=label.replace("/", "-"), ray=cfg.ray)
        if stage.name == until:
            return True
    return False


# The flow functions end in _flow, so that `train_flow` never reads as the train stage it builds.
@flow(name="data")
def data_flow(config: str | None = None, corpus: str | list[str] | None = None, eval_data: str | None = None,
              artifacts: str | None = None, until: str | None = None, overrides: list[str] | None = None,
              resolved: Config | None = None) -> dict[str, str]:
    """The training data: documents, tokenizer, filtered documents, [back-translations], each objective's pairs.
    `eval_data` is what decontamination keeps out of them (default: the profile's evaluate.data)."""
    cfg = resolved or resolve(config, corpus, eval_data, artifacts, until or registry.in_flow("data")[-1].name,
                              overrides)
    done: dict[str, str] = {}
    build(cfg, registry.in_flow("data"), done, until)
    return done


@flow(name="train")
def train_flow(config: str | None = None, corpus: str | list[str] | None = None, eval_data: str | None = None,
               artifacts: str | None = None, until: str | None = None, overrides: list[str] | None = None,
               resolved: Config | None = None, done: dict[str, str] | None = None) -> dict[str, str]:
    """The initial model and every run's, on the data flow's datasets (`done`; built, or reused, when not given)."""
    cfg = resolved or resolve(config, corpus, eval_data, artifacts, until or registry.in_flow("train")[-1].name,
                              overrides)
    done = dict(done) if done is not None else data_flow(resolved=cfg)
    build(cfg, registry.in_flow("train"), done, until)
    return done


@flow(name="evaluate")
def evaluate_flow(models: list[str] | None = None, eval_data: str | None = None, config: str | None = None,
                  artifacts: str | None = None, overrides: list[str] | None = None, resolved: Config | None = None,
                  done: dict[str, str] | None = None, until: str | None = None) -> dict[str, str]:
    """Score `models` (model directories or hub names, HF or sentence-transformers), or else the pipeline's
    rows on the train flow's datasets (`done`), and add them to the cumulative leaderboard."""
    cfg = resolved or resolve(config, None, eval_data, artifacts, None, overrides,
                              first=registry.in_flow("evaluate")[0].name)
    if models:  # the given models are the rows: no baseline is trained
        done = user_models(models)
        stages = [registry.stage("evaluate"), registry.stage("leaderboard")]
    else:
        done = dict(done) if done is not None else train_flow(resolved=cfg)
        stages = registry.in_flow("evaluate")
    build(cfg, stages, done, until)
    if "leaderboard" in done:
        done["leaderboard.md"] = publish_leaderboard(done["leaderboard"], cfg.artifacts)
        get_run_logger().info("leaderboard written to %s", done["leaderboard.md"])
        results = cfg.evaluate.results_dir or f"{cfg.artifacts.rstrip('/')}/{mteb_results.DEFAULT_DIR}"
        written = [p for k, v in done.items() if k.startswith("evaluate/") for p in mteb_results.write(results, v)]
        get_run_logger().info("MTEB result files: %d under %s", len(written), results)
    return done


@flow(name="full-pipeline")
def full_pipeline(config: str | None = None, corpus: str | list[str] | None = None, eval_data: str | None = None,
                  artifacts: str | None = None, until: str | None = None, overrides: list[str] | None = None,
                  resolved: Config | None = None) -> dict[str, str]:
    """Train and rank sentence encoders on a corpus; every stage is cached by its fingerprint."""
    cfg = resolved or resolve(config, corpus, eval_data, artifacts, until, overrides)
    flow_of = {stage.name: stage.flow for stage in registry.stages()}
    done = data_flow(resolved=cfg, until=until)
    if until is not None and flow_of[until] == "data":
        return done
    done = train_flow(resolved=cfg, done=done, until=until)
    if until is not None and flow_of[until] == "train":
        return done
    return evaluate_flow(resolved=cfg, done=done, until=until)
