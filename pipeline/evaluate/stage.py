"""evaluate stage: score one encoder on every task present in the evaluation data.

Every kind (pipeline.evaluate.kinds, each declared in its module: pipeline.evaluate.kind.Kind) that the evaluate
settings turn on, in order: STS12-16 by cosine and Spearman under both aggregations, STS-B and SICK-R by cosine and
by SentEval's relatedness regressor (pipeline.evaluate.sts); the SentEval transfer tasks
(pipeline.evaluate.transfer); every task of the file kinds (retrieval, pair classification, ...) found in the data;
alignment, uniformity and anisotropy on STS-B (pipeline.evaluate.analysis). Each row carries the model's size,
objective and training corpus, so a leaderboard built from any set of these datasets explains itself.

One model's scoring splits into independent units, one per task of every kind (the analysis one in all), which the
runtime backend runs one after another here (sharing one loaded encoder) or as Ray tasks (each loading its own).
Every unit is a function of its own data and seed alone, and the rows are merged in unit order, so both write the
same dataset.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import pyarrow as pa

from pipeline import registry
from pipeline.baselines import use
from pipeline.baselines.fasttext.stage import vectors_label
from pipeline.baselines.infersent import stage as infersent_stage
from pipeline.baselines.postprocess import Flow, PostProcessed, Whitening
from pipeline.errors import ConfigError
from pipeline.evaluate import encoders, given, kinds, readouts
from pipeline.evaluate import items as test_items
from pipeline.evaluate.config import BaselineRow, EvaluateConfig
from pipeline.evaluate.progress import Progress, task_name
from pipeline.file_snapshot import snapshot
from pipeline.init.stage import init_label
from pipeline.locate import check_models, is_hub_name
from pipeline.parallel import Spread, fetch, ordered_map, share
from pipeline.progress import doing
from pipeline.repeats import seeded, split_seeded
from pipeline.stage import Stage, split_runtime
from storage import DatasetWriter, dataset_parts, read_manifest

if TYPE_CHECKING:
    from pipeline.config import Config
    from pipeline.train.config import TrainConfig

SCHEMA = pa.schema(
    [
        ("model", pa.string()),
        ("kind", pa.string()),
        ("objective", pa.string()),
        ("recipe", pa.string()),
        ("corpus", pa.string()),
        ("model_fingerprint", pa.string()),
        ("parameters", pa.int64()),
        ("dimension", pa.int32()),
        ("task", pa.string()),
        ("subset", pa.string()),
        ("split", pa.string()),
        ("metric", pa.string()),
        ("protocol", pa.string()),
        ("value", pa.float64()),
        ("n", pa.int64()),
        ("data_hash", pa.string()),
    ]
)
log = logging.getLogger("cpipe")
# How a config without a runtime (one written by hand) is scored.
RUNTIME = {"backend": "serial", "workers": 1}
# The settings every score depends on; the kinds add theirs (Kind.switch, Kind.settings: evaluate.transfer, ...).
SETTINGS = ("data", "batch_size", "max_length", "seed")


class Row(NamedTuple):
    """One leaderboard row to score: how to build its encoder (pipeline.evaluate.encoders), the datasets it reads, and
    what the leaderboard says of it."""

    name: str
    spec: dict
    inputs: dict[str, str]
    about: dict


def data_fingerprint(data: str, settings: Mapping[str, Any]) -> str:
    """A hash of the evaluation data's content, of the kinds `settings` (the evaluate settings) turn on, so changed
    files invalidate every model's scores."""
    return kinds.fingerprint(kinds.search(data, settings))


@functools.lru_cache(maxsize=8)
def _data_fingerprint(data: str, switches: tuple[tuple[str, Any], ...], listing: str) -> str:
    return data_fingerprint(data, dict(switches))


def settings() -> tuple[str, ...]:
    """The evaluate settings a score depends on: SETTINGS, then each kind's switch and its scorer's settings."""
    declared = [s for k in kinds.every_kind() for s in (k.switch, *k.settings) if s is not None]
    return tuple(dict.fromkeys((*SETTINGS, *declared)))


class EvaluateSettings(Spread, EvaluateConfig):
    """The evaluate stage's config: the evaluate settings a score depends on (`settings()`), the row scored (its name,
    how its encoder is built, what the leaderboard says of it) and the evaluation data's hash; how its units are
    spread is runtime. The section's other settings (the baselines, rank_by, ...) are no part of it: here they are
    at their defaults."""

    data_hash: str
    model: str
    spec: dict[str, Any]
    about: dict[str, Any]


def _switches(ev: EvaluateConfig) -> dict[str, Any]:
    """The evaluate settings that turn kinds on (evaluate.transfer, evaluate.analysis)."""
    return {k.switch: getattr(ev, k.switch) for k in kinds.every_kind() if k.switch is not None}


def config(cfg: Config, row: Row) -> dict:
    """evaluate.workers > 1 runs the units on Ray; as a runtime setting it leaves the fingerprint, and so the
    cached scores, as they are. The data's hash is read once per content (its files' sizes and times), not per
    model."""
    ev = cfg.evaluate
    data = _data_fingerprint(ev.data, tuple(_switches(ev).items()), json.dumps(snapshot(ev.data)))
    return split_runtime(
        RUNTIME,
        {
            **{k: getattr(ev, k) for k in settings()},
            "data_hash": data,
            "model": row.name,
            "spec": row.spec,
            "about": row.about,
            "backend": "ray" if ev.workers > 1 else "serial",
            "workers": ev.workers,
        },
    )


def inputs(cfg: Config, done: dict[str, str], row: Row) -> dict[str, str]:
    return row.inputs


def needs_ray(settings: EvaluateSettings) -> bool:
    return settings.backend == "ray"


def side_by_side(cfg: Config) -> bool:
    """With evaluate.workers > 1 the models are scored at once, each fanning its units out on Ray."""
    return cfg.evaluate.workers > 1


def check(cfg: Config) -> None:
    """Before any work: evaluation data exists and every task's files parse, of every kind the run scores (or the
    run would train models before failing), and a USE row can be loaded here."""
    if not cfg.evaluate.data:
        raise ConfigError("no evaluation data: pass --eval-data DIR or set evaluate.data")
    kinds.search(cfg.evaluate.data, _switches(cfg.evaluate))
    if cfg.evaluate.baselines.use is not None and (why := use.problem(cfg.evaluate.baselines.use.path)):
        raise ConfigError(f"evaluate.baselines.use.path: {why}")


def trained_about(r: TrainConfig, corpus: str, selected: str | None = None) -> dict:
    """A run's leaderboard row: an MLM-only run is named as such, not by the pairs whose anchors it reads; the
    recipe says which run it continued and, for a dev-selected run, the step it exported and its dev score."""
    recipe = r.recipe() + (f", from {r.init_from}" if r.init_from else "") + (f", {selected}" if selected else "")
    return {"objective": r.pairs if r.contrastive else f"mlm ({r.pairs} anchors)", "recipe": recipe, "corpus": corpus}


def model_row(name: str, path: str, pooling: str | None = None) -> Row:
    """Any Hugging Face or sentence-transformers model: a local directory, or a hub name; a run's train dataset
    says its run's objective (pipeline.evaluate.given)."""
    spec = {
        "kind": "model",
        "path": path,
        "pooling": pooling,
        "snapshot": [path] if is_hub_name(path) else snapshot(path),
    }
    trained = given.trained_about(path) or {"objective": "pretrained"}
    return Row(name, spec, {}, {**trained, "recipe": f"{pooling or 'declared'} pooling"})


def user_models(models: list[str]) -> dict[str, str]:
    """`model/<row name>` -> directory or hub name, for `cpipe evaluate --model ...` (given.rows names them).
    Before any work, each is a model directory, or a hub model downloaded into the hub's cache (pipeline.locate)."""
    check_models(models)
    return {f"model/{name}": path for name, path in given.rows(models).items()}


def instances(cfg: Config, done: dict[str, str]) -> dict[str, Row]:
    """Every row of the leaderboard: the models given as `model/<name>` (`cpipe evaluate --model`), or else the
    pipeline's: the runs, the untrained model, the baselines."""
    given = [model_row(k.split("/", 1)[1], path) for k, path in done.items() if k.startswith("model/")]
    rows = given + reference_readouts(cfg, given, {}) if given else pipeline_rows(cfg, done)
    return {f"evaluate/{r.name}": r for r in rows}


def _repeats(name: str, seeds: list[int]) -> list[tuple[str, int]]:
    """(row name, seed) of a row built once per seed: named as the row for one seed, "<row> (seed s)" for several."""
    return [(name if len(seeds) == 1 else seeded(name, s), s) for s in seeds]


def _selection(train: str) -> str | None:
    """A run's dev selection, as its train dataset's manifest says it: the train stage's `describe`, found through
    the stage registry (evaluate sits left of train in the package order and imports none of it)."""
    return registry.stage("train").describe(read_manifest(train))


def pipeline_rows(cfg: Config, done: dict[str, str]) -> list[Row]:
    trainings = cfg.trainings()
    rows = [
        Row(
            row,
            {"kind": "trained"},
            {"model": path},
            trained_about(trainings[row].config, _corpus(done), _selection(path)),
        )
        for row, path in ((k.split("/", 1)[1], v) for k, v in done.items() if k.startswith("train/"))
    ]
    ev, base = cfg.evaluate, cfg.evaluate.baselines
    for b in ev.baseline_rows(cfg.initial_name()):
        rows += BASELINES[b.kind](cfg, done, b)
    for pp in base.postprocess:  # a row with repeats is post-processed repeat by repeat
        model = cfg.postprocessed(pp.model)
        for r in [r for r in rows if split_seeded(r.name)[0] == model and "postprocess" not in r.spec]:
            row, seed = split_seeded(r.name)
            name = f"{row}+{pp.kind}" if seed is None else seeded(f"{row}+{pp.kind}", seed)
            rows.append(
                Row(
                    name,
                    {**r.spec, "postprocess": pp.model_dump(exclude={"model"})},
                    {**r.inputs, "corpus": done["decontaminate"]},
                    {**r.about, "recipe": pp.kind},
                )
            )
    return rows + reference_readouts(cfg, rows, trainings)


def _untrained(cfg: Config, done: dict[str, str], b: BaselineRow) -> list[Row]:
    about = initial_row(cfg)[1]
    return [
        Row(row, {"kind": b.kind}, {"model": done[init_label(s)]}, about)
        for row, s in _repeats(b.name, cfg.init_seeds())
    ]


def _fasttext(cfg: Config, done: dict[str, str], b: BaselineRow) -> list[Row]:
    settings = cfg.evaluate.fasttext
    about = {
        "objective": "fastText skipgram",
        "corpus": _corpus(done),
        # fastText needs >= 11 threads here (DESIGN.md), and threads race on the weights
        "recipe": f"dim {settings.dim}, {settings.threads} threads: not bit-reproducible",
    }
    return [
        Row(row, {"kind": b.kind}, {"model": done[vectors_label(s)]}, about)
        for row, s in _repeats(b.name, cfg.baseline_seeds())
    ]


def _infersent(cfg: Config, done: dict[str, str], b: BaselineRow) -> list[Row]:
    """A repeat whose model was built: none without NLI data to train on (infersent_stage.instances)."""
    rows = []
    for row, s in _repeats(b.name, cfg.baseline_seeds()):
        if (built := done.get(infersent_stage.infersent_label(s))) is not None:
            about = infersent_stage.about(infersent_stage.STAGE.settings_of(read_manifest(built)["config"]))
            vectors = {} if cfg.evaluate.baselines.infersent.vectors else {"corpus": _corpus(done)}
            rows.append(Row(row, {"kind": b.kind}, {"model": built}, {**about, **vectors}))
    return rows


def _random(cfg: Config, done: dict[str, str], b: BaselineRow) -> list[Row]:
    spec = {"kind": b.kind, "dim": cfg.evaluate.baselines.random_dim, "seed": 0}
    return [Row(b.name, spec, {}, {"objective": "none (random)"})]


def _vectors(cfg: Config, done: dict[str, str], b: BaselineRow) -> list[Row]:
    spec = {"kind": b.kind, "path": b.source, "snapshot": snapshot(b.source)}
    return [Row(b.name, spec, {}, {"objective": "pretrained word vectors"})]


def _model(cfg: Config, done: dict[str, str], b: BaselineRow) -> list[Row]:
    return [model_row(b.name, b.source.path, b.source.pooling)]


def _use(cfg: Config, done: dict[str, str], b: BaselineRow) -> list[Row]:
    spec = {"kind": b.kind, "path": b.source, "snapshot": snapshot(b.source)}
    about = {"objective": "pretrained (Universal Sentence Encoder)", "recipe": f"TF SavedModel {Path(b.source).name}"}
    return [Row(b.name, spec, {}, about)]


# The rows of each kind of baseline row (EvaluateConfig.baseline_rows): a row built once per seed has its repeats.
BASELINES: dict[str, Callable[[Config, dict[str, str], BaselineRow], list[Row]]] = {
    "untrained": _untrained,
    "fasttext": _fasttext,
    "infersent": _infersent,
    "random": _random,
    "vectors": _vectors,
    "model": _model,
    "use": _use,
}


def row_readout(row: Row, trainings: dict) -> str | None:
    """A row's readout (pipeline.evaluate.readouts); a post-processed run's is its run's."""
    name, seed = split_seeded(row.name)
    if "postprocess" in row.spec:
        name = name.rsplit("+", 1)[0]
    training = trainings.get(name if seed is None else seeded(name, seed))
    return readouts.of_spec(
        row.spec,
        None if training is None else {"pooling": training.config.pooling, "keep_head": training.config.keep_head},
    )


def reference_readouts(cfg: Config, rows: list[Row], trainings: dict) -> list[Row]:
    """The reference row (evaluate.compare_to, else the initial encoder's) once more under each other pooling that
    a compared row uses, each repeat of it, so that every difference is taken under one readout. No rows where the
    reference's readout is fixed (pipeline.evaluate.readouts.variable)."""
    reference = cfg.evaluate.compare_to or (initial_row(cfg)[0] if cfg.evaluate.untrained else None)
    theirs = [r for r in rows if split_seeded(r.name)[0] == reference and "postprocess" not in r.spec]
    if not theirs or not readouts.variable(theirs[0].spec, own := row_readout(theirs[0], trainings)):
        return []
    used = {readouts.pooling(row_readout(r, trainings)) for r in rows if split_seeded(r.name)[0] != reference}
    return [
        Row(
            readouts.variant(r.name, p),
            readouts.variant_spec(r.spec, p),
            r.inputs,
            {**r.about, "recipe": "; ".join(filter(None, [r.about.get("recipe"), f"read by {p} pooling"]))},
        )
        for p in sorted(used - {None, readouts.pooling(own)})
        for r in theirs
    ]


def initial_row(cfg: Config) -> tuple[str, dict]:
    """The name and description of the encoder the runs start from: "untrained" when built from scratch, the base
    model's own name (and "pretrained") when model.base is set, since a pretrained model is no untrained one."""
    if cfg.model.base is None:
        return cfg.initial_name(), {"objective": "none (initial weights)"}
    return cfg.initial_name(), {
        "objective": "pretrained (model.base, before training)",
        "recipe": f"model.base {cfg.model.base}",
    }


def _corpus(done: dict[str, str]) -> str:
    return dataset_parts(done["decontaminate"])[2]


@dataclass(frozen=True)
class Recipe:
    """How a unit in another process, or on another machine, builds the encoder. A post-processed encoder's
    fitted transform travels in the recipe itself, not as the file kept beside the scores, which need not be
    visible where the unit runs."""

    spec: dict
    inputs: dict
    max_length: int
    transform: Whitening | Flow | None = None

    def load(self):
        encoder = encoders.load(self.spec, self.inputs, self.max_length)
        return encoder if self.transform is None else PostProcessed(encoder, self.transform)


@dataclass(frozen=True)
class Unit:
    """One independently scored part of a model's evaluation: `score(encode)` returns its rows."""

    model: str
    name: str
    score: Callable[[Callable], list[dict]]
    encoder: Any  # a loaded encoder (units run in this process), else a Recipe as pipeline.parallel.share gives it
    batch_size: int


class Scored(NamedTuple):
    rows: list[dict]
    items: list[test_items.Items]
    dimensions: set[int]
    parameters: int
    where: dict


class Embed:
    """What a unit scores with: called, the encoder's sentence embeddings; `tokens`, its token representations;
    `items`, where its scorer leaves the per-item test outputs (pipeline.evaluate.items)."""

    def __init__(self, encoder, batch_size: int):
        self.encoder, self.batch_size, self.dimensions = encoder, batch_size, set()
        self.items: list[test_items.Items] = []

    def __call__(self, sentences: list[str]):
        vectors = self.encoder.encode(sentences, batch_size=self.batch_size)
        self.dimensions.add(vectors.shape[1])
        return vectors

    def tokens(self, sentences: list[str]):
        return encoders.token_vectors(self.encoder, sentences, self.batch_size)


def score_unit(unit: Unit) -> Scored:
    started = time.monotonic()
    with doing(f"evaluate {unit.model}: {task_name(unit.name)}"):  # what the loops inside say they work for
        source = fetch(unit.encoder)
        encoder = source.load() if isinstance(source, Recipe) else source
        embed = Embed(encoder, unit.batch_size)
        rows = unit.score(embed)
    where = {
        "unit": unit.name,
        "pid": os.getpid(),
        "ray_task": _ray_task(),
        "seconds": round(time.monotonic() - started, 3),
    }
    return Scored(rows, embed.items, embed.dimensions, encoder.parameters, where)


def _kind(embed: Embed, task: kinds.Task, seed: int, settings: dict) -> list[dict]:
    return kinds.kind(task.kind).score(task, embed, seed, **settings)


def _ray_task() -> str | None:
    """The Ray task this runs as, if any, so that the manifest shows where each unit ran."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    context = ray.get_runtime_context()
    return context.get_task_id() if context.worker.mode == ray.WORKER_MODE else None


def units(settings: EvaluateSettings, found: list[kinds.Found], encoder) -> list[Unit]:
    """One unit per task of every kind found (kinds.search), in the order their rows are written, each scored with
    the run's seed and the settings its kind declares (by their names)."""
    return [
        Unit(
            settings.model,
            f.kind.unit(t),
            partial(_kind, task=t, seed=settings.seed, settings={s: getattr(settings, s) for s in f.kind.settings}),
            encoder,
            settings.batch_size,
        )
        for f in found
        for t in f.tasks
    ]


def _encoder(settings: EvaluateSettings, inputs: dict, out):
    """What the units encode with: the encoder itself when they run in this process, else the Recipe they build it
    from, shared rather than copied into each unit (a flow fitted on 768 dimensions pickles to 60 MB)."""
    spec = settings.spec
    recipe, encoder = Recipe(spec, inputs, settings.max_length), None
    if spec.get("postprocess"):  # fitted once, here, whatever the backend
        encoder = encoders.post_processed(
            recipe.load(), spec["postprocess"], inputs["corpus"], out.local_dir, settings.batch_size, out
        )
        recipe = replace(recipe, transform=encoder.transform)
    if settings.backend != "serial":
        return share(recipe, settings.backend)
    return encoder if encoder is not None else recipe.load()


def _score(todo: list[Unit], settings: EvaluateSettings) -> list[Scored]:
    """Every unit's rows, in unit order, saying as each comes back which task it was and how long it took."""
    progress, scored = Progress(settings.model, len(todo)), []
    try:
        for s in ordered_map(score_unit, todo, settings.backend, settings.workers):
            progress.finished(s.where["unit"], s.where["seconds"])
            scored.append(s)
    finally:
        progress.close()
    return scored


def run(settings: EvaluateSettings, inputs: dict[str, str], out: DatasetWriter) -> None:
    found = kinds.search(settings.data, _switches(settings))
    todo = units(settings, found, _encoder(settings, inputs, out))
    scored = _score(todo, settings)
    rows = [row for s in scored for row in s.rows]
    for f in found:  # rows made of every unit's (the transfer average), so only once every unit is back
        rows += f.kind.summary(rows) if f.kind.summary is not None else []
    [dimension] = set().union(*(s.dimensions for s in scored))
    fingerprint = dataset_parts(inputs["model"])[2] if "model" in inputs else out.fp
    model = {
        "model": settings.model,
        "kind": settings.spec["kind"],
        "parameters": scored[0].parameters,
        "dimension": dimension,
        "model_fingerprint": fingerprint,
        "data_hash": settings.data_hash,
        **{k: settings.about.get(k) for k in ("objective", "recipe", "corpus")},
    }
    out.write([{**row, **model} for row in rows])
    test_items.write([it for s in scored for it in s.items], out.local_dir)
    absent = [name for f in found for name in f.absent]
    out.extra["absent_tasks"] = absent
    out.extra["units"] = [s.where for s in scored]
    log.info(
        "evaluate: %s on %s in %d units (%s, %d workers; absent: %s)",
        settings.model,
        ", ".join(f"{len(f.tasks)} {f.kind.name}" for f in found if f.tasks),  # a kind the data lacks is no news
        len(todo),
        settings.backend,
        settings.workers,
        ", ".join(absent) or "none",
    )


# 3: STS is encoded task by task, one batch set per task, which can move the last bits of a score.
# 4: transfer tasks by SentEval's PyTorch classifier (transfer_protocol), on samples read and ordered as SentEval's;
# STS-B/SICK-R "cosine" and SentEval's regressor ("senteval"); anisotropy is Ethayarajh's (token level).
# 6: the test items' predictions and gold scores or labels beside the scores (items.parquet), for the bootstrap;
# the initial encoder's row is named for its base model when there is one.
STAGE = Stage(
    name="evaluate",
    version="7",
    flow="evaluate",
    section="evaluate",
    settings=EvaluateSettings,
    config=config,
    inputs=inputs,
    instances=instances,
    run=run,
    schema=SCHEMA,
    runtime=RUNTIME,
    check=check,
    needs_ray=needs_ray,
    side_by_side=side_by_side,
)
