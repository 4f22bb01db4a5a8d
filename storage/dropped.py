"""The rows a stage dropped and why (doc_id, title_or_url, reason, detail), kept beside its shards for forensics.

The file's name starts with "_" so that nothing reading the dataset's rows picks it up: the project's readers
take only `part-*.parquet`, and pyarrow's dataset discovery (`pd.read_parquet(<dataset dir>)`, DuckDB's
`read_parquet('<dir>/part-*.parquet')` by its glob) skips names starting with "_" or ".". `reason` is the
manifest's count it adds to; `detail` says what the stage saw (a token count, a language, the document a copy
repeats, the evaluation tasks found). The manifest records the file's rows under "dropped".
"""

from __future__ import annotations

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from storage.dataset import DamagedDataset, DatasetWriter, read_manifest, verify

DROPPED = "_dropped.parquet"
SCHEMA = pa.schema(
    [("doc_id", pa.string()), ("title_or_url", pa.string()), ("reason", pa.string()), ("detail", pa.string())]
)
# Written before a dropped document was named by its title or URL (its file name, for a local corpus): still a
# whole record of what was dropped, read with the title unknown rather than called damaged.
UNTITLED = pa.schema([f for f in SCHEMA if f.name != "title_or_url"])
BUFFER = 4096  # rows held before a row group is written: memory stays flat however many are dropped


class DroppedLog:
    """Streams one stage's dropped rows into DROPPED in its dataset (a context manager, inside the writer's).
    Written even when nothing is dropped, so an empty record says "none" and a missing one "not recorded"."""

    def __init__(self, out: DatasetWriter):
        self._out, self._path = out, f"{out.local_dir}/{DROPPED}"
        self._rows: list[tuple[str, str | None, str, str]] = []
        self._writer: pq.ParquetWriter | None = None
        self.count = 0

    def __enter__(self) -> DroppedLog:
        self._writer = pq.ParquetWriter(self._path, SCHEMA)
        return self

    def add(self, doc_id: str, title: str | None, reason: str, detail: str = "") -> None:
        """`title`: the document's title_or_url, so that a drop is found by name, not only by its id's hash."""
        self._rows.append((doc_id, title, reason, detail))
        self.count += 1
        if len(self._rows) >= BUFFER:
            self._flush()

    def _flush(self) -> None:
        if self._rows:
            columns = list(zip(*self._rows))
            self._writer.write_table(pa.table([pa.array(c, pa.string()) for c in columns], schema=SCHEMA))
            self._rows = []

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc is None:
                self._flush()
                self._out.extra["dropped"] = {"file": DROPPED, "rows": self.count}
        finally:
            self._writer.close()


def read_dropped(path: str) -> pa.Table | None:
    """A finished dataset's dropped rows, or None where none were recorded (a stage that drops nothing, or a
    dataset written before they were kept); DamagedDataset naming the file where it is not the manifest's."""
    verify(path)  # the record is one of the dataset's files, checked with the rest (its manifest's "files")
    recorded = read_manifest(path).get("dropped")
    if recorded is None:
        return None
    fs, p = fsspec.core.url_to_fs(f"{path.rstrip('/')}/{recorded['file']}")
    try:
        with fs.open(p, "rb") as f:
            table = pq.read_table(f)
    except FileNotFoundError:
        raise DamagedDataset(path, f"{recorded['file']} is missing") from None
    except (pa.ArrowException, OSError) as e:
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise DamagedDataset(path, f"{recorded['file']} is not a readable Parquet file ({reason})") from None
    if table.schema.equals(UNTITLED):
        table = table.add_column(1, SCHEMA.field("title_or_url"), pa.nulls(table.num_rows, pa.string()))
    if table.num_rows != recorded["rows"] or not table.schema.equals(SCHEMA):
        raise DamagedDataset(
            path,
            f"{recorded['file']} holds {table.num_rows} rows of columns "
            f"{table.column_names}, its manifest records {recorded['rows']}",
        )
    return table
