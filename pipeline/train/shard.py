"""Each training worker's micro-batches, read by the worker itself from the augment stage's Parquet shards.

The pairs' rows, in the augment stage's order, are cut into global micro-batches of `rows x world` rows;
worker `rank` takes its `rows` of each, so the workers of a step hold between them the rows one worker would
hold, and every worker gets the same number of micro-batches (a short last one is dropped on all alike: DDP
hangs when ranks' step counts differ).

Ray Data read the pairs before (a streaming split of `read_parquet`): per run, it started a coordinator and a
process per read task (about a third of a tiny run's time, most of the processes it started), and held a CPU of
its own, which a local Ray had to spare beside the workers' or the run waited for ever. A worker reading its
slice of sequential shards needs neither.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa


def rank_batches(batches: Iterable[pa.RecordBatch], rows: int, rank: int, world: int) -> Iterator[pa.Table]:
    """Worker `rank` of `world`'s micro-batches of `rows` rows: the stream `batches` (storage.iter_batches of
    the pairs) cut, in order, into global micro-batches of `rows x world` rows, of which it takes slice `rank`."""
    size = rows * world
    pending: list[pa.RecordBatch] = []
    held = 0
    for batch in batches:
        pending.append(batch)
        held += batch.num_rows
        while held >= size:
            table = pa.Table.from_batches(pending)
            yield table.slice(rank * rows, rows)
            rest = table.slice(size)
            pending, held = rest.to_batches(), rest.num_rows
