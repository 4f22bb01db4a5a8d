"""Where a stopped training resumes (pipeline.train.resume), on hand-written Ray Train snapshots."""

from __future__ import annotations

import json
import os

import fsspec

from pipeline.train import resume


def snapshot(run_dir, latest_step: int | None) -> None:
    latest = (
        None
        if latest_step is None
        else {"checkpoint_dir_name": "checkpoint_x", "metrics": {"step": latest_step, "loss": 1.0}}
    )
    (run_dir / resume.SNAPSHOT).write_text(json.dumps({"checkpoint_results": [], "latest_checkpoint_result": latest}))


def test_the_stopped_run_resumes_from_its_latest_checkpoint(tmp_path):
    older, newer = tmp_path / "train-a", tmp_path / "train-b"
    older.mkdir(), newer.mkdir()
    snapshot(older, 40)
    snapshot(newer, 120)
    resume.started(str(older))
    resume.started(str(newer))
    try:
        assert resume.stopped_step() == 120  # the run started last is the one the stop interrupted
        snapshot(newer, None)  # the later run has recorded no checkpoint yet: the earlier one says where it resumes
        assert resume.stopped_step() == 40
    finally:
        resume.finished(str(newer))
        resume.finished(str(older))
    assert resume.stopped_step() is None


def test_an_empty_snapshot_is_removed_so_the_run_starts_over_instead_of_failing(tmp_path):
    run = tmp_path / "train-a"
    run.mkdir()
    assert not resume.started_over(str(run))  # no snapshot: a new run
    snapshot(run, 20)
    assert not resume.started_over(str(run)) and (run / resume.SNAPSHOT).exists()
    (run / resume.SNAPSHOT).write_text("")  # what a stop mid-write left before run state was written whole
    resume.started(str(run))
    try:
        assert resume.stopped_step() is None
        assert resume.started_over(str(run)) and not (run / resume.SNAPSHOT).exists()
    finally:
        resume.finished(str(run))


def test_on_an_object_store_the_empty_snapshot_removed_is_the_runs_own():
    """fsspec's rm reads a path as a glob pattern: train-[a]'s empty snapshot stayed, and train-a's was deleted."""
    fs = fsspec.filesystem("memory")
    base = f"/resume-{os.getpid()}"
    fs.pipe_file(f"{base}/train-[a]/{resume.SNAPSHOT}", b"")
    fs.pipe_file(f"{base}/train-a/{resume.SNAPSHOT}", b"{}")
    try:
        assert resume.started_over(f"memory://{base}/train-[a]")
        assert not fs.exists(f"{base}/train-[a]/{resume.SNAPSHOT}") and fs.exists(f"{base}/train-a/{resume.SNAPSHOT}")
    finally:
        fs.rm(base, recursive=True)
