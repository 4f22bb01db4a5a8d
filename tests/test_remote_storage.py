"""Artifacts on an object store: the whole pipeline against an S3-compatible server (moto's) on 127.0.0.1.

Every stage's dataset, the leaderboard and Prefect's task results land in the bucket; nothing is left on
local disk (the run's directory and its temporary directory stay clean); a second run reuses every stage
from the bucket; a trained model loads straight from its s3:// URL.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from moto.server import ThreadedMotoServer

from pipeline import registry
from storage import DatasetError, DatasetWriter, list_datasets, local_copy, read_table
from tests.conftest import CPIPE, free_port

BUCKET = "cpipe"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def s3():
    """A moto S3 server and the environment that points fsspec (in this process and in a run's) at it."""
    import fsspec
    import s3fs

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = {"endpoint_url": f"http://127.0.0.1:{port}"}
    env = {**CREDENTIALS, "FSSPEC_S3": json.dumps(endpoint)}
    saved_env = {k: os.environ.get(k) for k in CREDENTIALS}
    saved_conf = fsspec.config.conf.get("s3")
    os.environ.update(CREDENTIALS)
    fsspec.config.conf["s3"] = endpoint
    fs = s3fs.S3FileSystem(**endpoint)
    fs.mkdir(BUCKET)
    try:
        yield fs, env
    finally:
        server.stop()
        s3fs.S3FileSystem.clear_instance_cache()
        for k, v in saved_env.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
        fsspec.config.conf.pop("s3") if saved_conf is None else fsspec.config.conf.__setitem__("s3", saved_conf)


def test_a_failed_remote_writer_leaves_nothing_and_a_finished_one_is_complete(s3):
    fs, _ = s3
    schema = pa.schema([("a", pa.int64())])
    with pytest.raises(RuntimeError):
        with DatasetWriter(f"s3://{BUCKET}/unit", "x", "broken", config={}, inputs={}, schema=schema) as out:
            out.write([{"a": 1}])
            Path(out.local_dir, "model.bin").write_bytes(b"half")
            raise RuntimeError("killed")
    assert not fs.exists(f"{BUCKET}/unit/x/broken") and not fs.find(f"{BUCKET}/unit")
    with DatasetWriter(f"s3://{BUCKET}/unit", "x", "fine", config={}, inputs={}, schema=schema) as out:
        out.write([{"a": 1}, {"a": 2}])
        Path(out.local_dir, "hf").mkdir()
        Path(out.local_dir, "hf", "config.json").write_text("{}")
        local = out.local_dir
    assert not os.path.exists(local)  # the local side of a remote dataset is temporary
    assert sorted(p.rsplit("/", 1)[-1] for p in fs.find(f"{BUCKET}/unit/x/fine")) == [
        "_SUCCESS",
        "_manifest.json",
        "config.json",
        "part-00000.parquet",
    ]
    assert read_table(f"s3://{BUCKET}/unit/x/fine").column("a").to_pylist() == [1, 2]
    with local_copy(f"s3://{BUCKET}/unit/x/fine") as copy:
        assert json.loads(Path(copy, "hf", "config.json").read_text()) == {}
        assert Path(copy).name == "fine"  # a dataset's last path part is its fingerprint
    assert not os.path.exists(copy)
    with pytest.raises(DatasetError, match="s3://cpipe/unit/x/missing"):
        with local_copy(f"s3://{BUCKET}/unit/x/missing"):
            pass


def _run(args: list[str], env: dict, cwd: Path) -> subprocess.CompletedProcess:
    result = subprocess.run([CPIPE, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return result


@pytest.mark.e2e
def test_the_pipeline_keeps_everything_in_the_bucket(s3, tiny_config, tiny_corpus, tiny_sts, tmp_path, request):
    fs, s3_env = s3
    cwd, tmp, home = tmp_path / "cwd", tmp_path / "tmp", tmp_path / "home"
    for d in (cwd, tmp, home):
        d.mkdir()
    # Ray's session (logs, sockets) is Ray's, not a stage's; a short path, as its socket paths must be.
    ray_tmp = tempfile.mkdtemp(prefix="cpipe-ray-", dir="/tmp")
    request.addfinalizer(lambda: shutil.rmtree(ray_tmp, ignore_errors=True))
    # A Prefect home of its own, whose local result storage no other test's run can have written to.
    prefect_home = tmp_path / "prefect"
    env = {
        **os.environ,
        **s3_env,
        "TMPDIR": str(tmp),
        "HOME": str(home),
        "RAY_TMPDIR": ray_tmp,
        "PREFECT_HOME": str(prefect_home),
    }
    artifacts = f"s3://{BUCKET}/runs"
    # One run is enough to see where every stage writes (test_e2e's full run has the others).
    args = [
        "run",
        "--config",
        str(tiny_config),
        "--corpus",
        str(tiny_corpus),
        "--eval-data",
        str(tiny_sts),
        "--artifacts",
        artifacts,
        "--set",
        "runs={declutr: {}}",
    ]
    first = _run(args, env, cwd)

    stages = {d["stage"] for d in list_datasets(artifacts)}
    assert stages == set(registry.NAMES) - {"backtranslate", "infersent"}, stages  # no cert run, no InferSent
    root = fs.ls(f"{BUCKET}/runs", detail=False)
    for name in ("leaderboard", "leaderboard-all"):
        for fmt in ("md", "csv", "parquet", "png"):
            assert f"{BUCKET}/runs/{name}.{fmt}" in root
    assert "declutr" in fs.cat(f"{BUCKET}/runs/leaderboard.md").decode()
    assert fs.find(f"{BUCKET}/runs/mteb-results")  # MTEB's result files (evaluate.results_dir's default)
    # Nothing on local disk: not in the run's directory, and nothing left in its temporary directory.
    assert not any(cwd.iterdir()), sorted(cwd.rglob("*"))
    # (Libraries leave empty directories and sockets there: multiprocessing's, torch's.)
    assert not [p for p in tmp.rglob("*") if p.is_file() or p.name.startswith("cpipe-")], sorted(tmp.rglob("*"))
    assert not fs.exists(f"{BUCKET}/runs/_ray/train-") and not fs.find(f"{BUCKET}/runs/_work")

    assert " built " in first.stdout + first.stderr
    # The same command again reuses every stage from the bucket: its plan is the run's own decision, made from the
    # manifests there (test_e2e's second run shows a run follows its plan), at a fraction of a second run's time.
    steps = json.loads(_run(["plan", "--json", *args[1:]], env, cwd).stdout)
    assert {s["action"] for s in steps} == {"reused"}, [s for s in steps if s["action"] != "reused"]
    assert {s["label"].split("/")[0] for s in steps} == stages, steps
    # The stage tasks persist no results (their state carries the path): none in the bucket, none in Prefect's
    # local result storage, where a remote cluster's other machines could not read them.
    assert not fs.exists(f"{BUCKET}/runs/_prefect")
    assert (prefect_home / "prefect.db").is_file()  # the runs did use this home
    assert not (prefect_home / "storage").exists() or not any((prefect_home / "storage").iterdir())

    listing = _run(["inspect", artifacts], env, cwd).stdout
    assert all(stage in listing for stage in stages), listing
    train = next(d["path"] for d in list_datasets(artifacts) if d["stage"] == "train")
    from pipeline.model.exported import Encoder

    vectors = Encoder(f"s3://{train}").encode(["a sentence", "another one"])
    assert vectors.shape == (2, 32) and np.isfinite(vectors).all()
