"""Embed unseen text with an exported encoder: a text file in, a Parquet file of embeddings out.

Inputs are read and embedded a chunk at a time, so memory is bounded by one
chunk whatever the file's size:

- `.txt`: one sentence a line (split on "\\n" only). Blank lines are kept as
  empty strings, so row i is line i + 1 of the file.
- `.jsonl`: one JSON object a line with a `text_column` string; blank lines are skipped.
- `.csv` / `.tsv`: a header naming `text_column`; blank lines are skipped. `.tsv`
  is plain tab splitting with no quoting (sentences often hold unbalanced quotes).
- `.parquet`: a `text_column` string column.

The output has `row` (the sentence's 0-based position in the input), `text` and
`embedding` (fixed_size_list<float32>[dim]), one row group a chunk, in input order.
"""

from __future__ import annotations

import csv
import os
import uuid
from collections.abc import Iterator
from contextlib import closing
from itertools import islice
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.errors import InputError
from pipeline.jsonlines import json_objects
from pipeline.model.exported import Encoder
from pipeline.parquet_files import reading_parquet
from pipeline.progress import Progress


def _utf8(raw: bytes, path: str, lineno: int) -> str:
    try:
        return raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path}:{lineno}: not valid UTF-8") from None


def _txt(path: str, column: str) -> Iterator[str]:
    # Binary lines split on b"\n" only: text mode would also split at a lone "\r" and misalign rows.
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            yield _utf8(raw, path, lineno).removesuffix("\n").removesuffix("\r")


def _jsonl(path: str, column: str) -> Iterator[str]:
    with open(path, "rb") as f:
        for lineno, record in json_objects((_utf8(raw, path, n) for n, raw in enumerate(f, start=1)), path):
            text = record.get(column)
            if not isinstance(text, str):
                raise InputError(f"{path}:{lineno}: expected an object with a string {column!r} field")
            yield text


def _delimited(path: str, column: str, delimiter: str, quoting: int) -> Iterator[str]:
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f, delimiter=delimiter, quoting=quoting)
        try:
            header = next(reader, [])
            if column not in header:
                raise InputError(f"{path}:1: no {column!r} column in the header ({', '.join(header) or 'empty'})")
            index = header.index(column)
            for fields in reader:
                if not fields:
                    continue
                if len(fields) <= index:
                    raise InputError(f"{path}:{reader.line_num}: {len(fields)} fields, no {column!r} column")
                yield fields[index]
        except csv.Error as e:
            raise InputError(f"{path}:{reader.line_num}: {e}") from None
        except UnicodeDecodeError:
            raise InputError(f"{path}:{reader.line_num + 1}: not valid UTF-8") from None


def _parquet(path: str, column: str) -> Iterator[str]:
    with reading_parquet(path), pq.ParquetFile(path) as f:
        field = f.schema_arrow.field(column) if column in f.schema_arrow.names else None
        if field is None or not (pa.types.is_string(field.type) or pa.types.is_large_string(field.type)):
            raise InputError(f"{path}: no string column {column!r} ({f.schema_arrow})")
        row = 0
        for batch in f.iter_batches(batch_size=8192, columns=[column]):
            values = batch.column(0)
            if values.null_count:
                raise InputError(f"{path}: row {row + values.to_pylist().index(None)}: {column!r} is null")
            yield from values.to_pylist()
            row += len(values)


READERS = {
    ".txt": _txt,
    ".jsonl": _jsonl,
    ".csv": lambda path, column: _delimited(path, column, ",", csv.QUOTE_MINIMAL),
    ".tsv": lambda path, column: _delimited(path, column, "\t", csv.QUOTE_NONE),
    ".parquet": _parquet,
}


def embed_file(
    model_dir: str,
    input_path: str,
    output_path: str,
    batch_size: int = 128,
    max_length: int = 128,
    text_column: str = "text",
    pooling: str | None = None,
    chunk_rows: int = 10_000,
) -> int:
    """Embed every sentence of `input_path` into the Parquet file `output_path`; return the row count.

    The output appears only when complete: it is written to a temporary sibling renamed at the end.
    """
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be at least 1, not {chunk_rows}")
    suffix = Path(input_path).suffix.lower()
    if suffix not in READERS:
        raise InputError(
            f"{input_path}: unknown input type {suffix or '(no extension)'!r} (expected {', '.join(READERS)})"
        )
    if not os.path.isfile(input_path):
        raise InputError(f"{input_path}: no such file")
    with closing(READERS[suffix](input_path, text_column)) as texts:
        # The first chunk is read before the model loads (torch and transformers: seconds), so a bad header fails
        # fast.
        chunk = list(islice(texts, chunk_rows))
        encoder = Encoder(model_dir, max_length=max_length, pooling=pooling)
        dim = encoder.dimension
        schema = pa.schema([("row", pa.int64()), ("text", pa.string()), ("embedding", pa.list_(pa.float32(), dim))])
        out = Path(output_path)
        out.parent.mkdir(parents=True, exist_ok=True)
        # A sibling on the same filesystem makes os.replace atomic; not mkstemp, whose 0600 mode the
        # output would keep.
        tmp = out.parent / f".{out.name}.{uuid.uuid4().hex[:8]}.tmp"
        rows = 0
        try:
            with pq.ParquetWriter(tmp, schema) as writer, Progress("embed", unit="rows") as bar:
                while chunk:
                    emb = encoder.encode(chunk, batch_size=batch_size)
                    writer.write_table(
                        pa.table(
                            [
                                pa.array(np.arange(rows, rows + len(chunk), dtype=np.int64)),
                                pa.array(chunk, pa.string()),
                                pa.FixedSizeListArray.from_arrays(pa.array(emb.reshape(-1)), dim),
                            ],
                            schema=schema,
                        )
                    )
                    rows += len(chunk)
                    bar.update(len(chunk))
                    chunk = list(islice(texts, chunk_rows))
            os.replace(tmp, out)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    return rows
