"""Whether Ray can hold a run's training: its workers' CPUs (and GPUs).

Each worker is an actor holding `cpus_per_worker` CPUs for the whole run, and reads its own pairs
(pipeline.train.shard); with more workers than Ray's CPUs, Ray Train retries starting the worker group without
end. A local instance's CPUs are all it will have, so there a run that does not fit is refused before any
worker starts; a cluster may grow (an autoscaler adds nodes), so there it is a warning.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pipeline.errors import InputError

if TYPE_CHECKING:
    from pipeline.train.config import TrainConfig

log = logging.getLogger("cpipe")
_warned: set[str] = set()


def cpu_shortfall(train: TrainConfig, cpus: float, more: str) -> str | None:
    """One line saying what CPUs `train` (a run's settings) needs beyond `cpus` and what to set instead, or
    None when it fits. `more`: how to give Ray more CPUs."""
    workers, per_worker = train.num_workers, train.cpus_per_worker
    needed = workers * per_worker
    if needed <= cpus:
        return None
    held = f"{workers} worker{'s' * (workers != 1)}" + (f" x {per_worker} CPUs" if per_worker != 1 else "")
    fixes = []
    if (fitting := int(cpus // per_worker)) >= 1:
        fixes.append(f"train.num_workers<={fitting}")
    if per_worker > 1 and (fitting := int(cpus // workers)) >= 1:
        fixes.append(f"train.cpus_per_worker<={fitting}")
    fixes = f"set {' or '.join(fixes)}, or {more}" if fixes else more
    return f"train.num_workers={workers} needs {needed:g} CPUs ({held}); Ray has {cpus:g}: {fixes}"


def gpu_shortfall(train: TrainConfig, gpus: float) -> str | None:
    """The same for GPUs: a worker of a use_gpu run holds one."""
    workers = train.num_workers
    if not train.use_gpu or workers <= gpus:
        return None
    fix = f"train.num_workers<={int(gpus)}" if gpus >= 1 else "train.use_gpu=false"
    return f"train.num_workers={workers} with train.use_gpu needs {workers} GPUs; Ray has {gpus:g}: set {fix}"


def check_resources(train: TrainConfig, resources: Mapping[str, float], local: bool) -> None:
    """Before any worker starts: refuse (InputError) a run that Ray's `resources` (ray.cluster_resources())
    cannot hold when Ray is a `local` instance; on a cluster, warn once per shortfall."""
    more = "give Ray more CPUs (ray.num_cpus)" if local else "add nodes to the cluster"
    why = gpu_shortfall(train, resources.get("GPU", 0)) or cpu_shortfall(train, resources.get("CPU", 0), more)
    if why is None:
        return
    if local:
        raise InputError(why)
    if why not in _warned:
        _warned.add(why)
        log.warning("train: %s; until the cluster scales up, the run waits", why)


def check_before_ray(runs: Mapping[str, TrainConfig], num_cpus: int | None, cpu_count: int, gpu_count: int) -> None:
    """Pre-flight, before a local Ray starts: each run against ray.num_cpus (`num_cpus`), else the machine's
    `cpu_count`, the most Ray takes (fewer under a container's quota, which check_resources then sees), and
    against the machine's `gpu_count`, all a local Ray finds (a use_gpu profile on a laptop is refused here,
    not after the data stages ran)."""
    for name, train in runs.items():
        more = "give Ray more CPUs (ray.num_cpus)"
        if why := gpu_shortfall(train, gpu_count) or cpu_shortfall(train, num_cpus or cpu_count, more):
            raise InputError(f"runs.{name}: {why}")
