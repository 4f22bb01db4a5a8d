"""Nothing lost, nothing silent: concurrent publishing, damaged datasets, a full disk."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import zlib

import fsspec.implementations.local
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy import stats

from flows.cli import main
from pipeline.evaluate import items as test_items
from pipeline.leaderboard import stage as leaderboard
from pipeline.stage import Stage, run_stage
from storage import DamagedDataset, DatasetError, DatasetWriter, dataset_path, intact, iter_batches, read_table, shards
from storage.dataset import MANIFEST, TMP_PREFIX

MODELS = ("ma", "mb", "mc", "md")


def scores_dataset(artifacts: str, model: str) -> str:
    """An evaluate dataset holding one model's STS-B scores and their test items, as the evaluate stage writes
    them."""
    gold = [float(i) for i in range(10)]
    predicted = {p: [g + (i * MODELS.index(model) % 7) for i, g in enumerate(gold)] for p in ("cosine", "senteval")}
    rows = [
        {
            "model": model,
            "kind": "trained",
            "task": "STSB",
            "subset": "all",
            "split": "test",
            "metric": "spearman",
            "protocol": p,
            "value": stats.spearmanr(predicted[p], gold).statistic,
            "n": 10,
            "model_fingerprint": model * 8,
            "data_hash": "d",
        }
        for p in predicted
    ]
    fp = (model * 8)[:16]
    with DatasetWriter(artifacts, "evaluate", fp, config={"model": model, "spec": {"kind": "user"}}, inputs={}) as out:
        out.write(pa.Table.from_pylist(rows))
        test_items.write(
            [test_items.Items("STSB", p, "all", np.array(predicted[p]), np.array(gold)) for p in predicted],
            out.local_dir,
        )
    return dataset_path(artifacts, "evaluate", fp)


def publish_after(barrier, path: str, artifacts: str) -> None:
    barrier.wait()
    leaderboard.publish(path, artifacts)


@pytest.mark.slow
def test_concurrent_publishing_from_several_processes_keeps_every_row(tmp_path):
    artifacts = str(tmp_path)
    boards = [
        run_stage(leaderboard.STAGE, {"rank_by": None}, {f"scores-{m}": scores_dataset(artifacts, m)}, artifacts)
        for m in MODELS
    ]
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(len(boards))
    procs = [context.Process(target=publish_after, args=(barrier, board, artifacts)) for board in boards]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0] * len(procs)
    assert sorted(pd.read_parquet(tmp_path / f"{leaderboard.CUMULATIVE}.parquet")["model"]) == list(MODELS)
    assert sorted(pd.read_parquet(tmp_path / leaderboard.CUMULATIVE_SCORES)["model"].unique()) == list(MODELS)
    # Every model's test items kept, one file each, and every row with its intervals.
    assert sorted(p.name for p in (tmp_path / leaderboard.CUMULATIVE_ITEMS).iterdir()) == [
        f"d.{m * 8}.parquet" for m in MODELS
    ]
    table = pd.read_parquet(tmp_path / f"{leaderboard.CUMULATIVE}.parquet")
    assert table[["STSB cosine lo", "STSB senteval hi"]].notna().all().all()
    assert not list(tmp_path.glob("*/.lease-*"))


SCHEMA = pa.schema([("x", pa.int64()), ("text", pa.string())])


def rows(n: int) -> list[dict]:
    return [{"x": i, "text": f"row {i} " * (i % 5)} for i in range(n)]


class Numbers:
    """A small deterministic stage: n rows, three a shard; records each build."""

    builds: list[int] = []

    @classmethod
    def run(cls, config, inputs, out):
        cls.builds.append(config["n"])
        out.write(rows(config["n"]))


Numbers.STAGE = Stage(
    name="numbers",
    version="1",
    flow="data",
    section="corpus",
    config=lambda cfg, key: {},
    run=Numbers.run,
    schema=SCHEMA,
)
CONFIG = {"n": 8, "rows_per_shard": 3}


def write(tmp_path, n: int = 8) -> str:
    with DatasetWriter(
        str(tmp_path), "numbers", "f" * 16, config={}, inputs={}, schema=SCHEMA, rows_per_shard=3
    ) as out:
        out.write(rows(n))
    return dataset_path(str(tmp_path), "numbers", "f" * 16)


def delete(path: str) -> str:
    os.remove(f"{path}/part-00001.parquet")
    return "part-00001.parquet is missing"


def truncate(path: str) -> str:
    shard = f"{path}/part-00001.parquet"
    os.truncate(shard, os.path.getsize(shard) // 2)
    return "part-00001.parquet holds"


def flip(path: str) -> str:
    """One byte changed in the middle of a shard: same size, other content."""
    shard = f"{path}/part-00001.parquet"
    with open(shard, "r+b") as f:
        f.seek(os.path.getsize(shard) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    return "part-00001.parquet does not match its manifest's checksum"


def test_the_manifest_records_each_shard_with_its_rows_bytes_and_checksum(tmp_path):
    path = write(tmp_path)
    parts = json.loads(open(f"{path}/{MANIFEST}").read())["parts"]
    expected = []
    for name in sorted(f for f in os.listdir(path) if f.startswith("part-")):
        data = open(f"{path}/{name}", "rb").read()
        expected.append(
            {
                "file": name,
                "rows": pq.ParquetFile(f"{path}/{name}").metadata.num_rows,
                "bytes": len(data),
                "crc32": zlib.crc32(data),
            }
        )
    assert parts == expected and [p["rows"] for p in parts] == [3, 3, 2]
    empty = tmp_path / "empty"
    with DatasetWriter(str(empty), "numbers", "e" * 16, config={}, inputs={}, schema=SCHEMA):
        pass
    data = (empty / "numbers" / ("e" * 16) / "part-00000.parquet").read_bytes()
    assert json.loads((empty / "numbers" / ("e" * 16) / MANIFEST).read_text())["parts"] == [
        {"file": "part-00000.parquet", "rows": 0, "bytes": len(data), "crc32": zlib.crc32(data)}
    ]


def readers(path: str) -> dict:
    return {
        "read_table": lambda: read_table(path),
        "iter_batches": lambda: list(iter_batches(path)),
        "shards": lambda: shards(path),
    }


@pytest.mark.parametrize("damage", [delete, truncate, flip])
def test_every_reader_of_a_damaged_dataset_stops_in_one_line_naming_the_file(tmp_path, damage):
    path = write(tmp_path)
    assert read_table(path).num_rows == 8 and intact(path)  # checked, and the checksums cached, before the damage
    what = damage(path)
    for name, read in readers(path).items():
        with pytest.raises(DamagedDataset) as caught:
            read()
        message = str(caught.value)
        assert message.startswith(f"dataset damaged: {path}: {what}") and "\n" not in message, (name, message)
    assert not intact(path)


def test_a_stray_shard_the_manifest_does_not_record_is_damage(tmp_path):
    path = write(tmp_path)
    pq.write_table(pa.Table.from_pylist(rows(2), schema=SCHEMA), f"{path}/part-00003.parquet")
    with pytest.raises(DamagedDataset, match="part-00003.parquet is not a shard its manifest records"):
        read_table(path)


def old_manifest(path: str) -> None:
    """The manifest as written before shards were recorded: no "parts"."""
    manifest = json.loads(open(f"{path}/{MANIFEST}").read())
    del manifest["parts"]
    with open(f"{path}/{MANIFEST}", "w") as f:
        json.dump(manifest, f)


def test_a_manifest_without_parts_is_checked_by_shard_count_and_rows(tmp_path):
    path = write(tmp_path)
    old_manifest(path)
    assert read_table(path).num_rows == 8
    os.remove(f"{path}/part-00002.parquet")
    with pytest.raises(DamagedDataset, match="part-00002.parquet is missing \\(2 of the manifest's 3 shards"):
        read_table(path)
    pq.write_table(pa.Table.from_pylist(rows(1), schema=SCHEMA), f"{path}/part-00002.parquet")
    with pytest.raises(DamagedDataset, match="its shards hold 7 rows, its manifest records 8"):
        read_table(path)
    os.truncate(f"{path}/part-00002.parquet", 10)
    with pytest.raises(DamagedDataset, match="part-00002.parquet is not a readable Parquet file"):
        read_table(path)


def test_an_unreadable_or_missing_manifest_is_damage(tmp_path):
    path = write(tmp_path)
    os.truncate(f"{path}/{MANIFEST}", 20)
    with pytest.raises(DamagedDataset, match=f"{MANIFEST} is not valid JSON"):
        read_table(path)
    os.remove(f"{path}/{MANIFEST}")
    with pytest.raises(DamagedDataset, match=f"{MANIFEST} is missing"):
        read_table(path)


@pytest.mark.parametrize("damage", [delete, truncate])
def test_inspect_says_a_dataset_is_damaged_and_names_the_file(tmp_path, damage, capsys):
    path = write(tmp_path)
    what = damage(path)
    for target in (path, str(tmp_path)):  # the dataset itself, and the listing of its artifacts
        assert main(["inspect", target]) == 2
        out, err = capsys.readouterr()
        assert err.startswith(f"cpipe: error: dataset damaged: {path}: {what}") and err.count("\n") == 1, err
        assert "Traceback" not in out + err and "ArrowInvalid" not in out + err
    assert main(["inspect", str(tmp_path)]) == 2 and "damaged" in capsys.readouterr().out


@pytest.mark.parametrize("damage", [delete, truncate, flip])
def test_a_run_rebuilds_a_damaged_dataset_with_the_same_rows(tmp_path, damage, caplog):
    Numbers.builds.clear()
    path = run_stage(Numbers.STAGE, CONFIG, {}, str(tmp_path))
    before = read_table(path)
    what = damage(path)
    with caplog.at_level("INFO", logger="cpipe"):
        assert run_stage(Numbers.STAGE, CONFIG, {}, str(tmp_path)) == path
    assert len(Numbers.builds) == 2
    damaged = [r.getMessage() for r in caplog.records if "dataset damaged" in r.getMessage()]
    assert len(damaged) == 1 and damaged[0].startswith(f"numbers: dataset damaged: {path}: {what}")
    assert damaged[0].endswith("; rebuilding it") and "\n" not in damaged[0]
    assert read_table(path).equals(before) and intact(path)
    assert sorted(os.listdir(tmp_path / "numbers")) == [path.rsplit("/", 1)[-1]]  # no leftover, no lease
    caplog.clear()
    with caplog.at_level("INFO", logger="cpipe"):
        run_stage(Numbers.STAGE, CONFIG, {}, str(tmp_path))
    assert len(Numbers.builds) == 2 and "reusing" in caplog.text


def no_space(self, data):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_while_finishing_is_one_line_and_leaves_no_temporary_directory(tmp_path, monkeypatch):
    monkeypatch.setattr(fsspec.implementations.local.LocalFileOpener, "write", no_space)
    with pytest.raises(DatasetError) as caught:
        write(tmp_path)  # the rows are pending until the writer finishes
    assert str(caught.value) == f"no space left on device writing {dataset_path(str(tmp_path), 'numbers', 'f' * 16)}"
    assert os.listdir(tmp_path / "numbers") == []


def test_a_full_disk_while_writing_rows_is_one_line_and_leaves_no_temporary_directory(tmp_path, monkeypatch):
    with pytest.raises(DatasetError, match="^no space left on device writing .*/numbers/f{16}$"):
        with DatasetWriter(str(tmp_path), "numbers", "f" * 16, config={}, inputs={}, schema=SCHEMA) as out:
            assert [p.name for p in (tmp_path / "numbers").iterdir()][0].startswith(TMP_PREFIX)
            monkeypatch.setattr(fsspec.implementations.local.LocalFileOpener, "write", no_space)
            out.write(pa.Table.from_pylist(rows(5), schema=SCHEMA))  # an Arrow table is written at once
    assert os.listdir(tmp_path / "numbers") == []


def test_prefect_serves_no_cached_result_for_a_damaged_dataset():
    """A Prefect cache hit would hand a damaged dataset on without run_stage's check: the stage task has no
    Prefect cache, and run_stage alone decides what is reused."""
    from prefect.cache_policies import NO_CACHE

    from tasks.build import stage_task

    assert stage_task.cache_policy is NO_CACHE and stage_task.cache_key_fn is None
