"""filter stage: count tokens, identify the language, keep long documents in the wanted
language, and drop exact (and optionally near) duplicates; the manifest counts every drop, and
`_dropped.parquet` (storage.dropped) names each dropped document with its reason and what was seen.

The per-document work (pipeline.filter.docstats) runs batch by batch through
`ordered_map`, serially or on worker processes or Ray; the keep/drop decisions
are then made in corpus order in this process, so every backend writes the
same dataset and duplicates are found across the whole corpus.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import TYPE_CHECKING

import pyarrow as pa
from pydantic import Field

from pipeline.corpus.download import fetch
from pipeline.corpus.stage import SCHEMA as CORPUS_SCHEMA
from pipeline.errors import InputError
from pipeline.filter.config import FilterConfig
from pipeline.filter.docstats import analyse
from pipeline.filter.neardup import NearDuplicates
from pipeline.parallel import Spread, ordered_map
from pipeline.progress import Progress
from pipeline.stage import AT_RUNTIME, Stage, stage_config
from storage import DatasetWriter, iter_batches, read_manifest
from storage.dropped import DroppedLog

if TYPE_CHECKING:
    from pipeline.config import Config

SCHEMA = (
    CORPUS_SCHEMA.append(pa.field("n_tokens", pa.int32()))
    .append(pa.field("lang", pa.string()))
    .append(pa.field("lang_score", pa.float32()))
)
BATCH = 256
log = logging.getLogger("cpipe")


class FilterError(InputError):
    pass


class FilterSettings(FilterConfig, Spread):
    """The filter's stage config: its section; where the language model is downloaded (corpus.download_dir) and how
    the work is spread are runtime."""

    download_dir: str = Field("downloads", json_schema_extra=AT_RUNTIME)


def config(cfg: Config, key: None = None) -> dict:
    return stage_config(
        FilterSettings(**cfg.filter.model_dump(), **cfg.parallel.model_dump(), download_dir=cfg.corpus.download_dir)
    )


def inputs(cfg: Config, done: dict[str, str], key: None = None) -> dict[str, str]:
    return {"corpus": done["corpus"], "tokenizer": done["tokenizer"]}


def needs_ray(settings: FilterSettings) -> bool:
    return settings.backend == "ray"


def run(settings: FilterSettings, inputs: dict[str, str], out: DatasetWriter) -> None:
    langid_model = str(fetch(settings.langid_model, settings.download_dir)) if settings.language else None
    near_threshold = settings.near_dedup_threshold if settings.near_dedup else None
    near = NearDuplicates(threshold=near_threshold) if near_threshold else None
    seen = _Seen(near)
    total, longest, kept = read_manifest(inputs["corpus"])["rows"], 0, 0
    batches: deque[pa.RecordBatch] = deque()

    def jobs():
        for batch in iter_batches(inputs["corpus"], batch_size=BATCH):
            batches.append(batch)
            yield batch.column("text").to_pylist(), inputs["tokenizer"], langid_model, near_threshold

    results = ordered_map(analyse, jobs(), settings.backend, settings.workers)
    with Progress("filter", total, "docs") as bar, DroppedLog(out) as dropped:
        for result in results:
            batch = batches.popleft()
            titles = batch.column("title_or_url").to_pylist()
            keep = [
                _keep(settings, doc_id, titles[i], i, result, seen, out, dropped)
                for i, doc_id in enumerate(batch.column("doc_id").to_pylist())
            ]
            table = (
                pa.Table.from_batches([batch])
                .append_column("n_tokens", pa.array(result["n_tokens"], pa.int32()))
                .append_column("lang", pa.array(result["lang"], pa.string()))
                .append_column("lang_score", pa.array(result["lang_score"], pa.float32()))
            )
            out.write(table.filter(pa.array(keep)))
            kept += sum(keep)
            longest = max(longest, *result["n_tokens"])
            bar.update(batch.num_rows)
    out.count("kept", kept)
    if kept == 0:
        raise FilterError(_nothing_kept(settings, total, longest, out.counts))


def _nothing_kept(settings: FilterSettings, total: int, longest: int, counts) -> str:
    if counts["too_short"] == total:
        return (
            f"no document has at least {settings.min_tokens} tokens: saw {total} documents, "
            f"the longest has {longest} tokens (lower filter.min_tokens?)"
        )
    dropped = ", ".join(
        f"{n} {reason.replace('_', ' ')}" for reason, n in sorted(counts.items()) if n and reason != "kept"
    )
    return f"no document kept: of {total} documents, dropped {dropped} (language wanted: {settings.language})"


class _Seen:
    """The documents seen so far, by what a later one may repeat: each exact-duplicate key's first document, and
    the documents the near-duplicate index kept, in its order."""

    def __init__(self, near: NearDuplicates | None):
        self.exact: dict[bytes, str] = {}
        self.near, self.near_kept = near, []


def _keep(
    settings: FilterSettings,
    doc_id: str,
    title: str | None,
    i: int,
    result: dict,
    seen: _Seen,
    out,
    dropped: DroppedLog,
) -> bool:
    """Keep document i of the batch? When not, its reason is counted and it is logged with what was seen."""
    why = _drop(settings, doc_id, i, result, seen)
    if why is None:
        return True
    out.count(why[0])
    dropped.add(doc_id, title, *why)
    return False


def _drop(settings: FilterSettings, doc_id: str, i: int, result: dict, seen: _Seen) -> tuple[str, str] | None:
    """(reason, detail) for dropping document i of the batch, or None to keep it. Order matters: cheapest first."""
    if result["n_tokens"][i] < settings.min_tokens:
        return "too_short", f"{result['n_tokens'][i]} tokens, fewer than {settings.min_tokens}"
    if settings.dedup:
        key = result["keys"][i]
        if key in seen.exact:
            return "duplicate", f"same text as {seen.exact[key]}"
        seen.exact[key] = doc_id
    lang, score = result["lang"][i], result["lang_score"][i]
    if settings.language and (lang != settings.language or score < settings.min_lang_score):
        return "language", f"{lang} (p={score:.3f}); kept: {settings.language} (p>={settings.min_lang_score})"
    if seen.near is not None:
        match = seen.near.match(result["signatures"][i])
        if match is None:
            seen.near_kept.append(doc_id)
        else:
            return "near_duplicate", f"like {seen.near_kept[match[0]]} (estimated Jaccard {match[1]:.2f})"
    return None


# 3: _dropped.parquet beside the shards, each dropped document with its reason (the shards are unchanged).
STAGE = Stage(
    name="filter",
    version="3",
    flow="data",
    section="filter",
    config=config,
    inputs=inputs,
    run=run,
    settings=FilterSettings,
    schema=SCHEMA,
    needs_ray=needs_ray,
)
