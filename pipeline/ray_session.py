"""Connecting to Ray, for the stages that run on it and the tasks that start it for them."""

from __future__ import annotations

import os


def ray_init(address: str | None, num_cpus: int | None) -> None:
    import ray

    if not ray.is_initialized():
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        # Workers' prints reach the driver once, through log_to_driver, not also through Train's print patch.
        os.environ.setdefault("RAY_TRAIN_ENABLE_PRINT_PATCH", "0")
        # What a local instance's workers would print on the user's terminal that is Ray's business, not theirs:
        # Ray Data's per-dataset INFO lines (its log files keep warnings and errors) and the deprecation
        # warnings Ray's own internals raise. The workers inherit these; the user's own settings win.
        os.environ.setdefault("RAY_DATA_LOG_LEVEL", "WARNING")
        os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")
        # RAY_ADDRESS (set inside Ray jobs) means a cluster too. Without either, "local" starts our own
        # instance: a bare ray.init() would join whatever `ray start` left on this machine.
        cluster = address or os.environ.get("RAY_ADDRESS")
        ray.init(address=cluster or "local", num_cpus=None if cluster else num_cpus, log_to_driver=True,
                 configure_logging=False)


def started_here() -> bool:
    """Whether this process's Ray is a local instance it started (whose CPUs are all it will have), not a
    cluster it connected to (which an autoscaler may grow). Ray says so only on its private node object."""
    import ray._private.worker

    node = ray._private.worker._global_node
    return node is not None and node.is_head()
