"""The `full-pipeline` flow: corpus -> tokenizer -> filter -> [backtranslate] -> augment -> init -> train -> evaluate
-> leaderboard."""

from __future__ import annotations

import functools
import logging
from pathlib import Path

import tasks  # noqa: F401  (sets logging before prefect is imported)

from prefect import flow, get_run_logger

from pipeline import augment as augment_stage
from pipeline import backtranslate as backtranslate_stage
from pipeline import corpus as corpus_stage
from pipeline import devset
from pipeline import encoders
from pipeline import evaluate as evaluate_stage
from pipeline import infersent_stage
from pipeline.config import STAGES, Config, ConfigError, TrainConfig, load_config
from pipeline.eval_data import local_eval_data
from pipeline.stage import stage_path
from pipeline.stages import STAGES as STAGE_MODULES
from pipeline.sts import find_sts
from pipeline.transfer_data import find_transfer
from storage import check_writable, read_manifest
from tasks.stages import built, evaluate_on_ray, publish_leaderboard, run, start_ray


def resolve(config: str | None = None, corpus: str | list[str] | None = None, eval_data: str | None = None,
            artifacts: str | None = None, until: str | None = None, overrides: list[str] | None = None) -> Config:
    """Load and check everything a run needs before any work starts."""
    if until is not None and until not in STAGES:
        raise ConfigError(f"--until {until}: unknown stage (stages: {', '.join(STAGES)})")
    sources = [corpus] if isinstance(corpus, str) else corpus
    cfg = load_config(config, overrides, **{"artifacts": artifacts, "corpus.sources": sources or None,
                                            "evaluate.data": eval_data})
    check_writable(cfg.artifacts)
    corpus_stage.stage_config(cfg.corpus.model_dump())  # sources exist and are readable
    reaches = STAGES.index(until or STAGES[-1]) >= STAGES.index("backtranslate")
    if reaches and any(r.objective == "cert" for r in cfg.run_configs().values()):
        backtranslate_stage.stage_config(cfg.backtranslate.model_dump())  # the backend can run its models
    if STAGES.index(until or STAGES[-1]) >= STAGES.index("train"):
        cfg.evaluate.data = local_eval_data(cfg.evaluate.data, cfg.corpus.download_dir)  # URLs: fetched once
        for r in cfg.run_configs().values():
            if r.eval_every is not None:
                devset.find_dev(r.dev_set, cfg.evaluate.data)  # before any work, not when training starts
    if STAGES.index(until or STAGES[-1]) >= STAGES.index("evaluate"):
        if not cfg.evaluate.data:
            raise ConfigError("no evaluation data: pass --eval-data DIR or set evaluate.data")
        find_sts(cfg.evaluate.data)
        if cfg.evaluate.transfer:
            find_transfer(cfg.evaluate.data)  # every file parses, or the run would train models before failing
    return cfg


def trainings(cfg: Config, runs: dict[str, TrainConfig], pairs: dict[str, str], init: str,
              a: str) -> dict[str, tuple[dict, dict]]:
    """Each run's train config and inputs, parents first. A continuing run's init is its parent's train dataset,
    so the parent's fingerprint is part of the child's; init_from itself stays out of the config, so renaming the
    parent, or adding the setting to a config, rebuilds nothing. A dev-selected run's config holds its dev set."""
    jobs: dict[str, tuple[dict, dict]] = {}
    for name in cfg.training_order():
        r = runs[name]
        start = stage_path(STAGE_MODULES["train"], *jobs[r.init_from], a) if r.init_from else init
        dev = devset.stage_config(r.model_dump(), cfg.evaluate.data, cfg.evaluate.max_length)
        jobs[name] = ({"train": r.model_dump(exclude={"init_from"}), **({"dev": dev} if dev else {})},
                      {"pairs": pairs[r.pairs], "init": start})
    return jobs


def trained_about(r: TrainConfig, corpus: str, selected: str | None = None) -> dict:
    """A run's leaderboard row: an MLM-only run is named as such, not by the pairs whose anchors it reads; the
    recipe says which run it continued and, for a dev-selected run, the step it exported and its dev score."""
    recipe = r.recipe() + (f", from {r.init_from}" if r.init_from else "") + (f", {selected}" if selected else "")
    return {"objective": r.pairs if r.contrastive else f"mlm ({r.pairs} anchors)", "recipe": recipe, "corpus": corpus}


def evaluations(cfg: Config, runs: dict, models: dict[str, str], done: dict[str, str], a: str) -> dict:
    """name -> (encoder spec, stage inputs, what the leaderboard says of it) for every row to score."""
    corpus = done["filter"].rstrip("/").rsplit("/", 1)[-1]
    jobs = {name: ({"kind": "trained"}, {"model": path}, trained_about(runs[name], corpus, devset.selected(read_manifest(path))))
            for name, path in models.items()}
    ev, base = cfg.evaluate, cfg.evaluate.baselines
    ft = ev.fasttext.model_dump(exclude={"enabled"})

    @functools.cache  # the fastText row and InferSent's vectors share one baseline task
    def fasttext() -> str:
        return run("baseline", ft, {"documents": done["filter"]}, a)

    if ev.untrained:
        jobs["untrained"] = ({"kind": "untrained"}, {"model": done["init"]}, {"objective": "none (initial weights)"})
    if ev.fasttext.enabled:
        jobs["fasttext-bow"] = ({"kind": "fasttext"}, {"model": fasttext()},
                                {"objective": "fastText skipgram", "corpus": corpus,
                                 # fastText needs >= 11 threads here (DESIGN.md), and threads race on the weights
                                 "recipe": f"dim {ft['dim']}, {ft['threads']} threads: not bit-reproducible"})
    if base.infersent.enabled:
        nli = infersent_stage.stage_config(base.infersent.model_dump(), ev.data)
        if nli is None:
            logging.getLogger("cpipe").warning("infersent: no NLI data (no SICK_train.txt and SICK_trial.txt under "
                                               "evaluate.data, no evaluate.baselines.infersent.nli): row left out")
        else:
            inputs = {} if nli["vectors"] else {"vectors": fasttext()}
            about = {**infersent_stage.about(nli), **({} if nli["vectors"] else {"corpus": corpus})}
            jobs["infersent"] = ({"kind": "infersent"}, {"model": run("infersent", nli, inputs, a)}, about)
    if base.random:
        jobs["random"] = ({"kind": "random", "dim": base.random_dim, "seed": 0}, {}, {"objective": "none (random)"})
    for path in base.vectors:
        spec = {"kind": "vectors", "path": path, "snapshot": encoders.snapshot(path)}
        jobs[f"vectors-{Path(path).stem}"] = (spec, {}, {"objective": "pretrained word vectors"})
    for m in base.models:
        spec = {"kind": "model", "path": m.path, "pooling": m.pooling, "snapshot": encoders.snapshot(m.path)}
        jobs[m.name] = (spec, {}, {"objective": "pretrained", "recipe": f"{m.pooling or 'declared'} pooling"})
    for pp in base.postprocess:
        spec, inputs, about = jobs[pp.model]
        jobs[f"{pp.model}+{pp.kind}"] = ({**spec, "postprocess": pp.model_dump(exclude={"model"})},
                                         {**inputs, "corpus": done["filter"]}, {**about, "recipe": pp.kind})
    return jobs


@flow(name="full-pipeline")
def full_pipeline(config: str | None = None, corpus: str | list[str] | None = None, eval_data: str | None = None,
                  artifacts: str | None = None, until: str | None = None,
                  overrides: list[str] | None = None) -> dict[str, str]:
    """Train and rank sentence encoders on a corpus; every stage is cached by its fingerprint."""
    log = get_run_logger()
    cfg = resolve(config, corpus, eval_data, artifacts, until, overrides)
    a = cfg.artifacts
    done: dict[str, str] = {}

    def finished(stage: str) -> bool:
        return until == stage

    parallel = cfg.parallel.model_dump()

    def ray_for(stage: str, config: dict, inputs: dict) -> None:
        """Data stages on Ray go to the configured cluster, not to a local instance Ray would start by itself."""
        if cfg.parallel.backend == "ray" and not built(stage, config, inputs, a):
            start_ray(cfg.ray.address, cfg.ray.num_cpus)

    corpus_config = corpus_stage.stage_config(cfg.corpus.model_dump(), parallel)
    ray_for("corpus", corpus_config, {})
    done["corpus"] = run("corpus", corpus_config, {}, a)
    if finished("corpus"):
        return done
    scratch = cfg.model.base is None
    done["tokenizer"] = run("tokenizer", {"base": cfg.model.base, **cfg.tokenizer.model_dump()},
                            {"corpus": done["corpus"]} if scratch else {}, a)
    if finished("tokenizer"):
        return done
    filter_config = {**cfg.filter.model_dump(), "runtime": {**parallel, "download_dir": cfg.corpus.download_dir}}
    filter_inputs = {"corpus": done["corpus"], "tokenizer": done["tokenizer"]}
    ray_for("filter", filter_config, filter_inputs)
    done["filter"] = run("filter", filter_config, filter_inputs, a)
    if finished("filter"):
        return done
    runs = cfg.run_configs()
    objectives = sorted({r.objective for r in runs.values()})
    if "cert" in objectives:
        bt_config = backtranslate_stage.stage_config(cfg.backtranslate.model_dump())
        if cfg.backtranslate.workers and not built("backtranslate", bt_config, {"documents": done["filter"]}, a):
            start_ray(cfg.ray.address, cfg.ray.num_cpus)  # its actor pool runs on Ray
        done["backtranslate"] = run("backtranslate", bt_config, {"documents": done["filter"]}, a)
    if finished("backtranslate"):
        return done
    pairs = {}  # one dataset per objective (and CLEAR combination) the runs use
    for r in runs.values():
        if r.pairs not in pairs:
            pairs[r.pairs] = run("augment", augment_stage.stage_config(cfg.augment.model_dump(), r.objective, r.views),
                                 augment_stage.inputs_for(r.objective, done), a, label=f"augment-{r.pairs}")
    done.update({f"augment/{k}": v for k, v in pairs.items()})
    if finished("augment"):
        return done
    done["init"] = run("init", cfg.model.model_dump(), {"tokenizer": done["tokenizer"]}, a)
    if finished("init"):
        return done
    plan = trainings(cfg, runs, pairs, done["init"], a)
    if not all(built("train", *job, a) for job in plan.values()):
        start_ray(cfg.ray.address, cfg.ray.num_cpus)  # only when something trains: a rerun needs no Ray
    models: dict[str, str] = {}
    for name, (config, inputs) in plan.items():
        if parent := runs[name].init_from:  # the parent task's own result: Prefect draws the child waiting on it
            inputs = {**inputs, "init": models[parent]}
        models[name] = run("train", config, inputs, a, label=f"train-{name}")
    done.update({f"train/{k}": v for k, v in models.items()})
    if finished("train"):
        return done
    jobs = evaluations(cfg, runs, models, done, a)
    data_hash = evaluate_stage.data_fingerprint(cfg.evaluate.data, cfg.evaluate.transfer)  # read once, not per model
    configs = {name: evaluate_stage.stage_config(cfg.evaluate.model_dump(), data_hash, name, spec, about)
               for name, (spec, _, about) in jobs.items()}
    pending = [(configs[n], jobs[n][1]) for n in jobs if not built("evaluate", configs[n], jobs[n][1], a)]
    if cfg.evaluate.workers > 1 and pending:  # models as Ray tasks, each fanning its own tasks out on Ray
        start_ray(cfg.ray.address, cfg.ray.num_cpus)
        evaluate_on_ray(pending, a, cfg.evaluate.workers)  # the runs below then find them built
    scores = {f"scores-{name}": run("evaluate", configs[name], inputs, a, label=f"evaluate-{name}")
              for name, (_, inputs, _) in jobs.items()}
    done.update({f"evaluate/{k}": v for k, v in scores.items()})
    if finished("evaluate"):
        return done
    done["leaderboard"] = run("leaderboard", {"rank_by": cfg.evaluate.rank_by}, scores, a)
    done["leaderboard.md"] = publish_leaderboard(done["leaderboard"], a)
    log.info("leaderboard written to %s", done["leaderboard.md"])
    return done
