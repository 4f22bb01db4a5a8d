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
from pipeline.config_base import Strict
from pipeline.evaluate import items as test_items
from pipeline.leaderboard import stage as leaderboard
from pipeline.stage import Stage, run_stage
from storage import (
    DamagedDataset,
    DatasetError,
    DatasetWriter,
    dataset_path,
    intact,
    iter_batches,
    list_datasets,
    local_copy,
    read_manifest,
    read_table,
    remove,
    remove_temporaries,
    shards,
    verify,
)
from storage.dataset import MANIFEST, TMP_PREFIX
from storage.dropped import DroppedLog, read_dropped

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


class NumbersSettings(Strict):
    n: int
    rows_per_shard: int


class Numbers:
    """A small deterministic stage: n rows, three a shard; records each build."""

    builds: list[int] = []

    @classmethod
    def run(cls, settings: NumbersSettings, inputs, out):
        cls.builds.append(settings.n)
        out.write(rows(settings.n))


def toy_stage(name: str, run) -> Stage:
    """A data stage of the numbers' schema that `run` writes, for run_stage."""
    return Stage(
        name=name,
        version="1",
        flow="data",
        section="corpus",
        config=lambda cfg, key: {},
        run=run,
        settings=NumbersSettings,
        schema=SCHEMA,
    )


Numbers.STAGE = toy_stage("numbers", Numbers.run)
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


def reshaped(path: str, change) -> None:
    with open(f"{path}/{MANIFEST}") as f:
        manifest = json.load(f)
    with open(f"{path}/{MANIFEST}", "w") as f:
        json.dump(change(manifest), f)


def manifest_a_list(path: str) -> str:
    """Valid JSON, of another shape: what a reader of a manifest took for one and failed on with a traceback."""
    reshaped(path, lambda manifest: [])
    return f"{MANIFEST}: the whole file should be a JSON object (it is [])"


def parts_a_number(path: str) -> str:
    reshaped(path, lambda manifest: {**manifest, "parts": 5})
    return f"{MANIFEST}: parts should be a valid list (it is 5)"


def dropped_a_string(path: str) -> str:
    reshaped(path, lambda manifest: {**manifest, "dropped": "x"})
    return f'{MANIFEST}: dropped should be a JSON object (it is "x")'


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


WRONG_SHAPES = [manifest_a_list, parts_a_number, dropped_a_string]


@pytest.mark.parametrize("damage", [delete, truncate, flip, *WRONG_SHAPES])
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


@pytest.mark.parametrize("damage", [delete, truncate, *WRONG_SHAPES])
def test_inspect_says_a_dataset_is_damaged_and_names_the_file(tmp_path, damage, capsys):
    path = write(tmp_path)
    what = damage(path)
    for target in (path, str(tmp_path)):  # the dataset itself, and the listing of its artifacts
        assert main(["inspect", target]) == 2
        out, err = capsys.readouterr()
        assert err.startswith(f"cpipe: error: dataset damaged: {path}: {what}") and err.count("\n") == 1, err
        assert "Traceback" not in out + err and "ArrowInvalid" not in out + err
    assert main(["inspect", str(tmp_path)]) == 2 and "damaged" in capsys.readouterr().out


@pytest.mark.parametrize("damage", WRONG_SHAPES)
def test_a_manifest_of_another_shape_is_damage_to_every_reader_of_manifests(tmp_path, damage):
    path = write(tmp_path)
    what = damage(path)
    for read in (read_manifest, read_dropped, verify):
        with pytest.raises(DamagedDataset) as caught:
            read(path)
        assert str(caught.value) == f"dataset damaged: {path}: {what}"
    assert not intact(path)
    assert [d["path"] for d in list_datasets(str(tmp_path))] == [path]  # listed still, for inspect to mark


def write_dropping(tmp_path) -> str:
    """The numbers dataset with the record of a row it dropped, kept as the filter stage keeps it."""
    with DatasetWriter(
        str(tmp_path), "numbers", "d" * 16, config={}, inputs={}, schema=SCHEMA, rows_per_shard=3
    ) as out:
        with DroppedLog(out) as dropped:
            out.write(rows(8))
            dropped.add("doc-8", "doc-8.txt", "too_short", "1 token")
    return dataset_path(str(tmp_path), "numbers", "d" * 16)


@pytest.mark.parametrize("damage", [delete, truncate, flip, *WRONG_SHAPES])
def test_inspect_dropped_checks_the_dataset_first(tmp_path, damage, capsys):
    path = write_dropping(tmp_path)
    assert main(["inspect", path, "--dropped"]) == 0
    assert capsys.readouterr().out.startswith("dropped: 1  too_short: 1\n")
    what = damage(path)
    assert main(["inspect", path, "--dropped"]) == 2
    out, err = capsys.readouterr()
    assert err.startswith(f"cpipe: error: dataset damaged: {path}: {what}") and err.count("\n") == 1, err
    assert out == ""


@pytest.mark.parametrize("damage", [delete, truncate, flip, *WRONG_SHAPES])
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


class WithSideFiles:
    """Numbers with the files beside the shards that the evaluate and train stages write: kept items, a model
    folder, and a card a later stage rewrites."""

    builds: list[int] = []

    @classmethod
    def run(cls, config, inputs, out):
        cls.builds.append(1)
        out.write(rows(8))
        pq.write_table(pa.Table.from_pylist(rows(4), schema=SCHEMA), f"{out.local_dir}/_items.parquet")
        os.makedirs(f"{out.local_dir}/model")
        with open(f"{out.local_dir}/model/weights.bin", "wb") as f:
            f.write(bytes(range(256)) * 8)
        with open(f"{out.local_dir}/model/README.md", "w") as f:
            f.write("card\n")
        out.rewritten.add("model/README.md")


WithSideFiles.STAGE = toy_stage("sides", WithSideFiles.run)


def test_the_manifest_records_every_other_file_but_the_rewritten(tmp_path):
    path = run_stage(WithSideFiles.STAGE, CONFIG, {}, str(tmp_path))
    data = {name: open(f"{path}/{name}", "rb").read() for name in ("_items.parquet", "model/weights.bin")}
    assert json.loads(open(f"{path}/{MANIFEST}").read())["files"] == [
        {"file": name, "bytes": len(content), "crc32": zlib.crc32(content)} for name, content in data.items()
    ]
    with open(f"{path}/model/README.md", "w") as f:  # the leaderboard writes the model's scores into its card
        f.write("card with scores\n")
    assert intact(path)


def side_deleted(path: str) -> str:
    os.remove(f"{path}/_items.parquet")
    return "_items.parquet is missing"


def side_truncated(path: str) -> str:
    os.truncate(f"{path}/model/weights.bin", 100)
    return "model/weights.bin holds 100 bytes, its manifest records 2048"


def side_flipped(path: str) -> str:
    with open(f"{path}/model/weights.bin", "r+b") as f:
        f.write(b"\xff")
    return "model/weights.bin does not match its manifest's checksum"


@pytest.mark.parametrize("damage", [side_deleted, side_truncated, side_flipped])
def test_a_missing_or_changed_side_file_is_damage_inspect_names_and_a_run_rebuilds(tmp_path, damage, capsys):
    WithSideFiles.builds.clear()
    path = run_stage(WithSideFiles.STAGE, CONFIG, {}, str(tmp_path))
    assert intact(path)
    what = damage(path)
    with pytest.raises(DamagedDataset) as caught:
        read_table(path)
    assert str(caught.value) == f"dataset damaged: {path}: {what}"
    assert main(["inspect", path]) == 2
    assert capsys.readouterr().err == f"cpipe: error: dataset damaged: {path}: {what}\n"
    assert run_stage(WithSideFiles.STAGE, CONFIG, {}, str(tmp_path)) == path
    assert len(WithSideFiles.builds) == 2 and intact(path)


def test_kept_items_and_dropped_rows_are_read_only_from_an_intact_dataset(tmp_path):
    items = scores_dataset(str(tmp_path), "ma")
    assert len(test_items.read(items)) > 0
    os.remove(f"{items}/{test_items.ITEMS}")
    with pytest.raises(DamagedDataset, match=f"{test_items.ITEMS} is missing"):
        test_items.read(items)
    dropping = write_dropping(tmp_path)
    os.truncate(f"{dropping}/_dropped.parquet", 10)
    with pytest.raises(DamagedDataset, match="_dropped.parquet holds 10 bytes"):
        read_dropped(dropping)


def test_an_artifacts_path_holding_glob_characters_is_a_path(tmp_path, capsys):
    """runs[ab] is a directory of that name, not a pattern that reads, lists or cleans up runsa's datasets."""
    ours, theirs = str(tmp_path / "runs[ab]"), str(tmp_path / "runsa")
    path, _ = write(ours), write(theirs, n=5)
    for root in (ours, theirs):  # what a killed writer leaves
        os.makedirs(f"{root}/numbers/{TMP_PREFIX}{'f' * 16}-killed")
    assert [d["path"] for d in list_datasets(ours)] == [path]
    assert main(["inspect", ours]) == 0
    assert path in capsys.readouterr().out
    assert remove_temporaries(ours, "numbers", "f" * 16) == 1
    assert os.listdir(f"{ours}/numbers") == ["f" * 16]
    assert len(os.listdir(f"{theirs}/numbers")) == 2 and read_table(f"{theirs}/numbers/{'f' * 16}").num_rows == 5


def test_on_an_object_store_a_path_holding_glob_characters_is_a_path():
    """fsspec's rm, get, put and copy read a path given alone as a glob pattern: runs[1]'s dataset was written
    from runs1's, copied from it and deleted in its place."""
    fs = fsspec.filesystem("memory")
    base = f"memory://integrity-{os.getpid()}"
    ours, theirs = f"{base}/runs[1]", f"{base}/runs1"
    try:
        for root, n in ((theirs, 5), (ours, 8)):
            with DatasetWriter(root, "numbers", "f" * 16, config={}, inputs={}, schema=SCHEMA) as out:
                out.write(rows(n))
                with open(f"{out.local_dir}/side.txt", "w") as f:  # a file a library writes: uploaded (put)
                    f.write(root)
        path, other = dataset_path(ours, "numbers", "f" * 16), dataset_path(theirs, "numbers", "f" * 16)
        assert read_table(path).num_rows == 8 and fs.cat_file(f"{path}/side.txt").decode() == ours
        with local_copy(path) as local:  # get
            assert open(f"{local}/side.txt").read() == ours
            assert pq.read_table(f"{local}/part-00000.parquet").num_rows == 8
        remove(path)
        assert not fs.exists(path) and read_table(other).num_rows == 5
    finally:
        fs.rm(base.removeprefix("memory://"), recursive=True)


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
