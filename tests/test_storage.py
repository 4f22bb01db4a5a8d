import json
import os
import pickle

import fsspec
import pyarrow as pa
import pytest

import storage
from storage import DatasetError, DatasetWriter, complete, fingerprint, list_datasets, read_manifest, read_table
from storage.dataset import SUCCESS

SCHEMA = pa.schema([("doc_id", pa.string()), ("n", pa.int32())])


def write(root, fp="abc", rows=5, rows_per_shard=2):
    with DatasetWriter(
        str(root), "demo", fp, config={"k": 1}, inputs={"x": "fp0"}, schema=SCHEMA, rows_per_shard=rows_per_shard
    ) as out:
        out.write([{"doc_id": str(i), "n": i} for i in range(rows)])
        out.count("dropped_for_test", 3)
    return out.path


def test_fingerprint_is_stable_and_sensitive():
    base = fingerprint("filter", "1", {"min_tokens": 2048}, {"corpus": "a"})
    assert base == fingerprint("filter", "1", {"min_tokens": 2048}, {"corpus": "a"})
    assert (
        len(
            {
                base,
                fingerprint("filter", "2", {"min_tokens": 2048}, {"corpus": "a"}),
                fingerprint("filter", "1", {"min_tokens": 1024}, {"corpus": "a"}),
                fingerprint("filter", "1", {"min_tokens": 2048}, {"corpus": "b"}),
                fingerprint("augment", "1", {"min_tokens": 2048}, {"corpus": "a"}),
            }
        )
        == 5
    )


def test_finished_dataset_has_shards_manifest_and_success(tmp_path):
    path = write(tmp_path)
    assert complete(path)
    assert read_table(path).num_rows == 5
    assert read_table(path).schema.field("n").type == pa.int32()
    manifest = read_manifest(path)
    assert manifest["rows"] == 5 and manifest["shards"] == 3
    assert manifest["counts"] == {"dropped_for_test": 3}
    assert manifest["config"] == {"k": 1} and manifest["inputs"] == {"x": "fp0"}
    assert {"name": "n", "type": "int32"} in manifest["schema"]
    assert [d["fingerprint"] for d in list_datasets(str(tmp_path))] == ["abc"]


def test_failed_write_leaves_nothing_that_looks_finished(tmp_path):
    with pytest.raises(RuntimeError):
        with DatasetWriter(str(tmp_path), "demo", "abc", config={}, inputs={}, schema=SCHEMA) as out:
            out.write([{"doc_id": "1", "n": 1}])
            raise RuntimeError("killed")
    assert not (tmp_path / "demo" / "abc").exists()
    assert list((tmp_path / "demo").iterdir()) == []


def test_incomplete_directory_is_never_read_and_is_replaced(tmp_path):
    stale = tmp_path / "demo" / "abc"
    stale.mkdir(parents=True)
    (stale / "part-00000.parquet").write_bytes(b"half a file")
    assert not complete(str(stale))
    with pytest.raises(DatasetError, match="not a finished dataset"):
        read_table(str(stale))
    path = write(tmp_path)
    assert read_table(path).num_rows == 5


def test_empty_dataset_keeps_its_schema(tmp_path):
    path = write(tmp_path, rows=0)
    table = read_table(path)
    assert table.num_rows == 0 and table.schema.names == ["doc_id", "n"]


def test_manifest_is_written_before_success(tmp_path, monkeypatch):
    order = []
    import fsspec.implementations.local as local

    real_open = local.LocalFileSystem.open

    def spy(self, path, mode="rb", **kw):
        if "w" in mode:
            order.append(str(path).rsplit("/", 1)[-1])
        return real_open(self, path, mode, **kw)

    monkeypatch.setattr(local.LocalFileSystem, "open", spy)
    write(tmp_path)
    first_writes = list(dict.fromkeys(order))  # text-mode opens go through a binary open too
    assert first_writes[-2:] == ["_manifest.json", SUCCESS]
    assert json.loads((tmp_path / "demo" / "abc" / "_manifest.json").read_text())["stage"] == "demo"


def test_shards_rotate_by_size_and_keep_every_row(tmp_path):
    with DatasetWriter(str(tmp_path), "demo", "big", config={}, inputs={}, schema=SCHEMA, shard_bytes=64 * 1024) as out:
        for start in range(0, 100_000, 1000):
            out.write(
                pa.table(
                    {
                        "doc_id": [f"document-{i:08d}" for i in range(start, start + 1000)],
                        "n": pa.array(range(start, start + 1000), pa.int32()),
                    }
                )
            )
    table = read_table(out.path)
    assert read_manifest(out.path)["shards"] > 3
    assert table.column("n").to_pylist() == list(range(100_000))


def test_ray_trains_run_files_are_replaced_whole_never_rewritten_in_place(tmp_path):
    """Ray Train rewrites its checkpoint snapshot at each checkpoint; a stop that killed it mid-write left an
    empty snapshot, which the rerun could not read (the CI failure of 2026-11-26). Until the write is closed,
    the file on disk, all a killed writer leaves, is the old one."""
    snapshot = tmp_path / "checkpoint_manager_snapshot.json"
    snapshot.write_text('{"step": 20}')
    fs = pickle.loads(pickle.dumps(storage.arrow_filesystem(str(tmp_path))))  # as Ray ships it to its workers
    writing = fs.open_output_stream(str(snapshot))
    writing.write(b'{"step": 4')
    writing.flush()
    assert snapshot.read_text() == '{"step": 20}'
    writing.write(b"0}")
    writing.close()
    assert snapshot.read_text() == '{"step": 40}'
    assert [p.name for p in tmp_path.iterdir()] == [snapshot.name]
    # The permissions a new file gets from the umask, not a temporary file's 0600.
    assert snapshot.stat().st_mode & 0o777 == 0o666 & ~_umask()


def test_ray_trains_deletions_on_an_object_store_take_a_path_as_a_path():
    """pyarrow's fsspec handler deletes through fsspec's rm, which reads runs[1] as a glob pattern: Ray Train
    dropping an old checkpoint of runs[1] deleted runs1's and kept its own."""
    memory = fsspec.filesystem("memory")
    base = f"/arrow-{os.getpid()}"
    for run in ("runs[1]", "runs1"):
        memory.pipe_file(f"{base}/{run}/checkpoint_1/state.pt", b"weights")
        memory.pipe_file(f"{base}/{run}/result.json", b"{}")
    try:
        fs = pickle.loads(pickle.dumps(storage.arrow_filesystem(f"memory://{base}/runs[1]")))
        fs.delete_dir(f"{base}/runs[1]/checkpoint_1")
        fs.delete_file(f"{base}/runs[1]/result.json")
        assert memory.find(base) == [f"{base}/runs1/checkpoint_1/state.pt", f"{base}/runs1/result.json"]
        with pytest.raises(FileNotFoundError):
            fs.delete_dir(f"{base}/runs[1]/checkpoint_1")
    finally:
        memory.rm(base, recursive=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
