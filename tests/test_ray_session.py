"""The local Ray instance a run starts is closed to the host's other users (issue 47): its dashboard's Jobs API,
which runs any command as the run's user, took a job from anyone who could reach 127.0.0.1, and its servers
listened on every interface."""

from __future__ import annotations

import ipaddress
import json
import os
import stat
import urllib.error
import urllib.request
from contextlib import suppress

import psutil
import pytest


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


@pytest.mark.ray
def test_our_local_instance_takes_no_job_without_its_token_and_listens_on_loopback_only(tmp_path):
    """The report's repro, a POST to the dashboard's /api/jobs/ without credentials (Ray does not ask who is at the
    other end of a connection, so another user's request is this one), is refused, and no job exists; with the
    instance's token the same API answers. Every socket that listens once the instance is up (its servers', its
    agents', a worker's, this driver's) is on loopback. The token is the run's alone and goes with the instance."""
    import ray
    from ray._private.worker import get_dashboard_url

    from pipeline.ray_session import AUTH_VARIABLES, ray_init, ray_shutdown

    ray_shutdown()  # an instance another test left: the one under test is the one a run starts
    auth = {name: os.environ.get(name) for name in AUTH_VARIABLES}
    ours = os.getpid()
    before = _listening({ours})
    ray_init(None, 1)
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

        processes = {ours} | {p.pid for p in psutil.Process(ours).children(recursive=True)}
        opened = {where: name for where, name in _listening(processes).items() if where not in before}
        assert {"gcs_server", "raylet"} <= set(opened.values())
        assert int(dashboard.rsplit(":", 1)[1]) in {port for _, port in opened}
        for (ip, port), name in opened.items():
            address = ipaddress.ip_address(ip)
            assert (getattr(address, "ipv4_mapped", None) or address).is_loopback, (name, ip, port)
    finally:
        ray_shutdown()
    assert not os.path.exists(os.path.dirname(path))
    assert {name: os.environ.get(name) for name in AUTH_VARIABLES} == auth
