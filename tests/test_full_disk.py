"""A full disk is one line naming what was being written, whichever library was writing, and nothing written on
it looks finished. The disk is the kernel's /dev/full: every write there fails with ENOSPC, as on a full
filesystem (a file's descriptor is moved onto it with dup2). A disk filling up mid-write takes part of a write
and fails the next; the kernel's file size limit (RLIMIT_FSIZE, SIGXFSZ ignored) does exactly that, with EFBIG.
"""

from __future__ import annotations

import errno
import os
import resource
import signal
import stat
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from pyarrow import PythonFile
from safetensors import SafetensorError

from storage import DatasetError, DatasetWriter, dataset_path, full_disk, put_file
from storage.whole_files import ReplacedOnClose

FULL = "/dev/full"


def full_disk_file():
    """A file on the full disk, opened here: a library given the path may remove what it failed to write there
    (pyarrow does), and as root that removes /dev/full itself."""
    assert stat.S_ISCHR(os.stat(FULL).st_mode), f"{FULL} is not the kernel's full device"
    return open(FULL, "wb")


def on_full_disk(f) -> None:
    """The open file `f`'s writes go to /dev/full from now on."""
    full = os.open(FULL, os.O_WRONLY)
    try:
        os.dup2(full, f.fileno())
    finally:
        os.close(full)


@contextmanager
def file_size_limit(limit: int):
    """Writes past `limit` bytes stop short and the next one fails (EFBIG), as writes on a disk filling up do."""
    handler, old = signal.signal(signal.SIGXFSZ, signal.SIG_IGN), resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old)
        signal.signal(signal.SIGXFSZ, handler)


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


def test_a_file_replaced_whole_on_a_full_disk_is_one_line_and_the_old_file_stays(tmp_path):
    target = tmp_path / "checkpoint_manager_snapshot.json"
    target.write_text("the snapshot before")
    with pytest.raises(DatasetError) as e:
        with ReplacedOnClose(str(target)) as f:
            on_full_disk(f)
            f.write(b"{}")
    assert str(e.value) == f"no space left on device writing {target}"
    assert target.read_text() == "the snapshot before" and not leftovers(tmp_path)


def test_pyarrow_closing_a_file_it_failed_to_write_leaves_the_old_one(tmp_path):
    """Ray Train writes its run state through pyarrow (storage.whole_files.arrow_filesystem), whose `with` closes
    the file even when a write failed: the snapshot a rerun resumes from was replaced by an empty one, and the
    rerun started over from step 0."""
    target = tmp_path / "checkpoint_manager_snapshot.json"
    target.write_text("the snapshot before")
    f = ReplacedOnClose(str(target))
    on_full_disk(f)
    with pytest.raises(DatasetError, match=f"^no space left on device writing {target}$"):
        with PythonFile(f, mode="w") as stream:
            stream.write(b'{"latest_checkpoint_result": null}')
    assert target.read_text() == "the snapshot before" and not leftovers(tmp_path)


def test_a_write_cut_short_fails_and_replaces_nothing(tmp_path):
    """shutil.copyfileobj (put_file) and pyarrow ignore how much of a write a raw file took: a disk filling up
    took part of it, and the file replaced the old one cut short."""
    source, target = tmp_path / "source", tmp_path / "target"
    source.write_bytes(b"x" * 100_000)
    target.write_bytes(b"old")
    with pytest.raises(OSError) as e, file_size_limit(60_000):
        put_file(str(source), str(target))
    assert e.value.errno == errno.EFBIG
    assert target.read_bytes() == b"old" and not leftovers(tmp_path)


def _torch_save() -> None:
    with full_disk_file() as f:  # as pipeline.train.loop saves a checkpoint: through a Python file
        torch.save({"weights": torch.zeros(100_000)}, f)


def _parquet() -> None:
    with full_disk_file() as f:
        pq.write_table(pa.table({"n": list(range(100_000))}), f)


def _safetensors() -> None:
    # safetensors writes beside its file and renames it into place, so /dev/full cannot stand in for its disk: its
    # error as it came out of save_file onto a 64 KiB tmpfs.
    raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")


@pytest.mark.parametrize("write", [_torch_save, _parquet, _safetensors], ids=["torch", "parquet", "safetensors"])
def test_a_full_disk_is_one_line_whichever_library_was_writing(write):
    with pytest.raises(Exception) as raised:
        write()
    assert str(full_disk(raised.value, "/somewhere")) == "no space left on device writing /somewhere"
    assert full_disk(RuntimeError("unexpected pos 576 vs 534"), "/somewhere") is None  # a failure of another kind


@pytest.mark.parametrize("write", [_torch_save, _safetensors], ids=["torch", "safetensors"])
def test_a_stage_whose_writer_meets_a_full_disk_is_one_line_and_leaves_no_temporary_directory(tmp_path, write):
    """The train stage exports its model (safetensors) into the dataset's directory: a full disk there was a
    297-line SafetensorError, exit 1."""
    with pytest.raises(DatasetError) as e:
        with DatasetWriter(str(tmp_path), "train", "f" * 16, config={}, inputs={}) as out:
            (Path(out.local_dir) / "config.json").write_text("{}")
            write()
    assert str(e.value) == f"no space left on device writing {dataset_path(str(tmp_path), 'train', 'f' * 16)}"
    assert list((tmp_path / "train").iterdir()) == []


def test_a_full_disk_met_by_ray_trains_controller_is_its_one_line():
    """Ray Train's controller writes the run's record of its checkpoints itself: storage's one line comes back in
    a ControllerError, as a worker's comes back in a WorkerGroupError (tests/test_fault_tolerance.py)."""
    from ray.train import ControllerError

    from pipeline.train.failures import worker_input_error

    full = DatasetError("no space left on device writing /a/_ray/train-x/checkpoint_manager_snapshot.json")
    assert worker_input_error(ControllerError(full)) is full
    assert worker_input_error(ControllerError(RuntimeError("a bug"))) is None
