"""What Ray Train's controller logs in a run that succeeds stays off the user's terminal and a job's log; what it
logs when something is wrong does not."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT

# A Ray Train controller's logging as in its actor, without a Ray instance: the workers' setup hook has run, then the
# controller configures its loggers (Ray's own LoggingManager, which resets the levels of the loggers below
# `ray.train`), then Ray's own autoscaling client fails a resource request with the exception `ray.get` raised.
# A capture handler stands for Ray Train's system log file, which takes every level.
CONTROLLER = """
import logging, sys
from unittest import mock
import ray, ray._private.worker
from ray.train import DataConfig, RunConfig, ScalingConfig
from ray.train.backend import BackendConfig
from ray.train.v2._internal.execution.context import TrainRunContext
from ray.train.v2._internal.execution.scaling_policy.autoscaling_coordinator_client import (
    TrainAutoscalingCoordinatorClient)
from ray.train.v2._internal.logging.logging import LoggingManager
from pipeline.ray_session import quiet_timeouts

quiet_timeouts()
ray._private.worker.global_worker.mode = ray._private.worker.WORKER_MODE
context = TrainRunContext(run_config=RunConfig(), train_loop_config=None, scaling_config=ScalingConfig(num_workers=1),
                          backend_config=BackendConfig(), dataset_config=DataConfig())
with mock.patch.object(ray, "get_runtime_context"):
    LoggingManager.configure_controller_logger(context)
kept = []
capture = logging.Handler()
capture.emit = lambda record: kept.append(record.levelname)
logging.getLogger("ray.train").addHandler(capture)

class Coordinator:  # the actor's answer, as `ray.get(..., timeout=5)` gives it
    class request_resources:
        @staticmethod
        def remote(**_):
            raise {error}

client = TrainAutoscalingCoordinatorClient("run")
client.__dict__["_autoscaling_coordinator"] = Coordinator
client.send_resource_request(ScalingConfig(num_workers=1), 1)
print(kept)
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "error, shown, kept",
    [
        ('ray.exceptions.GetTimeoutError("Get timed out: some object(s) not ready.")', False, "DEBUG"),
        ("ray.exceptions.RayActorError()", True, "WARNING"),
    ],
)
def test_a_resource_request_that_timed_out_is_kept_from_the_terminal_and_a_failure_is_not(error, shown, kept):
    proc = subprocess.run(
        [sys.executable, "-c", CONTROLLER.format(error=error)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert ("Failed to send resource request" in proc.stderr) is shown, proc.stderr[-3000:]
    assert ("Traceback" in proc.stderr) is shown, proc.stderr[-3000:]
    assert proc.stdout.strip() == f"[{kept!r}]"  # the controller's own log file keeps it either way
