"""The flows: `data` (corpus -> tokenizer -> filter -> decontaminate -> [backtranslate] -> augment), `train`
(init -> the runs), `evaluate` (score models into the leaderboard), and `full-pipeline`, which runs the three in turn.

Each stage says what it builds and in which flow (pipeline.stage); pipeline.registry orders them; a flow builds
its own stages in that order."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from prefect import flow, get_run_logger
from prefect.context import FlowRunContext
from prefect.logging.handlers import APILogHandler
from prefect.states import Failed

import tasks  # noqa: F401  (sets logging before prefect is imported)
from flows.parameters import documented
from pipeline import preflight, registry
from pipeline.config import Config
from pipeline.evaluate import mteb_results
from pipeline.evaluate.data import local_eval_data
from pipeline.evaluate.stage import user_models
from pipeline.stage import Stage
from tasks.build import fetch_eval_data, publish_leaderboard, run, run_all, track_leaderboard, track_trainings

# What Prefect's engine logs, with the traceback, of the error a deployment's run (`python -m prefect.engine`, in a
# worker's process) failed on, after the flow has said it in one line (_one_line_failure).
ENGINE_FAILURE = "Engine execution exited with unexpected exception"


class _UserErrorsInOneLine(logging.Filter):
    """Bad input is said in one line: the engine's record of it is dropped (the flow logged the line), and any other
    record of one (a failed task's) loses its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not (record.exc_info and isinstance(record.exc_info[1], preflight.USER_ERRORS)):
            return True
        if record.msg == ENGINE_FAILURE:
            return False
        record.exc_info, record.exc_text = None, None
        return True


class _NoLateHeartbeat(logging.Filter):
    """Prefect's engine beats a flow run's heartbeat from a thread that can still fire after the engine has stopped
    its events worker (a run that fails within a second): Prefect then logs the dropped beat as an error with a
    traceback. The run has ended, so no beat is owed; other lost events stay errors."""

    def filter(self, record: logging.LogRecord) -> bool:
        late = record.exc_info and "stopped service instance" in str(record.exc_info[1])
        return not (late and "prefect.flow-run.heartbeat" in record.getMessage())


def _quiet_run_logs() -> None:
    """On the loggers whose records reach the run's log (Prefect's API handler) and the console: the module a
    deployment loads installs them, whatever process runs the flow."""
    for name in ("prefect.flow_runs", "prefect.task_runs"):
        logging.getLogger(name).addFilter(_UserErrorsInOneLine())
    logging.getLogger("prefect.events.utilities").addFilter(_NoLateHeartbeat())


_quiet_run_logs()


def _one_line_failure(fn: Callable) -> Callable:
    """A run stopped by bad input ends Failed with the one-line error as its state's message (what the UI shows)
    and in its log (what `prefect deployment run --watch` prints), where Prefect's own message prefixes it and its
    log holds a traceback; the error stays the state's data, so a caller (`cpipe run`, a parent flow) still has it
    raised."""

    @functools.wraps(fn)
    def failing_in_one_line(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except preflight.USER_ERRORS as e:
            message = f"{type(e).__name__}: {e}"
            run = FlowRunContext.get()
            if run is not None and run.flow_run.parent_task_run_id is None:
                # `prefect deployment run --watch` prints the run's logs and only the final state's name, so the
                # reason is logged once, by the outermost flow, and sent before the Failed state ends the watch.
                get_run_logger().error(message)
                APILogHandler().flush()
            return Failed(message=message, data=e)

    return failing_in_one_line


def resolve(
    config: str | None = None,
    corpus: str | list[str] | None = None,
    eval_data: str | None = None,
    artifacts: str | None = None,
    until: str | None = None,
    overrides: list[str] | None = None,
    first: str = registry.NAMES[0],
) -> Config:
    """Load and check everything the stages from `first` to `until` need before any work starts."""
    return checked(preflight.configured(config, corpus, eval_data, artifacts, until, overrides, first), first, until)


def checked(cfg: Config, first: str = registry.NAMES[0], until: str | None = None) -> Config:
    """pipeline.preflight.checked, fetching the evaluation data in a flow run by a task that retries a network
    failure; before one (cpipe run's pre-flight), without Prefect."""
    fetch = fetch_eval_data if FlowRunContext.get() else local_eval_data
    return preflight.checked(cfg, first, until, fetch)


def build(
    cfg: Config,
    stages: list[Stage],
    done: dict[str, str],
    until: str | None = None,
    run_one: Callable[[Stage, dict, dict[str, str], str], str] | None = None,
) -> bool:
    """Build every instance of each stage in turn into `done` (label -> dataset path); True once `until` is
    built. Each instance is a Prefect task, one after another (a run may continue the one before it), or all
    at once for a stage that says so; `run_one(stage, config, inputs, label)` builds them instead (a notebook,
    a test: `pipeline.stage.run_stage` without Prefect)."""
    for stage in stages:
        keys = stage.keys(cfg, done)
        if stage.side_by_side(cfg) and run_one is None:
            jobs = {
                label.replace("/", "-"): (stage.name, stage.config(cfg, key), stage.inputs(cfg, done, key))
                for label, key in keys.items()
            }
            built = run_all(jobs, cfg.artifacts, cfg.ray)
            done.update({label: built[label.replace("/", "-")] for label in keys})
        else:
            for label, key in keys.items():
                config, inputs = stage.config(cfg, key), stage.inputs(cfg, done, key)
                done[label] = (
                    run_one(stage, config, inputs, label)
                    if run_one
                    else run(stage.name, config, inputs, cfg.artifacts, label=label.replace("/", "-"), ray=cfg.ray)
                )
        if stage.name == until:
            return True
    return False


# Each flow's docstring "Args:", its deployments' parameter descriptions, is written by flows.parameters.
# The flow functions end in _flow, so that `train_flow` never reads as the train stage it builds.
@flow(name="data")
@_one_line_failure
@documented("data")
def data_flow(
    config: str | None = None,
    corpus: str | list[str] | None = None,
    eval_data: str | None = None,
    artifacts: str | None = None,
    until: str | None = None,
    overrides: list[str] | None = None,
    resolved: Config | None = None,
) -> dict[str, str]:
    """The training data: documents, tokenizer, filtered documents, [back-translations], each objective's pairs."""
    cfg = resolved or resolve(
        config, corpus, eval_data, artifacts, until or registry.in_flow("data")[-1].name, overrides
    )
    done: dict[str, str] = {}
    build(cfg, registry.in_flow("data"), done, until)
    return done


@flow(name="train")
@_one_line_failure
@documented("train")
def train_flow(
    config: str | None = None,
    corpus: str | list[str] | None = None,
    eval_data: str | None = None,
    artifacts: str | None = None,
    until: str | None = None,
    overrides: list[str] | None = None,
    resolved: Config | None = None,
    done: dict[str, str] | None = None,
) -> dict[str, str]:
    """The initial model and every run's, on the data flow's datasets (built, or reused, when not given)."""
    cfg = resolved or resolve(
        config, corpus, eval_data, artifacts, until or registry.in_flow("train")[-1].name, overrides
    )
    done = dict(done) if done is not None else data_flow(resolved=cfg)
    build(cfg, registry.in_flow("train"), done, until)
    if cfg.tracking.mlflow is not None:  # built or reused alike: the store says what it has
        track_trainings(cfg.tracking.mlflow, {k: v for k, v in done.items() if k.startswith("train/")})
    return done


@flow(name="evaluate")
@_one_line_failure
@documented("evaluate")
def evaluate_flow(
    models: list[str] | None = None,
    eval_data: str | None = None,
    config: str | None = None,
    artifacts: str | None = None,
    overrides: list[str] | None = None,
    resolved: Config | None = None,
    done: dict[str, str] | None = None,
    until: str | None = None,
) -> dict[str, str]:
    """Score models into the cumulative leaderboard: the given ones, or else the pipeline's rows."""
    cfg = resolved or resolve(
        config, None, eval_data, artifacts, None, overrides, first=registry.in_flow("evaluate")[0].name
    )
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
        if cfg.tracking.mlflow is not None:
            track_leaderboard(cfg.tracking.mlflow, done["leaderboard"])
    return done


@flow(name="full-pipeline")
@_one_line_failure
@documented(None)
def full_pipeline(
    config: str | None = None,
    corpus: str | list[str] | None = None,
    eval_data: str | None = None,
    artifacts: str | None = None,
    until: str | None = None,
    overrides: list[str] | None = None,
    resolved: Config | None = None,
) -> dict[str, str]:
    """Train and rank sentence encoders on a corpus: the data, train and evaluate flows in turn; every stage is
    cached by its fingerprint.
    """
    cfg = resolved or resolve(config, corpus, eval_data, artifacts, until, overrides)
    flow_of = {stage.name: stage.flow for stage in registry.stages()}
    done = data_flow(resolved=cfg, until=until)
    if until is not None and flow_of[until] == "data":
        return done
    done = train_flow(resolved=cfg, done=done, until=until)
    if until is not None and flow_of[until] == "train":
        return done
    return evaluate_flow(resolved=cfg, done=done, until=until)
