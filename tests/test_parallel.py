import math
import os

import pytest

from pipeline.parallel import ordered_map

pytestmark = pytest.mark.ray


def square_with_pid(x: int) -> tuple[int, int]:
    return x * x, os.getpid()


@pytest.fixture(scope="module")
def local_ray():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.parametrize("backend", ["serial", "processes"])
def test_results_come_back_in_order(backend):
    results = list(ordered_map(square_with_pid, range(40), backend=backend, workers=2))
    assert [r for r, _ in results] == [x * x for x in range(40)]
    pids = {pid for _, pid in results}
    assert (pids == {os.getpid()}) if backend == "serial" else (os.getpid() not in pids and len(pids) >= 1)


def test_ray_backend_matches_serial(local_ray):
    # Ray workers import the function by module name: use one they can import (not this test file).
    assert list(ordered_map(math.factorial, range(40), backend="ray", workers=2)) == [math.factorial(x) for x in range(40)]


def test_unknown_backend():
    with pytest.raises(ValueError, match="unknown parallel backend"):
        list(ordered_map(square_with_pid, [1], backend="threads", workers=2))
