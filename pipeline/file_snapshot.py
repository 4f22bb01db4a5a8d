"""A local file's or directory's snapshot: each file's name, size and content digest. It changes when the
content does, so a fingerprint holding it rebuilds what an edited corpus, baseline or data file fed; and only
then, so a copy, a checkout or a re-sync of the same data (new modification times) reuses every dataset.

Digests are remembered by path, with the size, mtime and inode they were taken at, in one small JSON file
under the user's cache directory, as git's index and DVC's state do: a rerun over tens of GB hashes only what
changed since."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from pipeline.errors import InputError

CHUNK = 8 << 20
# A file modified this recently may change again within its mtime's resolution at the same size: its digest is
# not remembered (git's "racy" entries).
RACY_NS = 2_000_000_000
MEMO = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "contrastive-pipeline" / "digests.json"


def _read_memo() -> dict:
    try:
        return json.loads(MEMO.read_text())
    except (OSError, ValueError):
        return {}


def digests(files: list[str]) -> list[tuple[int, str]]:
    """Each file's size and SHA-256 (hex, 32 characters), from one stat."""
    memo, fresh = _read_memo(), {}
    out = []
    for f in files:
        st, key = os.stat(f), os.path.abspath(f)
        stat = [st.st_size, st.st_mtime_ns, st.st_ino]
        if memo.get(key, [None])[:3] != stat:
            h = hashlib.sha256()
            with open(f, "rb") as fh:
                while block := fh.read(CHUNK):
                    h.update(block)
            memo[key] = stat + [h.hexdigest()[:32]]
            if time.time_ns() - st.st_mtime_ns > RACY_NS:
                fresh[key] = memo[key]
        out.append((st.st_size, memo[key][3]))
    if fresh:
        try:  # a cache only: another process's write may win, and an unwritable home costs a rehash
            MEMO.parent.mkdir(parents=True, exist_ok=True)
            tmp = MEMO.with_name(f".{MEMO.name}.{os.getpid()}")
            tmp.write_text(json.dumps({**_read_memo(), **fresh}))
            os.replace(tmp, MEMO)
        except OSError:
            pass
    return out


def listing(files: list, root: str | os.PathLike | None = None) -> list:
    """[(name, size, digest)] of the files, named relative to root (else by their base names)."""
    names = [os.path.relpath(f, root) if root is not None and str(f) != str(root) else os.path.basename(f)
             for f in files]
    return [(n, size, d) for n, (size, d) in zip(names, digests([str(f) for f in files]))]


def listing_digest(files: list, root: str | os.PathLike | None = None) -> str:
    """listing()'s 16-character digest: the corpus sources' snapshot."""
    return hashlib.sha256(json.dumps(listing(files, root)).encode()).hexdigest()[:16]


def snapshot(path: str) -> list:
    if not os.path.exists(path):
        raise InputError(f"baseline path does not exist: {path}")
    files = [path] if os.path.isfile(path) else sorted(
        os.path.join(d, f) for d, _, names in os.walk(path) for f in names)
    return listing(files, path)
