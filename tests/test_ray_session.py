"""The local Ray instance a run starts is closed to the host's other users (issue 47): its dashboard's Jobs API,
which runs any command as the run's user, took a job from anyone who could reach 127.0.0.1, and its servers
listened on every interface, as did the rendezvous store of the training workers' process group."""

from __future__ import annotations

import ipaddress
import json
import os
import stat
import threading
import urllib.error
import urllib.request
from collections import Counter
from contextlib import suppress

import psutil
import pytest

from pipeline.stage import run_stage
from pipeline.train import stage as train
from pipeline.train.config import TrainConfig
from tests.test_precision import train_inputs
from tests.test_train_step import pairs


def _listening(pids: set[int]) -> dict[tuple[str, int], str]:
    """(address, port) -> the name of the process among `pids` that listens there."""
    found = {}
    for c in psutil.net_connections("inet"):
        if c.status == psutil.CONN_LISTEN and c.pid in pids:
            with suppress(psutil.NoSuchProcess):  # a worker Ray ended meanwhile
                found[c.laddr.ip, c.laddr.port] = psutil.Process(c.pid).name()
    return found


def _status(url: str, headers: dict[str, str], data: bytes | None = None) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=60) as answer:
            return answer.status
    except urllib.error.HTTPError as e:
        return e.code


def _loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    return (getattr(address, "ipv4_mapped", None) or address).is_loopback


def _listening_while(run, processes) -> dict[tuple[str, int], tuple[int, str]]:
    """(address, port) -> (pid, name) of each socket that `processes()` listened on at some point while `run()`
    ran, looked at every 0.1 s."""
    found, done = {}, threading.Event()

    def look() -> None:
        while not done.wait(0.1):
            pids = processes()
            for c in psutil.net_connections("inet"):
                if c.status == psutil.CONN_LISTEN and c.pid in pids:
                    with suppress(psutil.NoSuchProcess):
                        found[c.laddr.ip, c.laddr.port] = c.pid, psutil.Process(c.pid).name()

    looker = threading.Thread(target=look)
    looker.start()
    try:
        run()
    finally:
        done.set()
        looker.join()
    return found


@pytest.mark.ray
def test_our_local_instance_takes_no_job_without_its_token_and_listens_on_loopback_only(tokenizer, tmp_path):
    """The report's repro, a POST to the dashboard's /api/jobs/ without credentials (Ray does not ask who is at the
    other end of a connection, so another user's request is this one), is refused, and no job exists; with the
    instance's token the same API answers. Every socket that listens once the instance is up (its servers', its
    agents', a worker's, this driver's) is on loopback, and so is every socket two training workers listen on (their
    process group met through a file in the instance's directory, not a TCPStore on every interface; gloo's on
    127.0.0.1). The token is the run's alone and goes with the instance."""
    import ray
    from ray._private.worker import get_dashboard_url

    from pipeline.ray_session import AUTH_VARIABLES, ray_init, ray_shutdown

    ray_shutdown()  # an instance another test left: the one under test is the one a run starts
    auth = {name: os.environ.get(name) for name in AUTH_VARIABLES}
    ours = os.getpid()
    before = _listening({ours})
    ray_init(None, 2)
    try:
        path = os.environ["RAY_AUTH_TOKEN_PATH"]
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
        with open(path) as f:
            token = f.read()
        assert ray.get(ray.remote(lambda: os.environ["RAY_AUTH_TOKEN_PATH"]).remote()) == path  # a worker's too

        dashboard = get_dashboard_url()
        jobs = f"http://{dashboard}/api/jobs/"
        ran = tmp_path / "ran"
        job = json.dumps({"entrypoint": f"id > {ran}"}).encode()
        assert _status(jobs, {"Content-Type": "application/json"}, job) == 401
        assert _status(jobs, {"Authorization": "Bearer not-the-token"}) == 403
        with urllib.request.urlopen(urllib.request.Request(jobs, headers={"Authorization": f"Bearer {token}"})) as r:
            assert [j["type"] for j in json.load(r)] == ["DRIVER"]  # this process; no submitted job
        assert not ran.exists()

        def processes() -> set[int]:
            return {ours} | {p.pid for p in psutil.Process(ours).children(recursive=True)}

        opened = {where: name for where, name in _listening(processes()).items() if where not in before}
        assert {"gcs_server", "raylet"} <= set(opened.values())
        assert int(dashboard.rsplit(":", 1)[1]) in {port for _, port in opened}
        for (ip, port), name in opened.items():
            assert _loopback(ip), (name, ip, port)

        inputs = train_inputs(tokenizer, pairs(tokenizer, n=26), tmp_path)
        cfg = TrainConfig(batch_size=4, max_length=64, torch_threads=1, num_workers=2)
        training = _listening_while(
            lambda: run_stage(train.STAGE, {"train": cfg.model_dump()}, inputs, str(tmp_path)), processes
        )
        for (ip, port), (_, name) in training.items():
            assert (ip, port) in before or _loopback(ip), (name, ip, port)
        # Ray's port and gloo's, of each worker: the look saw them train. A name is the kernel's 15 characters once
        # psutil cannot read more (an exiting process).
        workers = Counter(pid for pid, name in training.values() if name.startswith("ray::RayTrainWo"))
        assert sorted(workers.values()) == [2, 2]
        assert os.listdir(os.path.dirname(path)) == ["token"]  # the rendezvous file went with the workers
    finally:
        ray_shutdown()
    assert not os.path.exists(os.path.dirname(path))
    assert {name: os.environ.get(name) for name in AUTH_VARIABLES} == auth
