"""Map a function over work units on one process, a process pool, or a Ray cluster, in order.

Results come back in input order whatever the backend, so a stage that merges
them sequentially writes the same dataset as a serial run. At most
`2 * workers` units are in flight, so memory stays flat on long inputs.
"""

from __future__ import annotations

import multiprocessing
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Literal, TypeVar

T, R = TypeVar("T"), TypeVar("R")
Backend = Literal["serial", "processes", "ray"]


def ordered_map(fn: Callable[[T], R], items: Iterable[T], backend: Backend = "serial", workers: int = 1) -> Iterator[R]:
    if backend == "serial" or workers <= 1 and backend != "ray":
        yield from map(fn, items)
    elif backend == "processes":
        # spawn, not fork: the parent may hold tokenizer thread pools and Ray connections.
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            yield from _bounded(pool.submit, lambda future: future.result(), fn, items, workers)
    elif backend == "ray":
        import ray

        remote = ray.remote(_call)
        yield from _bounded(remote.remote, _ray_get, fn, items, workers)
    else:
        raise ValueError(f"unknown parallel backend {backend!r} (serial, processes, ray)")


def share(obj: T, backend: Backend) -> Any:
    """`obj` for many units' arguments: on Ray, one copy in the object store that each unit `fetch`es, rather
    than one serialised into every unit."""
    if backend != "ray":
        return obj
    import ray

    return ray.put(obj)


def fetch(shared: Any) -> Any:
    """Inside a unit, the object `share` was given."""
    ray = sys.modules.get("ray")
    return ray.get(shared) if ray is not None and isinstance(shared, ray.ObjectRef) else shared


def _call(fn: Callable[[T], R], item: T) -> R:
    # A plain module function for ray.remote, which rejects builtins and partials.
    return fn(item)


def _ray_get(ref):
    import ray

    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as e:
        # The worker's own exception (a bad input file, say), not Ray's wrapper and remote traceback.
        raise e.cause from None


def _bounded(submit, wait, fn, items, workers: int):
    in_flight: deque = deque()
    for item in items:
        in_flight.append(submit(fn, item))
        if len(in_flight) >= 2 * workers:
            yield wait(in_flight.popleft())
    while in_flight:
        yield wait(in_flight.popleft())
