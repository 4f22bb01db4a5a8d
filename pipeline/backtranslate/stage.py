"""backtranslate stage (CERT): every sentence of the filtered documents to each pivot language and back.

Sentences are cut into chunks of `chunk_size`; a chunk's input and its
translations are files in the stage's work directory, each written whole
(temporary name, then rename), so a killed run resumes at the first chunk
without translations. `BackTranslator` translates one chunk; the same class
runs in this process (`workers: 0`) or as a Ray Data actor pool holding one
model replica per actor (and per GPU with `use_gpu`).
"""

from __future__ import annotations

import json
import logging
import os
from itertools import islice
from typing import TYPE_CHECKING, Literal

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import Field

from pipeline.backtranslate.config import BacktranslateConfig, Generation
from pipeline.backtranslate.translate import check_backend, load_translator
from pipeline.corpus.sentences import SPREAD, sentences
from pipeline.objectives import objective
from pipeline.progress import Progress
from pipeline.stage import AT_RUNTIME, Stage, stage_config

if TYPE_CHECKING:
    from pipeline.config import Config
    from storage import DatasetWriter

SEGMENT_SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()),
        ("segment_id", pa.string()),
        ("start", pa.int32()),
        ("end", pa.int32()),
        ("text", pa.string()),
    ]
)
SCHEMA = (
    SEGMENT_SCHEMA.append(pa.field("bt_text", pa.string()))
    .append(pa.field("pivot_lang", pa.string()))
    .append(pa.field("backend", pa.string()))
    .append(pa.field("model", pa.string()))
)
log = logging.getLogger("cpipe")


class BacktranslateSettings(BacktranslateConfig):
    """The backtranslate stage's config: its section, the actor count runtime (it does not change the output), and
    how a sentence cap draws (only capped translations rebuilt, so uncapped ones keep their fingerprint)."""

    workers: int = Field(0, ge=0, json_schema_extra=AT_RUNTIME)
    sampling: Literal["spread"] | None = Field(None, json_schema_extra={"fingerprint_omits": None})


def config(cfg: Config, key: None = None) -> dict:
    """The fingerprinted settings, once the backend is known to run every pivot's models."""
    bt = cfg.backtranslate
    for pivot in bt.pivots:
        for model in model_names(bt, pivot):
            check_backend(bt.backend, model)
    sampling = SPREAD if bt.max_sentences is not None else None  # the cap draws over the whole corpus
    return stage_config(BacktranslateSettings(**bt.model_dump(), sampling=sampling))


def inputs(cfg: Config, done: dict[str, str], key: None = None) -> dict[str, str]:
    return {"documents": done["decontaminate"]}


def instances(cfg: Config, done: dict[str, str]) -> dict[str, None]:
    """Built only for the pairs made from back-translations (CERT's)."""
    read = any("backtranslate" in objective(r.objective).inputs.values() for r in cfg.run_configs().values())
    return {"backtranslate": None} if read else {}


def check(cfg: Config) -> None:
    """Before any work: the backend can run every pivot's models (config() checks them)."""
    if instances(cfg, {}):
        config(cfg)


def needs_ray(settings: BacktranslateSettings) -> bool:
    return settings.workers > 0  # an actor pool on Ray


def model_names(settings: BacktranslateConfig, pivot: str) -> tuple[str, str]:
    """The (forward, backward) models of a pivot: its own names, or the templates, filled in."""
    fill = {"source": settings.source_lang, "pivot": pivot}
    names = (m[pivot] if isinstance(m, dict) else m for m in (settings.forward_model, settings.backward_model))
    return tuple(name.format(**fill) for name in names)


class BackTranslator:
    """Loads the two models of every pivot once; each call translates whole chunks from the work directory."""

    def __init__(self, settings: BacktranslateSettings, work_dir: str):
        self.settings, self.work_dir = settings, work_dir
        device = "cuda" if settings.use_gpu else "cpu"
        generation = settings.model_dump(include=set(Generation.model_fields))
        self.models = {
            pivot: tuple(
                load_translator(settings.backend, m, device, settings.dtype, **generation)
                for m in model_names(settings, pivot)
            )
            for pivot in settings.pivots
        }

    def __call__(self, batch: dict) -> dict:
        return {"chunk": batch["chunk"], "rows": [self.translate_chunk(int(c)) for c in batch["chunk"]]}

    def translate_chunk(self, chunk: int) -> int:
        segments_ = pq.read_table(_path(self.work_dir, "in", chunk))
        texts = segments_.column("text").to_pylist()
        tables, counts = [], {}
        for pivot, (forward, backward) in self.models.items():
            for t in (forward, backward):  # sampling seeded per chunk: a resumed run draws the same
                t.generation = t.generation.model_copy(update={"seed": self.settings.seed * 1_000_003 + chunk})
                t.counts.clear()
            token = self.settings.target_token.get(pivot)
            back = backward.translate(forward.translate([f"{token} {t}" for t in texts] if token else texts))
            for direction, t in (("forward", forward), ("backward", backward)):
                for reason, n in t.counts.items():
                    counts[f"{direction}_{reason}"] = counts.get(f"{direction}_{reason}", 0) + n
            model = " -> ".join(model_names(self.settings, pivot))
            tables.append(
                segments_.append_column("bt_text", pa.array(back, pa.string()))
                .append_column("pivot_lang", pa.array([pivot] * len(texts), pa.string()))
                .append_column("backend", pa.array([self.settings.backend] * len(texts), pa.string()))
                .append_column("model", pa.array([model] * len(texts), pa.string()))
            )
        table = pa.concat_tables(tables).replace_schema_metadata({"counts": json.dumps(counts)})
        _write_whole(table, _path(self.work_dir, "out", chunk))
        return table.num_rows


def _path(work_dir: str, kind: str, chunk: int) -> str:
    return f"{work_dir}/{kind}-{chunk:06d}.parquet"


def _write_whole(table: pa.Table, path: str) -> None:
    # A kill mid-write leaves only the temporary file, which the next run overwrites.
    pq.write_table(table, f"{path}.tmp")
    os.replace(f"{path}.tmp", path)


def split_into_chunks(documents: str, settings: BacktranslateSettings, work_dir: str, out) -> int:
    """Write the sentences to translate as chunk files; returns the number of chunks."""
    chunk, total = 0, 0
    seed = settings.seed if settings.sampling == SPREAD else None
    rows = sentences(documents, out, settings.min_chars, settings.max_sentences, seed)
    while batch := list(islice(rows, settings.chunk_size)):
        # Sentences come out the same every time, so a resumed run keeps the chunk files it has.
        if not os.path.exists(_path(work_dir, "in", chunk)):
            _write_whole(pa.Table.from_pylist(batch, SEGMENT_SCHEMA), _path(work_dir, "in", chunk))
        chunk, total = chunk + 1, total + len(batch)
    out.count("sentences", total)
    return chunk


def run(settings: BacktranslateSettings, inputs: dict[str, str], out: DatasetWriter) -> None:
    work_dir = out.work_dir
    n_chunks = split_into_chunks(inputs["documents"], settings, work_dir, out)
    pending = [c for c in range(n_chunks) if not os.path.exists(_path(work_dir, "out", c))]
    out.count("resumed_chunks", n_chunks - len(pending))
    log.info(
        "backtranslate: %d chunks of up to %d sentences, %d to translate (%s)",
        n_chunks,
        settings.chunk_size,
        len(pending),
        # a local model by its folder's name: four whole paths made a line too long for a log file
        ", ".join(
            " -> ".join(os.path.basename(m) if os.path.isabs(m) else m for m in model_names(settings, p))
            for p in settings.pivots
        ),
    )
    with Progress("backtranslate", len(pending), "chunks") as bar:
        if pending and settings.workers == 0:
            translator = BackTranslator(settings, work_dir)
            for chunk in pending:
                translator.translate_chunk(chunk)
                bar.update()
        elif pending:
            for _ in _on_ray(settings, work_dir, pending):
                bar.update()
    for chunk in range(n_chunks):
        table = pq.read_table(_path(work_dir, "out", chunk))
        for reason, n in json.loads(table.schema.metadata[b"counts"]).items():
            out.count(reason, n)
        out.write(table.replace_schema_metadata(None))


def _on_ray(settings: BacktranslateSettings, work_dir: str, pending: list[int]):
    """One row per chunk through an actor pool; the actors write the chunks, so rows only report progress."""
    import ray.data

    ds = ray.data.from_items([{"chunk": c} for c in pending], override_num_blocks=len(pending))
    translated = ds.map_batches(
        BackTranslator,
        fn_constructor_kwargs={"settings": settings, "work_dir": work_dir},
        batch_size=1,
        compute=ray.data.ActorPoolStrategy(size=settings.workers),
        num_gpus=1 if settings.use_gpu else 0,
    )
    yield from translated.iter_rows()


STAGE = Stage(
    name="backtranslate",
    version="1",
    flow="data",
    section="backtranslate",
    config=config,
    inputs=inputs,
    instances=instances,
    run=run,
    settings=BacktranslateSettings,
    schema=SCHEMA,
    check=check,
    needs_ray=needs_ray,
)
