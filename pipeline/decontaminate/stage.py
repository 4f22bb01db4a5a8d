"""decontaminate stage: the filtered documents without the evaluation's text, before any training data is made
from them (back-translations, every objective's pairs, the fastText baseline, post-processing fits).

Every sentence the run will score (pipeline.decontaminate.evalsets) is indexed by its word n-grams
(pipeline.decontaminate.ngrams); a document holding any of them is dropped, masked or only counted
(`decontaminate.mode`), and the manifest counts the documents per evaluation task (`contaminated_by_task`);
in "drop" mode `_dropped.parquet` (storage.dropped) names each dropped document and the tasks it held text of.
The matching runs batch by batch through `ordered_map`, serially or on worker processes or Ray (`parallel`), each
worker given the index once; the documents are kept, dropped or masked in corpus order in this process, so every
backend writes the same dataset. The fingerprint holds the hash of the sorted n-gram set, not the files':
evaluation data rewritten, reordered or moved keeps the documents; a sentence added or edited rebuilds them. The
tokenizer stays trained on the whole corpus (it comes before the filter, which counts tokens with it): evaluation
words in its vocabulary teach the encoder nothing about the evaluation's sentences.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from collections import Counter, deque
from typing import TYPE_CHECKING

import pyarrow as pa
from pydantic import Field

from pipeline.decontaminate.config import DecontaminateConfig
from pipeline.decontaminate.evalsets import eval_texts
from pipeline.decontaminate.match import Matcher, masked
from pipeline.decontaminate.ngrams import Index
from pipeline.errors import InputError
from pipeline.evaluate.data import local_eval_data
from pipeline.file_snapshot import snapshot
from pipeline.filter.docstats import count_tokens, tokenizer
from pipeline.filter.stage import SCHEMA
from pipeline.parallel import Spread, ordered_map
from pipeline.stage import AT_RUNTIME, Stage, stage_config
from storage import DatasetWriter, iter_batches
from storage.dropped import DroppedLog

if TYPE_CHECKING:
    from pipeline.config import Config

BATCH = 256  # documents a unit: a batch's fixed costs (Arrow compiling the normalisation's patterns) stay small
log = logging.getLogger("cpipe")


def sources(cfg: Config) -> dict:
    """The evaluation data the run will score (URLs fetched once), and the dev sets its runs select on."""
    dev_sets = sorted({r.dev_set for r in cfg.run_configs().values() if r.eval_every and r.dev_set})
    return {
        "data": local_eval_data(cfg.evaluate.data, cfg.corpus.download_dir),
        "transfer": cfg.evaluate.transfer,
        "dev_sets": dev_sets,
    }


class DecontaminateSettings(DecontaminateConfig, Spread):
    """The decontaminate stage's config: its section and the hash of the evaluation's n-gram set; where the
    evaluation text is read from (`sources`: its n-grams' hash, not these paths, is what the fingerprint holds) and
    how the matching is spread are runtime."""

    ngrams: str
    data: str | None = Field(None, json_schema_extra=AT_RUNTIME)
    transfer: bool = Field(True, json_schema_extra=AT_RUNTIME)
    dev_sets: list[str] = Field([], json_schema_extra=AT_RUNTIME)


def config(cfg: Config, key: None = None) -> dict:
    section, where = cfg.decontaminate, sources(cfg)
    index = indexed(json.dumps(where, sort_keys=True), listing(where), section.n, section.min_words)
    return stage_config(
        DecontaminateSettings(**section.model_dump(), **where, **cfg.parallel.model_dump(), ngrams=index.digest())
    )


def listing(where: dict) -> str:
    """The files' names, sizes and times: the index is rebuilt in a process only when they change."""
    paths = [p for p in (where["data"], *where["dev_sets"]) if p is not None]
    return json.dumps([snapshot(p) if os.path.exists(p) else None for p in paths])


@functools.lru_cache(maxsize=2)
def indexed(where: str, listing: str, n: int, min_words: int) -> Index:
    index = Index(n, min_words)
    for task, texts in eval_texts(**json.loads(where)).items():
        index.add(task, texts)
    return index


def inputs(cfg: Config, done: dict[str, str], key: None = None) -> dict[str, str]:
    """The tokenizer counts a masked document's tokens again."""
    masks = cfg.decontaminate.mode == "mask"
    return {"documents": done["filter"], **({"tokenizer": done["tokenizer"]} if masks else {})}


def check(cfg: Config) -> None:
    """Before any work: the evaluation data parses (the index is built once, here)."""
    config(cfg)


def needs_ray(settings: DecontaminateSettings) -> bool:
    return settings.backend == "ray"


def run(settings: DecontaminateSettings, inputs: dict[str, str], out: DatasetWriter) -> None:
    where = {"data": settings.data, "transfer": settings.transfer, "dev_sets": settings.dev_sets}  # as sources()'s
    index = indexed(json.dumps(where, sort_keys=True), listing(where), settings.n, settings.min_words)
    if index.digest() != settings.ngrams:
        raise InputError(
            f"decontaminate: the evaluation data ({where['data']}) changed after this run was planned; run it again"
        )
    if not index.tasks:
        log.warning("decontaminate: no evaluation sentence to keep out of training (evaluate.data: %s)", where["data"])
    matcher, by_task, mode, total = Matcher(index), Counter(), settings.mode, 0
    batches: deque[pa.RecordBatch] = deque()

    def texts():
        for batch in iter_batches(inputs["documents"], batch_size=BATCH):
            batches.append(batch)
            yield batch.column("text")

    found = ordered_map(Matcher.find, texts(), settings.backend, settings.workers, shared=matcher)
    with DroppedLog(out) as dropped:
        for hits in found:
            batch = batches.popleft()
            total += batch.num_rows
            table = pa.Table.from_batches([batch])
            dirty = [i for i, h in enumerate(hits) if h]
            doc_ids, titles = batch.column("doc_id").to_pylist(), batch.column("title_or_url").to_pylist()
            for i in dirty:
                tasks = matcher.tasks_of(hits[i])
                by_task.update(tasks)
                if mode == "drop":
                    dropped.add(doc_ids[i], titles[i], "contaminated", ", ".join(sorted(tasks)))
            out.count("contaminated", len(dirty))
            if mode == "drop":
                table = table.filter(pa.array([not h for h in hits]))
            elif mode == "mask" and dirty:
                table = _masked(table, hits, dirty, inputs["tokenizer"], out)
            out.write(table)
            out.count("kept", table.num_rows)
    out.extra["contaminated_by_task"] = dict(sorted(by_task.items()))
    out.extra["index"] = {
        task: {**index.stats[task], "ngrams": sum(map(len, index.tasks[task].values()))} for task in sorted(index.tasks)
    }
    log.info(
        "decontaminate: %d of %d documents hold evaluation text (%s); mode %s",
        out.counts["contaminated"],
        total,
        ", ".join(f"{t} {n}" for t, n in sorted(by_task.items())) or "none",
        mode,
    )


def _masked(table: pa.Table, hits: list, dirty: list[int], tokenizer_path: str, out) -> pa.Table:
    """The batch with the matched words cut out of its dirty documents, their tokens counted again."""
    texts, n_tokens = table.column("text").to_pylist(), table.column("n_tokens").to_pylist()
    for i in dirty:
        texts[i], cut = masked(texts[i], hits[i])
        out.count("masked_words", cut)
    for i, count in zip(dirty, count_tokens(tokenizer(tokenizer_path), [texts[i] for i in dirty])):
        n_tokens[i] = count
    table = table.set_column(table.schema.get_field_index("text"), "text", pa.array(texts, pa.string()))
    return table.set_column(table.schema.get_field_index("n_tokens"), "n_tokens", pa.array(n_tokens, pa.int32()))


# 2: both sides normalised as ngrams.simplified says (contractions, no empty words, digits): other matches.
# 3: _dropped.parquet beside the shards, each dropped document with the tasks it held (the shards are unchanged).
# 4: a spaced contraction (SentEval's "don ' t") is "do n't" too, as "don't" and "do n't" are, and SST's "-lrb-"
# a bracket: other matches.
STAGE = Stage(
    name="decontaminate",
    version="4",
    flow="data",
    section="decontaminate",
    config=config,
    inputs=inputs,
    run=run,
    settings=DecontaminateSettings,
    schema=SCHEMA,
    check=check,
    needs_ray=needs_ray,
)
