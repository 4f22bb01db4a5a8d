"""Parquet as every reader of users' files here reads it: a file pyarrow cannot read (not Parquet, cut short,
corrupt) is an error naming the file, in one line, never pyarrow's traceback."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pyarrow as pa

from pipeline.errors import InputError


@contextmanager
def reading_parquet(path, error: type[InputError] = InputError) -> Iterator[None]:
    """Around what opens and reads the Parquet file `path`: whatever pyarrow raises reading it is `error` (the
    caller's InputError) naming the file."""
    try:
        yield
    except (pa.ArrowException, OSError) as e:
        reason = next(iter(str(e).strip().splitlines()), type(e).__name__)
        raise error(f"{path}: not a readable Parquet file ({reason})") from None
