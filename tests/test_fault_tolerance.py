"""Kill a Ray Train worker mid-run: Ray Train restarts it from the last checkpoint, and the run ends with
the same steps, the same batches in the same order, and the same model as a run nobody disturbed."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time

import pandas as pd
import psutil
import pytest
import torch
from fsspec.implementations.local import LocalFileSystem
from pyarrow import PythonFile
from pyarrow.fs import PyFileSystem

from pipeline.model.transformer import HF_DIR
from pipeline.stage import run_stage
from pipeline.train import resume
from pipeline.train import stage as train
from pipeline.train.config import TrainConfig
from pipeline.train.loop import STATE, load_state
from storage import DatasetError, read_manifest
from storage.whole_files import ReplacedOnClose, _WholeFiles
from tests.conftest import prebuild
from tests.test_full_disk import on_full_disk

pytestmark = pytest.mark.ray

STEPS = 60  # the kill comes at the first checkpoint (step 10): 50 steps to spare


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, tiny_config, tiny_corpus):
    built = prebuild(
        tiny_config, tiny_corpus, tmp_path_factory.mktemp("ft"), "init", ["augment.epochs=10", "runs={declutr: {}}"]
    )  # 80 batches
    return {"pairs": built["augment/declutr"], "init": built["init"]}


def kill_first_worker_after_a_checkpoint(artifacts, killed: list) -> None:
    deadline = time.time() + 300
    while time.time() < deadline:
        if list(artifacts.glob("_ray/train-*/checkpoint_*")):
            for proc in psutil.Process().children(recursive=True):  # only this test's Ray instance
                try:
                    if "RayTrainWorker" in " ".join(proc.cmdline()):
                        os.kill(proc.pid, signal.SIGKILL)
                        killed.append(proc.pid)
                        return
                except psutil.NoSuchProcess:
                    pass
        time.sleep(0.05)


def test_a_killed_worker_resumes_without_repeating_or_skipping_batches(inputs, local_ray, tmp_path):
    config = {
        "train": TrainConfig(
            batch_size=4, max_steps=STEPS, lr=1e-3, max_length=34, checkpoint_every=10, log_every=1000, max_failures=2
        ).model_dump()
    }
    calm = run_stage(train.STAGE, config, inputs, str(tmp_path / "calm"))

    killed: list[int] = []
    watcher = threading.Thread(target=kill_first_worker_after_a_checkpoint, args=(tmp_path / "killed", killed))
    watcher.start()
    hit = run_stage(train.STAGE, config, inputs, str(tmp_path / "killed"))
    watcher.join()
    assert killed, "no training worker was killed"

    a, b = (pd.read_parquet(f"{p}/metrics.parquet") for p in (calm, hit))
    assert list(b["step"]) == list(range(1, STEPS + 1)) and read_manifest(hit)["steps"] == STEPS
    assert list(b["batch"]) == list(a["batch"]), "batches repeated or skipped across the restart"
    assert b["loss"].tolist() == pytest.approx(a["loss"].tolist(), rel=1e-4)
    from transformers import AutoModel

    calm_model, hit_model = (AutoModel.from_pretrained(f"{p}/{HF_DIR}") for p in (calm, hit))
    trained = dict(hit_model.named_parameters())
    for name, p in calm_model.named_parameters():
        if not name.startswith("pooler."):  # AutoModel draws a fresh pooler on load; it is not trained
            torch.testing.assert_close(p, trained[name], rtol=1e-4, atol=1e-5, msg=name)


def test_a_planted_checkpoint_is_refused_in_one_line_before_ray_trains(inputs, local_ray, tmp_path):
    """A stopped run's latest checkpoint swapped for a pickle payload: the rerun that would resume from it stops
    with the line naming the file (read on the driver, not in each worker Ray restarts), and nothing runs."""
    from pipeline.errors import InputError
    from pipeline.train.loop import STATE
    from pipeline.train.resume import SNAPSHOT
    from tests.test_safe_loading import Payload

    config = {
        "train": TrainConfig(
            batch_size=4, max_steps=STEPS, lr=1e-3, max_length=34, checkpoint_every=10, log_every=1000, max_failures=2
        ).model_dump()
    }
    art = tmp_path / "art"
    run_dir = art / "_ray" / f"train-{train.STAGE.fingerprint(config, inputs)}"
    (run_dir / "checkpoint_x").mkdir(parents=True)
    (run_dir / SNAPSHOT).write_text(
        json.dumps(
            {
                "checkpoint_results": [],
                "latest_checkpoint_result": {
                    "checkpoint_dir_name": "checkpoint_x",
                    "metrics": {"step": 10, "loss": 1.0},
                },
            }
        )
    )
    marker = tmp_path / "ran"
    torch.save({"step": 10, "metrics": [], "x": Payload(marker)}, run_dir / "checkpoint_x" / STATE)
    with pytest.raises(InputError, match=f"^{run_dir}/checkpoint_x/{STATE}: not a checkpoint") as e:
        run_stage(train.STAGE, config, inputs, str(art))
    assert "\n" not in str(e.value) and not marker.exists()
    assert not list(art.glob("train/*/_SUCCESS"))


def test_a_local_run_has_no_placement_group_cleaner_to_remove_it(local_ray, tmp_path):
    """Ray Train's cleaner asks the state API, which without an address asks any Ray instance on the host, whether
    the controller lives: beside another instance it removed a live run's placement group (a ControllerError at
    the workers' start, seen in the suite with two test workers' instances). On our local instance it is left out."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    settings = dict(
        scaling_config=ScalingConfig(num_workers=1), run_config=RunConfig(name="x", storage_path=str(tmp_path))
    )

    def callbacks(trainer_class) -> set[str]:
        return {type(c).__name__ for c in trainer_class(lambda c: None, **settings)._create_default_callbacks()}

    ours = callbacks(train._trainer_class())
    assert "PlacementGroupCleanerCallback" not in ours and "BackendSetupCallback" in ours
    assert "PlacementGroupCleanerCallback" in callbacks(TorchTrainer)  # Ray Train's own has it


class _FillsUp(_WholeFiles):
    """Ray Train's run state on a disk that fills up once the run has recorded a checkpoint: every file opened after
    that writes onto /dev/full (ENOSPC, from the kernel), each one's path listed in `filled`. The handler is pickled
    to Ray Train's controller and workers, which write the run state."""

    def __init__(self, fs, run_dir: str, filled: str):
        super().__init__(fs)
        self.run_dir, self.filled = run_dir, filled

    def open_output_stream(self, path, metadata):
        f = ReplacedOnClose(path)
        if resume.latest_checkpoint(self.run_dir) is not None:
            on_full_disk(f)
            with open(self.filled, "a") as listed:
                listed.write(f"{path}\n")
        return PythonFile(f, mode="w")


def test_a_full_disk_while_checkpointing_is_one_line_and_the_rerun_resumes(inputs, local_ray, tmp_path, monkeypatch):
    """The second checkpoint meets a full disk: one line naming its file, nothing published, no retry (each would
    train up to the same checkpoint and fail again), and the rerun resumes from the first checkpoint."""
    config = {
        "train": TrainConfig(
            batch_size=4, max_steps=20, lr=1e-3, max_length=34, checkpoint_every=10, log_every=1000, max_failures=2
        ).model_dump()
    }
    art, filled = tmp_path / "art", tmp_path / "filled"
    run_dir = art / "_ray" / f"train-{train.STAGE.fingerprint(config, inputs)}"
    monkeypatch.setattr(
        train, "arrow_filesystem", lambda path: PyFileSystem(_FillsUp(LocalFileSystem(), str(run_dir), str(filled)))
    )
    with pytest.raises(DatasetError) as e:
        run_stage(train.STAGE, config, inputs, str(art))
    [checkpoint] = [p for p in run_dir.glob("checkpoint_*") if (p / STATE).exists()]
    assert re.fullmatch(rf"no space left on device writing {run_dir}/checkpoint_[^/]+/{STATE}", str(e.value)), e.value
    assert len(filled.read_text().splitlines()) == 1, "Ray Train retried what was the user's to fix"
    assert not list(art.glob("train/*/_SUCCESS")) and not list(art.glob("train/.tmp-*"))
    first = load_state(str(checkpoint))
    assert first["step"] == 10

    monkeypatch.undo()  # space freed
    rerun = run_stage(train.STAGE, config, inputs, str(art))
    metrics = pd.read_parquet(f"{rerun}/metrics.parquet")
    assert list(metrics["step"]) == list(range(1, 21)) and read_manifest(rerun)["steps"] == 20
    # Resumed, not started over: the first ten steps are the checkpoint's, their measured seconds included.
    pd.testing.assert_frame_equal(metrics.head(10), pd.DataFrame(first["metrics"]), check_dtype=False)
