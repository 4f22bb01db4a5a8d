"""What `cpipe inspect` prints: one dataset in detail (or the rows it dropped, `dropped=True`), or every dataset
under an artifacts directory, in the run's order of stages.

Either way each dataset's shards are checked against its manifest (`storage.verify`): a damaged one is
reported in one line naming the file, and inspect fails. Off a terminal (a pipe, a file) lines are not cut at 80
columns, so a path or a detail reaches grep whole, and a table is tab-separated lines, a row a line."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Sequence

import fsspec
import pyarrow.parquet as pq
from rich.console import Console
from rich.table import Table

from storage.dataset import MANIFEST, DamagedDataset, DatasetError, list_datasets, read_manifest, shards, verify
from storage.dropped import read_dropped

WIDE = 100_000  # columns off a terminal: a line as long as its content
_ONE_LINE = re.compile(r"[\t\r\n]")  # what would split a piped row's cell, or the row: a space there


def _age(created: float | None) -> str:
    if not created:
        return "?"
    seconds = time.time() - created
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def default_console() -> Console:
    """The terminal's width on a terminal, else lines as long as they are. Text is printed as it is: rich's markup
    would take a path's or a row's [ab] for a style and drop it, and fail on a [/x]."""
    on_terminal = Console(markup=False)
    return on_terminal if on_terminal.is_terminal else Console(width=WIDE, markup=False)


def show(
    path: str, rows: int = 5, console: Console | None = None, order: Sequence[str] = (), dropped: bool = False
) -> None:
    """`order`: the stages' names in the order a run builds them, for the listing (others after, by name)."""
    console = console or default_console()
    fs, p = fsspec.core.url_to_fs(path)
    if dropped:
        return _show_dropped(path, console, fs.exists(f"{p}/{MANIFEST}"))
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
            rows = [[_short(v) for v in record.values()] for record in head.to_pylist()]
            _table(console, f"first {head.num_rows} rows", head.column_names, rows)
        return
    datasets = list_datasets(path)
    if not datasets:
        raise DatasetError(f"{path}: no finished stage datasets here")
    rank = {name: i for i, name in enumerate(order)}
    datasets.sort(key=lambda d: (rank.get(d["stage"], len(rank)), d["stage"], d["created"] or 0))
    rows, damaged = [], []
    for d in datasets:
        try:
            verify(d["url"])
            state = "ok"
        except DamagedDataset as e:
            damaged.append(e)
            state = "damaged"
        rows.append([d["stage"], d["fingerprint"], d["rows"], _age(d["created"]), state, d["path"]])
    header = ["stage", "fingerprint", "rows", "age", "state", "path"]
    _table(console, f"datasets under {path}", header, rows, fold=("path",))
    if damaged:
        more = f" (and {len(damaged) - 1} more marked damaged above)" if len(damaged) > 1 else ""
        raise DamagedDataset(damaged[0].path, f"{damaged[0].what}{more}")


def _show_dropped(path: str, console: Console, is_dataset: bool) -> None:
    """Every row the dataset's stage dropped, after a count per reason."""
    if not is_dataset:
        raise DatasetError(f"{path}: --dropped shows one stage dataset's dropped rows; this is no dataset")
    verify(path)  # the rows a damaged dataset dropped are not those its shards lack
    dropped = read_dropped(path)
    if dropped is None:
        stage = read_manifest(path)["stage"]
        raise DatasetError(
            f"{path}: no record of dropped rows (this {stage} dataset was written before they were "
            "kept, or its stage keeps none: the filter and decontaminate stages do)"
        )
    reasons = Counter(dropped.column("reason").to_pylist())
    console.print(f"dropped: {dropped.num_rows}" + "".join(f"  {r}: {n}" for r, n in sorted(reasons.items())))
    if dropped.num_rows:
        rows = [list(record.values()) for record in dropped.to_pylist()]
        _table(console, f"dropped rows of {path}", dropped.column_names, rows, fold=dropped.column_names)


def _table(console: Console, title: str, header: Sequence[str], rows: list[list], fold: Sequence[str] = ()) -> None:
    """On a terminal, rich's table, the `fold` columns folded on a narrow one (never cut). Piped (a file, grep, awk,
    cut), the header and then a row a line, tab-separated, without a title or box drawing."""
    if console.is_terminal:
        table = Table(title=title)
        for name in header:
            table.add_column(name, overflow="fold" if name in fold else "ellipsis")
        for row in rows:
            table.add_row(*("" if v is None else str(v) for v in row))
        console.print(table)
        return
    for row in [header, *rows]:  # past rich, which would expand the tabs
        print("\t".join("" if v is None else _ONE_LINE.sub(" ", str(v)) for v in row), file=console.file)


def _short(value, width: int = 60) -> str:
    text = str(value)
    return text if len(text) <= width else text[: width - 1] + "…"
