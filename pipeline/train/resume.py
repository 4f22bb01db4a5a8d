"""Where a stopped training run resumes: the latest checkpoint Ray Train recorded for it, which a rerun (the same
fingerprint, so the same run directory) starts from. Light, for the CLI's last line after a stop."""

from __future__ import annotations

import json

import fsspec

SNAPSHOT = "checkpoint_manager_snapshot.json"  # Ray Train's record of a run's checkpoints, the one it resumes from
# The run directories whose fit() this process started and has not seen return: a stop leaves its run here.
_training: list[str] = []


def started(run_dir: str) -> None:
    _training.append(run_dir)


def finished(run_dir: str) -> None:
    _training.remove(run_dir)


def started_over(run_dir: str) -> bool:
    """Remove the run's snapshot when it cannot be read, so Ray Train starts the run over instead of failing
    on it; True when it did. Before run state was written whole (storage.whole_files), a stop could leave the
    snapshot empty, and Ray cannot tell then which of the run's checkpoints is complete."""
    try:
        _snapshot(run_dir)
    except FileNotFoundError:
        return False
    except ValueError:
        fs, path = fsspec.core.url_to_fs(f"{run_dir}/{SNAPSHOT}")
        fs.rm_file(path)  # fs.rm would read [ ] * ? in the run directory as a glob pattern
        return True
    return False


def stopped_step() -> int | None:
    """The step the training this process was running resumes from; None when none was running, or it had
    recorded no checkpoint yet."""
    for run_dir in reversed(_training):
        try:
            latest = _snapshot(run_dir).get("latest_checkpoint_result") or {}
        except (OSError, ValueError):
            continue
        if (step := (latest.get("metrics") or {}).get("step")) is not None:
            return int(step)
    return None


def latest_checkpoint(run_dir: str) -> str | None:
    """The directory name of the checkpoint a rerun resumes from, as the run's snapshot records it; None when it
    records none (or there is no readable snapshot: started_over says which)."""
    try:
        latest = _snapshot(run_dir).get("latest_checkpoint_result") or {}
    except (OSError, ValueError):
        return None
    return latest.get("checkpoint_dir_name")


def _snapshot(run_dir: str) -> dict:
    with fsspec.open(f"{run_dir}/{SNAPSHOT}", "r") as f:
        return json.load(f)
