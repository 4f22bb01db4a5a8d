"""Resumable, verified, cached downloads for corpus sources (OpenWebText, Wikipedia dumps, HF hub files).

A download grows in `<final>.part` and is renamed to its final name only once it is
complete and verified, so a file under its final name is always whole. A `.part` left
by a cut connection or a killed run is continued with an HTTP range request.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import logging
import os
import re
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from pipeline.corpus.credentials import reveal, same_origin, split_credentials
from pipeline.errors import InputError
from pipeline.progress import Progress

log = logging.getLogger("cpipe")

CHUNK = 1 << 20
MAX_BACKOFF = 60.0
_CONTENT_RANGE = re.compile(r"bytes (?:(\d+)-\d+|\*)/(\d+)")
# The end of a failed download's message where a local copy can stand in for the URL.
LOCAL_COPIES = (
    "offline? download it elsewhere and pass local copies: make run CORPUS=PATH EVAL_DATA=DIR "
    "(cpipe run --corpus PATH --eval-data DIR)"
)


class _CredentialsStayHome(urllib.request.HTTPRedirectHandler):
    """urllib copies every header of a request to its redirect, the Authorization made of a URL's user info
    included: to another host that would hand it the password."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and not same_origin(req.full_url, new.full_url):
            new.remove_header("Authorization")
        return new


class DownloadError(InputError):
    """A download that failed or did not verify, phrased for the user."""


class _Retryable(Exception):
    """A failure the server or network may get over: worth another attempt from where the part ends."""


def cache_path(url: str, cache_dir: str | Path) -> Path:
    """The hash keeps URLs with the same file name apart; the name keeps the cache readable."""
    name = Path(urllib.parse.urlsplit(url).path).name or "download"
    return Path(cache_dir) / f"{hashlib.sha256(url.encode()).hexdigest()[:16]}-{name}"


def fetch(
    url: str,
    cache_dir: str | Path,
    *,
    sha256: str | None = None,
    size: int | None = None,
    retries: int = 5,
    backoff: float = 1.0,
    timeout: float = 60.0,
    progress: bool = True,
    hint: str = "",
) -> Path:
    """The local path of `url`'s content, downloading it into `cache_dir` unless already there. `hint` ends the
    message of a download that fails: what the user can do instead."""
    try:
        return _fetch(url, cache_dir, sha256, size, retries, backoff, timeout, progress)
    except DownloadError as e:
        if not hint:
            raise
        raise DownloadError(f"{e}; {hint}") from e.__cause__


def _fetch(
    url: str,
    cache_dir: str | Path,
    sha256: str | None,
    size: int | None,
    retries: int,
    backoff: float,
    timeout: float,
    progress: bool,
) -> Path:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme in ("", "file"):
        local = Path(urllib.request.url2pathname(parts.path)) if parts.scheme else Path(url)
        if not local.exists():
            raise DownloadError(f"{local}: no such file")
        return local
    if parts.scheme not in ("http", "https"):
        raise DownloadError(f"{url}: unsupported URL scheme {parts.scheme!r}")

    final = cache_path(url, cache_dir)
    if final.exists():
        problem = _mismatch(final, sha256, size)
        if problem is None:
            return final
        log.warning("%s: cached %s does not verify (%s); downloading again", url, final, problem)
        final.unlink()
    final.parent.mkdir(parents=True, exist_ok=True)
    part = final.with_name(final.name + ".part")
    for attempt in range(retries + 1):
        try:
            _download(url, part, timeout, progress)
            break
        except _Retryable as e:
            if attempt == retries:
                # The part stays: the next run resumes from it.
                raise DownloadError(f"{url}: gave up after {retries + 1} attempts: {e}") from e
            delay = min(backoff * 2**attempt, MAX_BACKOFF)
            log.warning(
                "%s: %s; retry %d/%d in %.1f s with %d bytes so far", url, e, attempt + 1, retries, delay, _length(part)
            )
            time.sleep(delay)
    problem = _mismatch(part, sha256, size)
    if problem is not None:
        part.unlink()
        raise DownloadError(f"{url}: download does not verify: {problem}")
    os.replace(part, final)
    return final


def _download(url: str, part: Path, timeout: float, progress: bool) -> None:
    """Continue `part` until it holds as many bytes as the server says the file has."""
    have = _length(part)
    address, user, password = split_credentials(reveal(url))
    headers = {"Range": f"bytes={have}-"} if have else {}
    if user is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    request = urllib.request.Request(address, headers=headers)
    try:
        # a fresh opener, as its ProxyHandler reads the proxy settings the environment has now
        response = urllib.request.build_opener(_CredentialsStayHome).open(request, timeout=timeout)
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:
            total = _parse_range(e.headers.get("Content-Range"))[1]
            if total is None or total == have:
                return
            part.unlink()
            raise _Retryable(f"partial file has {have} bytes but the server's has {total}; restarting") from e
        if e.code == 429 or e.code >= 500:
            raise _Retryable(f"HTTP {e.code} {e.reason}") from e
        raise DownloadError(f"{url}: HTTP {e.code} {e.reason}") from e
    except urllib.error.URLError as e:
        # No network, no such host, or nothing listening there: retrying will not help (a timeout may).
        if isinstance(e.reason, (socket.gaierror, ConnectionRefusedError)):
            raise DownloadError(f"{url}: cannot reach {urllib.parse.urlsplit(address).hostname} ({e.reason})") from e
        raise _Retryable(f"{type(e).__name__}: {e}") from e
    except (OSError, http.client.HTTPException) as e:
        raise _Retryable(f"{type(e).__name__}: {e}") from e

    with response:
        if response.status == 206:
            start, total = _parse_range(response.headers.get("Content-Range"))
            if start != have:
                part.unlink()
                raise _Retryable(f"server resumed at byte {start}, not {have}; restarting")
        else:
            # A 200 answer to a range request is the whole body: the server ignores ranges.
            have = 0
            length = response.headers.get("Content-Length")
            total = int(length) if length is not None else None
        try:
            with (
                open(part, "ab" if have else "wb") as f,
                Progress(part.stem, total, "B", initial=have, scaled=True, silent=not progress) as bar,
            ):
                while chunk := response.read(CHUNK):
                    f.write(chunk)
                    bar.update(len(chunk))
        except (OSError, http.client.HTTPException) as e:
            raise _Retryable(f"{type(e).__name__}: {e}") from e
    # http.client ends a body cut short by the server as if it were complete; a part longer
    # than the server's file gets a 416 on the next attempt, which restarts it.
    if total is not None and _length(part) != total:
        raise _Retryable(f"body ended with {_length(part)} of {total} bytes")


def _parse_range(header: str | None) -> tuple[int | None, int | None]:
    """(first byte, total size) from a Content-Range header; None for what it does not say."""
    match = _CONTENT_RANGE.fullmatch((header or "").strip())
    if match is None:
        return None, None
    return (int(match[1]) if match[1] else None), int(match[2])


def _length(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _mismatch(path: Path, sha256: str | None, size: int | None) -> str | None:
    """How `path` disagrees with the expected size or checksum; None when it verifies."""
    got = _length(path)
    if size is not None and got != size:
        return f"size {got} bytes, expected {size}"
    if sha256 is not None:
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(CHUNK):
                digest.update(chunk)
        if digest.hexdigest() != sha256.lower():
            return f"sha256 {digest.hexdigest()}, expected {sha256.lower()}"
    return None
