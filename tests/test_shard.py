"""Each worker's micro-batches, read from the pair shards by the worker itself (pipeline.train.shard)."""

from __future__ import annotations

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow.fs import FSSpecHandler, PyFileSystem

from pipeline.train.shard import rank_batches


def write_shards(root, sizes: list[int]) -> list[str]:
    """Shards of `sizes` rows holding rows 0, 1, 2, ... in order, each in row groups of 3."""
    paths, first = [], 0
    for i, n in enumerate(sizes):
        rows = list(range(first, first + n))
        table = pa.table({"anchor_ids": [[r, r] for r in rows], "positive_ids": [[[r]] for r in rows],
                          "row": rows})
        path = f"{root}/part-{i:05d}.parquet"
        pq.write_table(table, path, row_group_size=3)
        paths.append(path)
        first += n
    return paths


def rows_of(batches) -> list[list[int]]:
    return [b.column("row").to_pylist() for b in batches]


def test_each_rank_takes_its_slice_of_every_global_batch_across_shards_and_row_groups(tmp_path):
    paths = write_shards(tmp_path, [7, 5, 6])  # 18 rows; global batches of 4 cross shards and row groups
    ranks = [rows_of(rank_batches(paths, ["row"], 2, rank, 2)) for rank in range(2)]
    assert ranks[0] == [[0, 1], [4, 5], [8, 9], [12, 13]]
    assert ranks[1] == [[2, 3], [6, 7], [10, 11], [14, 15]]  # rows 16, 17: a short last batch, dropped by both
    one = rows_of(rank_batches(paths, ["row"], 4, 0, 1))  # one worker takes the union, batch for batch
    assert one == [a + b for a, b in zip(*ranks)]


def test_uneven_ranks_never_differ_in_batch_count(tmp_path):
    paths = write_shards(tmp_path, [10])
    counts = {len(list(rank_batches(paths, ["row"], 1, rank, 3))) for rank in range(3)}
    assert counts == {3}  # 9 rows in 3 global batches of 3; the 10th is dropped on every rank


def test_only_the_asked_columns_are_read(tmp_path):
    paths = write_shards(tmp_path, [4])
    [batch] = rank_batches(paths, ["anchor_ids", "positive_ids"], 4, 0, 1)
    assert batch.column_names == ["anchor_ids", "positive_ids"]
    assert batch.column("positive_ids").to_pylist() == [[[0]], [[1]], [[2]], [[3]]]


def test_shards_on_another_filesystem_are_read_through_it(tmp_path):
    fs = fsspec.filesystem("memory")
    local = write_shards(tmp_path, [3, 3])
    for path in local:
        fs.pipe(f"/pairs/{path.rsplit('/', 1)[1]}", open(path, "rb").read())
    batches = rank_batches(["/pairs/part-00000.parquet", "/pairs/part-00001.parquet"], ["row"], 2, 0, 1,
                           PyFileSystem(FSSpecHandler(fs)))
    assert rows_of(batches) == [[0, 1], [2, 3], [4, 5]]
