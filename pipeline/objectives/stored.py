"""The sentence objectives' drawn sentences, kept on local disk rather than in Python lists. Every epoch reads all
of them in a fresh order, so all must be at hand; as dicts, strings and lists of token ids a sentence cost the driver
about 2 KB (SimCSE's peak RSS grew 2.93x from a 10 to a 100 MB corpus). Here they are written a unit at a time to
Arrow IPC files in a temporary directory (removed at the end, on error too), with their token ids, and read back
memory-mapped, whose pages the kernel can drop and read again, a chunk of an epoch's order at a time."""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import numpy as np
import pyarrow as pa

from pipeline.corpus.sentences import UNIT_CHARS
from pipeline.objectives.prepare import encoded_units, moses_words
from pipeline.parallel import Spread

SCHEMA = pa.schema([("doc_id", pa.string()), ("segment_id", pa.string()), ("text", pa.string())])
MADE = {"ids": pa.list_(pa.int32()), "words": pa.list_(pa.string())}  # the columns made from the texts
CHUNK = 16_384  # sentences read back at a time: an epoch holds a few chunks' Python objects, not every sentence's


class Sentences:
    """Sentences by index: their doc_id, segment_id, text, token ids ("ids") and any other column made."""

    def __init__(self, batches: list[pa.RecordBatch]):
        self._batches = batches
        self._starts = np.cumsum([0, *(b.num_rows for b in batches)])

    def __len__(self) -> int:
        return int(self._starts[-1])

    def column(self, name: str) -> Iterator[str]:
        """A column's values in order."""
        for batch in self._batches:
            yield from batch.column(name).to_pylist()

    def chunks(self, order: np.ndarray, columns: list[str]) -> Iterator[list[tuple]]:
        """The `columns` of the sentences `order` names, in that order, CHUNK sentences a list."""
        for start in range(0, len(order), CHUNK):
            taken = self._take(order[start : start + CHUNK])
            yield list(zip(*(taken.column(c).to_pylist() for c in columns)))

    def read(self, order: np.ndarray, columns: list[str]) -> Iterator[tuple]:
        """The `columns` of the sentences `order` names, in that order."""
        for chunk in self.chunks(order, columns):
            yield from chunk

    def _take(self, rows: np.ndarray) -> pa.Table:
        # Batch by batch: a take over a table of many batches first concatenates them all, a copy of the whole
        # file for every chunk.
        batch = np.searchsorted(self._starts, rows, side="right") - 1
        by_batch = np.argsort(batch, kind="stable")
        bounds = np.searchsorted(batch[by_batch], np.arange(len(self._batches) + 1))
        parts = [
            self._batches[b].take(rows[by_batch[lo:hi]] - self._starts[b])
            for b, (lo, hi) in enumerate(zip(bounds, bounds[1:]))
            if hi > lo
        ]
        return pa.Table.from_batches(parts, self._batches[0].schema).take(np.argsort(by_batch))


@contextmanager
def stored(drawn: Iterable[dict], tok, settings: Spread, words: bool = False) -> Iterator[Sentences]:
    """The drawn sentences (pipeline.corpus.sentences), their token ids and, with `words`, their Moses words
    ("words", TSDAE's), UNIT_CHARS characters a batch: the sentences are all drawn first, then each column is made
    on `settings`' backend, one pool at a time."""
    with tempfile.TemporaryDirectory(prefix="cpipe-sentences-") as directory:
        batches = _written(f"{directory}/sentences.arrow", SCHEMA, _units(drawn))
        texts = [b.column("text") for b in batches]
        made = {"ids": encoded_units(tok, (t.to_pylist() for t in texts), settings)}
        if words:
            made["words"] = moses_words((t.to_pylist() for t in texts), settings)
        for name, arrays in made.items():
            schema = pa.schema([(name, MADE[name])])
            column = _written(f"{directory}/{name}.arrow", schema, (pa.record_batch([a], schema) for a in arrays))
            batches = [b.append_column(schema.field(0), c.column(0)) for b, c in zip(batches, column)]
        yield Sentences(batches)


def _units(drawn: Iterable[dict]) -> Iterator[pa.RecordBatch]:
    """The sentences' doc_id, segment_id and text, about UNIT_CHARS characters a batch."""
    unit, chars = [], 0
    for row in drawn:
        unit.append(row)
        chars += len(row["text"])
        if chars >= UNIT_CHARS:
            yield pa.RecordBatch.from_pylist(unit, SCHEMA)
            unit, chars = [], 0
    if unit:
        yield pa.RecordBatch.from_pylist(unit, SCHEMA)


def _written(path: str, schema: pa.Schema, batches: Iterable[pa.RecordBatch]) -> list[pa.RecordBatch]:
    """`batches` written to an Arrow IPC file at `path`, and read back memory-mapped."""
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    reader = pa.ipc.open_file(pa.memory_map(path))
    return [reader.get_batch(i) for i in range(reader.num_record_batches)]
