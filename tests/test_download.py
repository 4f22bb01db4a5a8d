"""pipeline.corpus.download against a real HTTP server on 127.0.0.1 whose misbehaviour each test switches on."""

from __future__ import annotations

import hashlib
import logging
import random
import threading
from http.server import BaseHTTPRequestHandler

import pytest

from pipeline.corpus.download import DownloadError, cache_path, fetch
from tests.conftest import free_port, http_server

# Not a multiple of the 1 MiB read size, so the last chunk is a short one.
DATA = random.Random(0).randbytes(3 * 2**20 + 12345)
HALF = len(DATA) // 2


class Handler(BaseHTTPRequestHandler):
    """Serves DATA at any path but /missing, honouring `Range: bytes=N-` unless switched off or shifted."""

    def do_GET(self) -> None:
        srv = self.server
        srv.ranges_seen.append(self.headers.get("Range"))
        if self.path == "/missing":
            return self.send_error(404)
        if srv.statuses:
            return self.send_error(srv.statuses.pop(0))
        if srv.stalls:  # until the test ends: whatever the client's timeout, it passes first
            srv.stalls -= 1
            srv.release.wait(60)
        start = int(self.headers["Range"][len("bytes=") : -1]) if self.headers["Range"] and srv.ranges else 0
        start += srv.shift if start else 0
        if start >= len(DATA):
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{len(DATA)}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(206 if start else 200)
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(DATA) - 1}/{len(DATA)}")
        self.send_header("Content-Length", str(len(DATA) - start))
        self.end_headers()
        # A cut connection: half the body, then the handler returns and the HTTP/1.0 server closes the socket.
        end = HALF if srv.cut_first and len(srv.ranges_seen) == 1 else len(DATA)
        # Counted before writing: the client may have every byte, and the test may be checking,
        # before this thread runs another line.
        srv.served += end - start
        self.wfile.write(DATA[start:end])

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server():
    with http_server(Handler) as srv:
        srv.ranges_seen, srv.statuses, srv.served = [], [], 0
        srv.ranges, srv.cut_first, srv.shift, srv.stalls = True, False, 0, 0
        srv.release = threading.Event()
        srv.url = f"http://127.0.0.1:{srv.server_port}/data/file.bin"
        yield srv
        srv.release.set()


def quick_fetch(url, cache_dir, **kwargs):
    return fetch(url, cache_dir, **{"backoff": 0.01, "timeout": 5.0, "progress": False, **kwargs})


def test_cache_path_is_stable_and_keyed_by_url(tmp_path):
    a = cache_path("https://host/a/file.parquet", tmp_path)
    assert a == cache_path("https://host/a/file.parquet", str(tmp_path))
    assert a.parent == tmp_path and a.name.endswith("-file.parquet")
    assert a != cache_path("https://host/b/file.parquet", tmp_path)


def test_download_then_cached_without_request(server, tmp_path):
    path = fetch(server.url, tmp_path, sha256=hashlib.sha256(DATA).hexdigest(), size=len(DATA), backoff=0.01)
    assert path == cache_path(server.url, tmp_path) and path.read_bytes() == DATA
    assert not path.with_name(path.name + ".part").exists()
    assert server.ranges_seen == [None]
    assert quick_fetch(server.url, tmp_path, sha256=hashlib.sha256(DATA).hexdigest()) == path
    assert len(server.ranges_seen) == 1


def test_cut_connection_resumes_with_range(server, tmp_path, caplog):
    server.cut_first = True
    with caplog.at_level(logging.WARNING, logger="cpipe"):
        path = quick_fetch(server.url, tmp_path)
    assert path.read_bytes() == DATA
    assert server.ranges_seen == [None, f"bytes={HALF}-"]
    assert server.served == len(DATA)
    assert server.url in caplog.text and f"{HALF} bytes so far" in caplog.text


def test_leftover_part_is_resumed(server, tmp_path):
    part = cache_path(server.url, tmp_path).with_name(cache_path(server.url, tmp_path).name + ".part")
    part.write_bytes(DATA[:1000])
    assert quick_fetch(server.url, tmp_path).read_bytes() == DATA
    assert server.ranges_seen == ["bytes=1000-"]
    assert server.served == len(DATA) - 1000


def test_complete_part_answered_416_is_finished(server, tmp_path):
    final = cache_path(server.url, tmp_path)
    final.with_name(final.name + ".part").write_bytes(DATA)
    assert quick_fetch(server.url, tmp_path, size=len(DATA)).read_bytes() == DATA
    assert server.ranges_seen == [f"bytes={len(DATA)}-"] and server.served == 0


def test_range_answered_at_another_offset_is_restarted(server, tmp_path):
    server.shift = 1
    final = cache_path(server.url, tmp_path)
    final.with_name(final.name + ".part").write_bytes(DATA[:1000])
    assert quick_fetch(server.url, tmp_path).read_bytes() == DATA
    assert server.ranges_seen == ["bytes=1000-", None]


def test_part_longer_than_file_is_restarted(server, tmp_path):
    final = cache_path(server.url, tmp_path)
    final.with_name(final.name + ".part").write_bytes(DATA + b"stale tail")
    assert quick_fetch(server.url, tmp_path).read_bytes() == DATA
    assert server.ranges_seen == [f"bytes={len(DATA) + 10}-", None]


def test_checksum_mismatch_leaves_no_file(server, tmp_path):
    with pytest.raises(DownloadError, match="sha256") as err:
        quick_fetch(server.url, tmp_path, sha256="0" * 64)
    assert server.url in str(err.value)
    assert list(tmp_path.iterdir()) == []
    assert quick_fetch(server.url, tmp_path, sha256=hashlib.sha256(DATA).hexdigest()).read_bytes() == DATA


def test_cached_file_that_does_not_verify_is_downloaded_again(server, tmp_path):
    cache_path(server.url, tmp_path).write_bytes(b"corrupt")
    assert quick_fetch(server.url, tmp_path, size=len(DATA)).read_bytes() == DATA
    assert server.ranges_seen == [None]


def test_server_without_ranges_restarts_from_zero(server, tmp_path):
    server.ranges = False
    final = cache_path(server.url, tmp_path)
    final.with_name(final.name + ".part").write_bytes(b"x" * 1000)
    assert quick_fetch(server.url, tmp_path).read_bytes() == DATA
    assert server.ranges_seen == ["bytes=1000-"]


def test_not_found_fails_at_once(server, tmp_path):
    url = server.url.replace("/data/file.bin", "/missing")
    with pytest.raises(DownloadError, match="404") as err:
        quick_fetch(url, tmp_path)
    assert url in str(err.value)
    assert len(server.ranges_seen) == 1


def test_unavailable_is_retried(server, tmp_path, caplog):
    server.statuses = [503, 429]
    with caplog.at_level(logging.WARNING, logger="cpipe"):
        assert quick_fetch(server.url, tmp_path).read_bytes() == DATA
    assert len(server.ranges_seen) == 3
    assert "retry 1/5" in caplog.text and "retry 2/5" in caplog.text


def test_a_refused_connection_fails_at_once(tmp_path, caplog):
    """Nothing listens on the port: not transient, so no retries (five took about 31 s), one line naming host."""
    url = f"http://127.0.0.1:{free_port()}/corpus.parquet"
    with caplog.at_level(logging.WARNING, logger="cpipe"), pytest.raises(DownloadError) as err:
        fetch(url, tmp_path, progress=False)
    assert str(err.value).startswith(f"{url}: cannot reach 127.0.0.1 (") and "refused" in str(err.value)
    assert "retry" not in caplog.text


def test_a_timeout_is_retried(server, tmp_path, caplog):
    server.stalls = 1
    with caplog.at_level(logging.WARNING, logger="cpipe"):
        assert quick_fetch(server.url, tmp_path, timeout=2.0).read_bytes() == DATA
    assert "retry 1/5" in caplog.text and len(server.ranges_seen) == 2


def test_gives_up_after_retries_keeping_nothing_final(server, tmp_path):
    server.statuses = [503] * 3
    with pytest.raises(DownloadError, match="3 attempts"):
        quick_fetch(server.url, tmp_path, retries=2)
    assert len(server.ranges_seen) == 3
    assert not cache_path(server.url, tmp_path).exists()


def test_local_paths_are_returned_as_is(tmp_path):
    local = tmp_path / "corpus.parquet"
    local.write_bytes(b"data")
    cache = tmp_path / "cache"
    assert fetch(str(local), cache) == local
    assert fetch(local.as_uri(), cache) == local
    assert not cache.exists()
    with pytest.raises(DownloadError, match="nope.parquet"):
        fetch(str(tmp_path / "nope.parquet"), cache)
    with pytest.raises(DownloadError, match="nope.parquet"):
        fetch((tmp_path / "nope.parquet").as_uri(), cache)
