"""Map a function over work units on one process, a process pool, or a Ray cluster, in order.

Results come back in input order whatever the backend, so a stage that merges
them sequentially writes the same dataset as a serial run. At most
`2 * workers` units are in flight, so memory stays flat on long inputs.
What every unit needs (an index, a model) is `shared`: sent to each worker once. A stage's typed settings that
spread its work so extend `Spread`.
"""

from __future__ import annotations

import multiprocessing
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from typing import Any, Literal, TypeVar

from pydantic import Field

from pipeline.config_base import Strict
from pipeline.stage import AT_RUNTIME

T, R = TypeVar("T"), TypeVar("R")
Backend = Literal["serial", "processes", "ray"]
_SHARED: list = []  # in a worker: [the Ray object's id (None from a pool's initializer), the object shared]


class Spread(Strict):
    """How a stage spreads its units over `ordered_map` (the config's `parallel` section): runtime settings of its
    stage config, since every backend writes the same dataset."""

    backend: Backend = Field("serial", json_schema_extra=AT_RUNTIME)
    workers: int = Field(1, ge=1, json_schema_extra=AT_RUNTIME)


def ordered_map(
    fn: Callable[..., R], items: Iterable[T], backend: Backend = "serial", workers: int = 1, shared: Any = None
) -> Iterator[R]:
    """fn(item) for each item, or fn(shared, item) when `shared` is given: pickled once for each worker process
    (a pool's initializer), or put once in Ray's object store and fetched once by each worker that runs a unit,
    rather than sent with every unit."""
    if backend == "serial" or workers <= 1 and backend != "ray":
        yield from map(fn if shared is None else partial(fn, shared), items)
    elif backend == "processes":
        # spawn, not fork: the parent may hold tokenizer thread pools and Ray connections.
        given = {} if shared is None else {"initializer": _keep, "initargs": (None, shared)}
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), **given) as pool:
            unit = fn if shared is None else partial(_with_shared, fn, None)
            yield from _bounded(pool.submit, lambda future: future.result(), unit, items, workers)
    elif backend == "ray":
        import ray

        remote = ray.remote(_call)
        unit = fn if shared is None else partial(_with_shared, fn, ray.put(shared))
        yield from _bounded(remote.remote, _ray_get, unit, items, workers)
    else:
        raise ValueError(f"unknown parallel backend {backend!r} (serial, processes, ray)")


def _keep(key: str | None, obj: Any) -> None:
    _SHARED[:] = [key, obj]


def _with_shared(fn: Callable[..., R], ref: Any, item: T) -> R:
    """fn(the shared object, item) in a worker; a Ray worker fetches the object the first time, and keeps it (one
    at a time) for the next unit."""
    if ref is not None and (not _SHARED or _SHARED[0] != ref.hex()):
        import ray

        _keep(ref.hex(), ray.get(ref))
    return fn(_SHARED[1], item)


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
