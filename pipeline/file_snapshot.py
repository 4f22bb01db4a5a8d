"""A local file's or directory's snapshot: each file's name, size and content digest. It changes when the
content does, so a fingerprint holding it rebuilds what an edited corpus, baseline or data file fed; and only
then, so a copy, a checkout or a re-sync of the same data (new modification times) reuses every dataset.

Digests are remembered by path, with the size, mtime and inode they were taken at, in one small JSON file
under the user's cache directory, as git's index and DVC's state do: a rerun over tens of GB hashes only what
changed since."""

from __future__ import annotations

import errno
import fnmatch
import hashlib
import json
import os
import time
from collections.abc import Iterator
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
    names = [
        os.path.relpath(f, root) if root is not None and str(f) != str(root) else os.path.basename(f) for f in files
    ]
    return [(n, size, d) for n, (size, d) in zip(names, digests([str(f) for f in files]))]


def listing_digest(files: list, root: str | os.PathLike | None = None) -> str:
    """listing()'s 16-character digest: the corpus sources' snapshot."""
    return hashlib.sha256(json.dumps(listing(files, root)).encode()).hexdigest()[:16]


def loop_error(path: str | os.PathLike) -> InputError | None:
    """An InputError naming the links of `path` that lead back to themselves (a -> b -> a), when they do: os.stat
    fails with ELOOP, and os.path.exists reads that as "no such file", which points the user at the wrong fault."""
    try:
        os.stat(path)
        return None
    except OSError as e:
        if e.errno != errno.ELOOP:
            return None
    chain, seen, at = [str(path)], {os.path.abspath(path)}, str(path)
    while os.path.islink(at):  # the last component's own links; a loop through a parent is named by its start
        at = os.path.join(os.path.dirname(at), os.readlink(at))
        chain.append(at)
        if os.path.abspath(at) in seen:
            break
        seen.add(os.path.abspath(at))
    return InputError(f"{path} is a symlink loop: {' -> '.join(chain)}")


def rglob(root: str | os.PathLike, pattern: str = "*") -> Iterator[Path]:
    """Path.rglob(pattern) that follows symlinked directories: each file or directory under root (not root itself)
    whose name matches, a directory's names in sorted order before its subdirectories'. Python 3.11's rglob does not
    follow them, so an evaluation or corpus directory assembled from links (`ln -s ~/data/SentEval/STSBenchmark .`)
    would silently lose their files. A directory reached again (a link loop, or two links to one place) is walked
    once, by the path first in that order. A matching name whose link points nowhere (an unmounted disk, a moved
    dataset) is an InputError naming both: skipped, its documents would be lost without a word; read, it would
    fail deep in a reader, or read as a task that is absent."""
    seen = set()
    for directory, dirs, files in os.walk(root, followlinks=True):
        real = os.path.realpath(directory)
        if real in seen:
            dirs.clear()
            continue
        seen.add(real)
        dirs.sort()
        for name in sorted(dirs + files):
            if fnmatch.fnmatchcase(name, pattern):
                path = Path(directory, name)
                if path.is_symlink() and not path.exists():
                    raise loop_error(path) or InputError(
                        f"{path} is a broken symlink: {os.readlink(path)} does not exist"
                    )
                yield path


def snapshot(path: str) -> list:
    if not os.path.exists(path):
        raise loop_error(path) or InputError(f"baseline path does not exist: {path}")
    files = [path] if os.path.isfile(path) else sorted(str(p) for p in rglob(path) if not p.is_dir())
    return listing(files, path)
