"""What `cpipe inspect` prints: one dataset in detail, or every dataset under an artifacts directory.

Either way each dataset's shards are checked against its manifest (`storage.verify`): a damaged one is
reported in one line naming the file, and inspect fails."""

from __future__ import annotations

import json
import time

import fsspec
import pyarrow.parquet as pq
from rich.console import Console
from rich.table import Table

from storage.dataset import MANIFEST, DamagedDataset, DatasetError, list_datasets, read_manifest, shards, verify


def _age(created: float | None) -> str:
    if not created:
        return "?"
    seconds = time.time() - created
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def show(path: str, rows: int = 5, console: Console | None = None) -> None:
    console = console or Console()
    fs, p = fsspec.core.url_to_fs(path)
    if fs.exists(f"{p}/{MANIFEST}"):
        manifest = read_manifest(path)
        console.print_json(json.dumps(manifest, default=str))
        parts = shards(path)  # raises DamagedDataset, after the manifest that says what should be there
        if not parts:
            console.print(f"{path}: no Parquet shards (a {manifest['stage']} stage writes files)")
            console.print(sorted(f.rsplit("/", 1)[-1] for f in fs.ls(p, detail=False)))
            return
        with fs.open(parts[0], "rb") as f:
            head = pq.ParquetFile(f).read_row_group(0).slice(0, rows) if pq.ParquetFile(f).num_row_groups else None
        console.print(f"rows: {manifest['rows']}  shards: {len(parts)}")
        if head is not None:
            table = Table(*head.column_names, title=f"first {head.num_rows} rows")
            for record in head.to_pylist():
                table.add_row(*(_short(v) for v in record.values()))
            console.print(table)
        return
    datasets = list_datasets(path)
    if not datasets:
        raise DatasetError(f"{path}: no finished stage datasets here")
    table = Table("stage", "fingerprint", "rows", "age", "state", "path", title=f"datasets under {path}")
    damaged = []
    for d in datasets:
        try:
            verify(d["url"])
            state = "ok"
        except DamagedDataset as e:
            damaged.append(e)
            state = "damaged"
        table.add_row(d["stage"], d["fingerprint"], "" if d["rows"] is None else str(d["rows"]), _age(d["created"]),
                      state, d["path"])
    console.print(table)
    if damaged:
        more = f" (and {len(damaged) - 1} more marked damaged above)" if len(damaged) > 1 else ""
        raise DamagedDataset(damaged[0].path, f"{damaged[0].what}{more}")


def _short(value, width: int = 60) -> str:
    text = str(value)
    return text if len(text) <= width else text[: width - 1] + "…"
