"""Each worker's micro-batches, read from the pair shards by the worker itself (pipeline.train.shard)."""

from __future__ import annotations

import pyarrow as pa

from pipeline.train.shard import rank_batches
from storage import DatasetWriter, iter_batches

SCHEMA = pa.schema(
    [("anchor_ids", pa.list_(pa.int32())), ("positive_ids", pa.list_(pa.list_(pa.int32()))), ("row", pa.int64())]
)


def write_pairs(root, rows: int, rows_per_shard: int, artifacts: str | None = None) -> str:
    """A pairs dataset holding rows 0, 1, 2, ... in order, in shards of `rows_per_shard`."""
    with DatasetWriter(
        artifacts or str(root), "augment", "fp", config={}, inputs={}, schema=SCHEMA, rows_per_shard=rows_per_shard
    ) as out:
        out.write([{"anchor_ids": [r, r], "positive_ids": [[r]], "row": r} for r in range(rows)])
    return out.path


def ranks(path: str, columns: list[str], rows: int, rank: int, world: int) -> list[pa.Table]:
    """As the training worker reads: global batches of rows x world from the dataset, rank's slice of each."""
    return list(rank_batches(iter_batches(path, columns, rows * world), rows, rank, world))


def rows_of(batches) -> list[list[int]]:
    return [b.column("row").to_pylist() for b in batches]


def test_each_rank_takes_its_slice_of_every_global_batch_across_shards(tmp_path):
    path = write_pairs(tmp_path, 18, 7)  # shards of 7, 7, 4 rows: global batches of 4 cross them
    two = [rows_of(ranks(path, ["row"], 2, rank, 2)) for rank in range(2)]
    assert two[0] == [[0, 1], [4, 5], [8, 9], [12, 13]]
    assert two[1] == [[2, 3], [6, 7], [10, 11], [14, 15]]  # rows 16, 17: a short last batch, dropped by both
    one = rows_of(ranks(path, ["row"], 4, 0, 1))  # one worker takes the union, batch for batch
    assert one == [a + b for a, b in zip(*two)]


def test_uneven_ranks_never_differ_in_batch_count(tmp_path):
    path = write_pairs(tmp_path, 10, 4)
    counts = {len(ranks(path, ["row"], 1, rank, 3)) for rank in range(3)}
    assert counts == {3}  # 9 rows in 3 global batches of 3; the 10th is dropped on every rank


def test_only_the_asked_columns_are_read(tmp_path):
    [batch] = ranks(write_pairs(tmp_path, 4, 4), ["anchor_ids", "positive_ids"], 4, 0, 1)
    assert batch.column_names == ["anchor_ids", "positive_ids"]
    assert batch.column("positive_ids").to_pylist() == [[[0]], [[1]], [[2]], [[3]]]


def test_pairs_on_another_filesystem_are_read_through_it(tmp_path):
    path = write_pairs(tmp_path, 6, 3, artifacts="memory://shard-test/artifacts")
    assert path.startswith("memory://")
    assert rows_of(ranks(path, ["row"], 2, 0, 1)) == [[0, 1], [2, 3], [4, 5]]
