"""Leases: one writer per dataset at a time, across processes, machines and runs sharing an artifacts store.

A lease is a small JSON file beside the dataset, `<stage>/.lease-<fingerprint>`, naming its holder (host,
pid, a random token) and when the holder last renewed it. The holder renews it every `RENEW` seconds from a
background thread, so a lease is stale when its holder is a dead process on this host, or when it was not
renewed for `STALE` seconds (a holder on another machine, or a store where the pid means nothing).

On a local filesystem a lease is taken with O_CREAT | O_EXCL, which is atomic. Object stores have no
exclusive create: the lease is written, then read back after a pause, and it is ours only if our token is
still there. Two writers racing within that pause could both think they won; they would then build the same
dataset twice, which the dataset writer tolerates (the second finished copy is discarded).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

import fsspec

from storage.dataset import dataset_parts

LEASE_PREFIX = ".lease-"
RENEW = 20.0
STALE = 120.0
log = logging.getLogger("cpipe")


def lease_path(dataset: str) -> str:
    artifacts, stage, fp = dataset_parts(dataset)
    return f"{artifacts}/{stage}/{LEASE_PREFIX}{fp}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def stale(holder: dict, now: float | None = None) -> bool:
    """Whether a lease's holder is gone: a dead process on this host, or silent for STALE seconds."""
    if holder.get("host") == socket.gethostname() and not _alive(int(holder.get("pid", -1))):
        return True
    return (now or time.time()) - float(holder.get("renewed", 0)) > STALE


class Lease:
    """The right to build one dataset; `acquire` waits while another live writer holds it."""

    def __init__(self, dataset: str):
        self.path = lease_path(dataset)
        self.fs, self._p = fsspec.core.url_to_fs(self.path)
        self._local = isinstance(self.fs, fsspec.implementations.local.LocalFileSystem)
        self.token = uuid.uuid4().hex
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def _record(self) -> bytes:
        return json.dumps(
            {"host": socket.gethostname(), "pid": os.getpid(), "token": self.token, "renewed": time.time()}
        ).encode()

    def holder(self) -> dict | None:
        try:
            with self.fs.open(self._p, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            # Empty or half-written: its writer is between create and write (held), or died there (stale once
            # the file is older than STALE). Reading it as `{}` would judge a live writer stale and break it.
            return {"renewed": self._modified()}

    def _modified(self) -> float:
        try:
            return self.fs.modified(self._p).timestamp()
        except (FileNotFoundError, NotImplementedError):
            return time.time()

    def _try_take(self) -> bool:
        if self._local:
            os.makedirs(os.path.dirname(self._p), exist_ok=True)
            try:
                fd = os.open(self._p, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return False
            with os.fdopen(fd, "wb") as f:
                f.write(self._record())
            return True
        if self.holder() is not None:
            return False
        with self.fs.open(self._p, "wb") as f:
            f.write(self._record())
        time.sleep(1.0)  # let a racing writer's PUT land, then see whose token survived
        return (self.holder() or {}).get("token") == self.token

    def acquire(self, poll: float = 2.0, waiting: Callable[[dict], None] | None = None) -> None:
        """Take the lease, waiting for a live holder to finish; a stale lease is broken and taken."""
        told = False
        while not self._try_take():
            holder = self.holder()
            if holder is None:
                continue
            if stale(holder):
                log.warning(
                    "breaking the stale lease %s of %s pid %s", self.path, holder.get("host"), holder.get("pid")
                )
                self._remove_if(holder)
                continue
            if not told and waiting is not None:
                waiting(holder)
                told = True
            time.sleep(poll)
        self._renewer = threading.Thread(target=self._renew, name=f"lease-{self.token[:8]}", daemon=True)
        self._renewer.start()

    def _remove_if(self, holder: dict) -> None:
        """Remove the lease only if it is still the one judged stale (another writer may have broken it)."""
        current = self.holder()
        if (
            current is not None
            and current.get("token") == holder.get("token")
            and current.get("renewed") == holder.get("renewed")
        ):
            with suppress(FileNotFoundError):
                self.fs.rm_file(self._p)

    def _renew(self) -> None:
        while not self._stop.wait(RENEW):
            if (self.holder() or {}).get("token") != self.token:
                return  # broken by another writer that judged us stale; nothing of ours to renew
            with self.fs.open(self._p, "wb") as f:
                f.write(self._record())

    def release(self) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        if (self.holder() or {}).get("token") == self.token:
            self.fs.rm_file(self._p)


@contextmanager
def leased(dataset: str, waiting: Callable[[dict], None] | None = None) -> Iterator[Lease]:
    lease = Lease(dataset)
    lease.acquire(waiting=waiting)
    try:
        yield lease
    finally:
        lease.release()
