"""The flows: `data` (corpus -> tokenizer -> filter -> [backtranslate] -> augment), `train` (init -> the runs),
`evaluate` (score models into the leaderboard), and `full-pipeline`, which runs the three in turn.

Each stage module says what it builds (pipeline.stage); a flow only lists stages in order."""

from __future__ import annotations

import tasks  # noqa: F401  (sets logging before prefect is imported)

from prefect import flow, get_run_logger

from pipeline.backtranslate import stage as backtranslate
from pipeline.config import Config, load_config
from pipeline.corpus import stage as corpus_stage
from pipeline.errors import ConfigError
from pipeline.evaluate import stage as evaluate_stage
from pipeline.evaluate.data import local_eval_data
from pipeline.evaluate.sts import find_sts
from pipeline.evaluate.transfer_data import find_transfer
from pipeline.stage import instances
from pipeline.stages import STAGES as STAGE_MODULES
from pipeline.train import devset
from storage import check_writable
from tasks.stages import publish_leaderboard, run, run_all

DATA = ("corpus", "tokenizer", "filter", "backtranslate", "augment")
TRAIN = ("init", "train")
ROWS = ("baseline", "infersent")  # the baselines that are trained before they are scored
STAGES = tuple(name for name in STAGE_MODULES if name not in ROWS)  # what --until can name, in order


def resolve(config: str | None = None, corpus: str | list[str] | None = None, eval_data: str | None = None,
            artifacts: str | None = None, until: str | None = None, overrides: list[str] | None = None,
            first: str = "corpus") -> Config:
    """Load and check everything the stages from `first` to `until` need before any work starts."""
    if until is not None and until not in STAGES:
        raise ConfigError(f"--until {until}: unknown stage (stages: {', '.join(STAGES)})")
    sources = [corpus] if isinstance(corpus, str) else corpus
    cfg = load_config(config, overrides, **{"artifacts": artifacts, "corpus.sources": sources or None,
                                            "evaluate.data": eval_data})
    check_writable(cfg.artifacts)

    def reaches(stage: str) -> bool:
        return STAGES.index(first) <= STAGES.index(stage) <= STAGES.index(until or STAGES[-1])

    if reaches("corpus"):
        corpus_stage.check(cfg)  # sources exist and are readable
    if reaches("backtranslate") and backtranslate.instances(cfg, {}):
        backtranslate.config(cfg)  # the backend can run its models
    if reaches("train") or reaches("evaluate"):
        cfg.evaluate.data = local_eval_data(cfg.evaluate.data, cfg.corpus.download_dir)  # URLs: fetched once
    if reaches("train"):
        for r in cfg.run_configs().values():
            if r.eval_every is not None:
                devset.find_dev(r.dev_set, cfg.evaluate.data)  # before any work, not when training starts
    if reaches("evaluate"):
        if not cfg.evaluate.data:
            raise ConfigError("no evaluation data: pass --eval-data DIR or set evaluate.data")
        find_sts(cfg.evaluate.data)
        if cfg.evaluate.transfer:
            find_transfer(cfg.evaluate.data)  # every file parses, or the run would train models before failing
    return cfg


def build(cfg: Config, stages: tuple[str, ...], done: dict[str, str], until: str | None = None) -> bool:
    """Build every instance of each stage in turn into `done` (label -> dataset path); True once `until`
    is built."""
    for name in stages:
        stage = STAGE_MODULES[name]
        for label, key in instances(stage, cfg, done).items():
            done[label] = run(name, stage.config(cfg, *key), stage.inputs(done, cfg, *key), cfg.artifacts,
                              label=label.replace("/", "-"), ray=cfg.ray)
        if name == until:
            return True
    return False


def score(cfg: Config, rows: list[evaluate_stage.Row], done: dict[str, str]) -> dict[str, str]:
    """Every row's evaluate stage through Prefect, then the leaderboard: with evaluate.workers > 1 the models
    are scored at once, each fanning its units out on Ray; one after another otherwise."""
    jobs = {f"evaluate-{r.name}": ("evaluate", evaluate_stage.config(cfg, r), evaluate_stage.inputs(done, cfg, r))
            for r in rows}
    if cfg.evaluate.workers > 1:
        paths = run_all(jobs, cfg.artifacts, cfg.ray)
    else:
        paths = {label: run(*job, cfg.artifacts, label=label, ray=cfg.ray) for label, job in jobs.items()}
    return {f"evaluate/{r.name}": paths[f"evaluate-{r.name}"] for r in rows}


def leaderboard(cfg: Config, done: dict[str, str]) -> dict[str, str]:
    board = STAGE_MODULES["leaderboard"]
    path = run("leaderboard", board.config(cfg), board.inputs(done, cfg), cfg.artifacts)
    markdown = publish_leaderboard(path, cfg.artifacts)
    get_run_logger().info("leaderboard written to %s", markdown)
    return {"leaderboard": path, "leaderboard.md": markdown}


# The flow functions end in _flow: Prefect loads this file as a module named `pipeline`, where a function
# named `train` would shadow the train stage for `from pipeline import train`.
@flow(name="data")
def data_flow(config: str | None = None, corpus: str | list[str] | None = None, artifacts: str | None = None,
         until: str | None = None, overrides: list[str] | None = None, resolved: Config | None = None) -> dict[str, str]:
    """The training data: documents, tokenizer, filtered documents, [back-translations], each objective's pairs."""
    cfg = resolved or resolve(config, corpus, None, artifacts, until or "augment", overrides)
    done: dict[str, str] = {}
    build(cfg, DATA, done, until)
    return done


@flow(name="train")
def train_flow(config: str | None = None, corpus: str | list[str] | None = None, eval_data: str | None = None,
          artifacts: str | None = None, until: str | None = None, overrides: list[str] | None = None,
          resolved: Config | None = None, done: dict[str, str] | None = None) -> dict[str, str]:
    """The initial model and every run's, on the data flow's datasets (`done`; built, or reused, when not given)."""
    cfg = resolved or resolve(config, corpus, eval_data, artifacts, until or "train", overrides)
    done = dict(done) if done is not None else data_flow(resolved=cfg)
    build(cfg, TRAIN, done, until)
    return done


@flow(name="evaluate")
def evaluate_flow(models: list[str] | None = None, eval_data: str | None = None, config: str | None = None,
             artifacts: str | None = None, overrides: list[str] | None = None, resolved: Config | None = None,
             done: dict[str, str] | None = None, until: str | None = None) -> dict[str, str]:
    """Score `models` (model directories or hub names, HF or sentence-transformers), or else the pipeline's
    rows on the train flow's datasets (`done`), and add them to the cumulative leaderboard."""
    cfg = resolved or resolve(config, None, eval_data, artifacts, None, overrides, first="evaluate")
    if models:
        rows, done = evaluate_stage.user_rows(models), {}
    else:
        done = dict(done) if done is not None else train_flow(resolved=cfg)
        build(cfg, ROWS, done)
        rows = [key[0] for key in evaluate_stage.instances(cfg, done).values()]
    done = {**done, **score(cfg, rows, done)}
    if until == "evaluate":
        return done
    return {**done, **leaderboard(cfg, done)}


@flow(name="full-pipeline")
def full_pipeline(config: str | None = None, corpus: str | list[str] | None = None, eval_data: str | None = None,
                  artifacts: str | None = None, until: str | None = None, overrides: list[str] | None = None,
                  resolved: Config | None = None) -> dict[str, str]:
    """Train and rank sentence encoders on a corpus; every stage is cached by its fingerprint."""
    cfg = resolved or resolve(config, corpus, eval_data, artifacts, until, overrides)
    done = data_flow(resolved=cfg, until=until)
    if until in DATA:
        return done
    done = train_flow(resolved=cfg, done=done, until=until)
    if until in TRAIN:
        return done
    return evaluate_flow(resolved=cfg, done=done, until=until)
