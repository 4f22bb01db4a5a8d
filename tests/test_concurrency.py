"""Runs sharing one artifacts directory: leases, stale temporaries, publishing that never removes a finished dataset."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import threading
import time

import pandas as pd
import pyarrow as pa
import pytest

from pipeline import registry
from pipeline.config_base import Strict
from pipeline.stage import Stage, run_stage
from storage import DatasetWriter, dataset_path, read_table
from storage.lease import Lease, lease_path, stale
from tests.conftest import CPIPE, ROOT, flow_env


class CountingSettings(Strict):
    n: int
    seconds: float = 0


class Counting:
    """A stage that records each build, so a test can tell a build from a reuse."""

    SCHEMA = pa.schema([("x", pa.int64())])
    builds: list[float] = []

    @classmethod
    def run(cls, settings: CountingSettings, inputs, out):
        cls.builds.append(time.time())
        time.sleep(settings.seconds)
        out.write([{"x": i} for i in range(settings.n)])


Counting.STAGE = Stage(
    name="counting",
    version="1",
    flow="data",
    section="corpus",
    config=lambda cfg, key: {},
    run=Counting.run,
    settings=CountingSettings,
    schema=Counting.SCHEMA,
)


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_a_lease_whose_holder_died_is_broken(tmp_path):
    dataset = str(tmp_path / "stage" / "abc")
    (tmp_path / "stage").mkdir()
    holder = {"host": os.uname().nodename, "pid": dead_pid(), "token": "old", "renewed": time.time()}
    (tmp_path / "stage" / ".lease-abc").write_text(json.dumps(holder))
    assert stale(holder)
    lease = Lease(dataset)
    lease.acquire(poll=0.05)
    assert json.loads(open(lease_path(dataset)).read())["pid"] == os.getpid()
    lease.release()
    assert not os.path.exists(lease_path(dataset))


def test_a_lease_not_renewed_for_long_is_stale_whatever_its_host():
    assert stale({"host": "elsewhere", "pid": 1, "renewed": time.time() - 3600})
    assert not stale({"host": "elsewhere", "pid": 1, "renewed": time.time()})
    assert not stale({"host": os.uname().nodename, "pid": os.getpid(), "renewed": time.time()})


def test_an_empty_lease_is_held_while_fresh_and_broken_once_old(tmp_path):
    """A lease between O_EXCL create and its write is empty; a second writer must wait, not break it."""
    dataset = str(tmp_path / "stage" / "abc")
    (tmp_path / "stage").mkdir()
    path = tmp_path / "stage" / ".lease-abc"
    path.write_bytes(b"")
    assert not stale(Lease(dataset).holder())
    old = time.time() - 3600
    os.utime(path, (old, old))
    assert stale(Lease(dataset).holder())
    lease = Lease(dataset)
    lease.acquire(poll=0.05)
    assert json.loads(path.read_text())["token"] == lease.token
    lease.release()


def test_a_second_writer_waits_for_the_first_then_reuses_its_dataset(tmp_path):
    Counting.builds.clear()
    results, errors = [], []

    def build():
        try:
            results.append(run_stage(Counting.STAGE, {"n": 3, "seconds": 1.0}, {}, str(tmp_path)))
        except Exception as e:  # surfaced by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=build) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(Counting.builds) == 1, (errors, Counting.builds)
    assert results[0] == results[1] and read_table(results[0]).num_rows == 3
    assert not list(tmp_path.glob("counting/.lease-*")) and not list(tmp_path.glob("counting/.tmp-*"))


def test_temporaries_of_killed_writers_are_removed_when_the_stage_is_next_built(tmp_path, caplog):
    fp_config = {"n": 2}

    fp = Counting.STAGE.fingerprint(fp_config, {})
    for suffix in ("1a2b3c4d", "5e6f7a8b"):
        leftover = tmp_path / "counting" / f".tmp-{fp}-{suffix}"
        leftover.mkdir(parents=True)
        (leftover / "part-00000.parquet").write_bytes(b"half a file")
    other = tmp_path / "counting" / ".tmp-0000000000000000-deadbeef"  # another dataset's: not ours to judge
    other.mkdir()
    with caplog.at_level("INFO", logger="cpipe"):
        path = run_stage(Counting.STAGE, fp_config, {}, str(tmp_path))
    assert read_table(path).num_rows == 2
    assert sorted(p.name for p in (tmp_path / "counting").iterdir()) == sorted([fp, other.name])
    assert "removed 2 temporary directories left by killed runs" in caplog.text


def write(tmp_path, n: int, fp: str = "f" * 16) -> str:
    with DatasetWriter(str(tmp_path), "counting", fp, config={}, inputs={}, schema=Counting.SCHEMA) as out:
        out.write([{"x": i} for i in range(n)])
    return dataset_path(str(tmp_path), "counting", fp)


def test_publishing_never_removes_a_finished_dataset(tmp_path):
    path = write(tmp_path, 3)
    inode = os.stat(path).st_ino
    assert write(tmp_path, 5) == path  # a racing writer of the same fingerprint finishes second
    assert os.stat(path).st_ino == inode and read_table(path).num_rows == 3
    assert [p.name for p in (tmp_path / "counting").iterdir()] == [path.rsplit("/", 1)[-1]]


def test_publishing_replaces_an_unfinished_leftover_without_nesting(tmp_path):
    leftover = tmp_path / "counting" / ("f" * 16)
    leftover.mkdir(parents=True)
    (leftover / "part-00000.parquet").write_bytes(b"a killed run's")
    path = write(tmp_path, 4)
    assert read_table(path).num_rows == 4
    assert sorted(p.name for p in (tmp_path / "counting" / ("f" * 16)).iterdir()) == [
        "_SUCCESS",
        "_manifest.json",
        "part-00000.parquet",
    ]
    assert [p.name for p in (tmp_path / "counting").iterdir()] == ["f" * 16]


def ranked(output: str) -> list[str]:
    """The leaderboard's rows as a run logs them, a row a line under 'leaderboard, by <column>:'."""
    lines = output.split("leaderboard, by ", 1)[-1].splitlines()[1:]
    return list(itertools.takewhile(lambda line: line.startswith("  "), lines))


@pytest.mark.e2e
def test_two_runs_on_one_artifacts_directory_both_succeed_and_build_each_stage_once(
    tmp_path, tiny_config, tiny_corpus, tiny_sts
):
    artifacts = tmp_path / "artifacts"
    args = [
        CPIPE,
        "run",
        "--config",
        str(tiny_config),
        "--corpus",
        str(tiny_corpus),
        "--eval-data",
        str(tiny_sts),
        "--artifacts",
        str(artifacts),
        "--set",
        "runs={declutr: {}}",
    ]
    procs = [
        subprocess.Popen(args, cwd=ROOT, env=flow_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=900)[0] for p in procs]
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, out[-4000:]
    built = re.findall(r"cpipe - (\w+): building (\S+)", "".join(outputs))
    paths = [path for _, path in built]
    assert len(paths) == len(set(paths)), f"built twice: {sorted(paths)}"
    assert {stage for stage, _ in built} == set(registry.NAMES) - {"backtranslate", "infersent"}
    # Each run logs the leaderboard it published: the same table.
    boards = [ranked(out) for out in outputs]
    assert boards[0] and boards[0] == boards[1]
    assert set(pd.read_csv(artifacts / "leaderboard.csv")["model"]) == {
        "declutr",
        "untrained",
        "fasttext-bow",
        "random",
    }
    assert not list(artifacts.glob("*/.tmp-*")) and not list(artifacts.glob("*/.lease-*"))
    assert not list(artifacts.glob("_ray/train-*")), "Ray Train's state outlived its run"
