import math
import os

import pytest

from pipeline.parallel import ordered_map


def square_with_pid(x: int) -> tuple[int, int]:
    return x * x, os.getpid()


@pytest.mark.parametrize("backend", ["serial", pytest.param("processes", marks=pytest.mark.slow)])
def test_results_come_back_in_order(backend):
    results = list(ordered_map(square_with_pid, range(40), backend=backend, workers=2))
    assert [r for r, _ in results] == [x * x for x in range(40)]
    pids = {pid for _, pid in results}
    assert (pids == {os.getpid()}) if backend == "serial" else (os.getpid() not in pids and len(pids) >= 1)


@pytest.mark.ray
def test_ray_backend_matches_serial(local_ray):
    # Ray workers import the function by module name: use one they can import (not this test file).
    assert list(ordered_map(math.factorial, range(40), backend="ray", workers=2)) == [
        math.factorial(x) for x in range(40)
    ]


UNPICKLED: dict[int, int] = {}  # process id -> how many Shared objects were unpickled in it


class Shared:
    def __init__(self, factor: int):
        self.factor = factor

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        UNPICKLED[os.getpid()] = UNPICKLED.get(os.getpid(), 0) + 1


def scaled(shared: Shared, x: int) -> tuple[int, int]:
    return shared.factor * x, UNPICKLED.get(os.getpid(), 0)


def test_serial_units_get_the_shared_object_itself():
    shared = Shared(2)
    assert list(ordered_map(lambda s, x: (s is shared, s.factor * x), range(3), shared=shared)) == [
        (True, 0),
        (True, 2),
        (True, 4),
    ]


@pytest.mark.slow
def test_a_shared_object_reaches_each_worker_process_once():
    results = list(ordered_map(scaled, range(40), backend="processes", workers=2, shared=Shared(3)))
    assert [r for r, _ in results] == [3 * x for x in range(40)]
    assert {unpickled for _, unpickled in results} == {1}  # not once per unit


def test_unknown_backend():
    with pytest.raises(ValueError, match="unknown parallel backend"):
        list(ordered_map(square_with_pid, [1], backend="threads", workers=2))
