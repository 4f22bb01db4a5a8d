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


def test_unknown_backend():
    with pytest.raises(ValueError, match="unknown parallel backend"):
        list(ordered_map(square_with_pid, [1], backend="threads", workers=2))
