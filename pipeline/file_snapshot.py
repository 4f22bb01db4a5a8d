"""A local file's or directory's snapshot (names, sizes, modification times): it changes when the files do,
so a fingerprint holding it makes an edited baseline or data file rebuild what was built from it."""

from __future__ import annotations

import os

from pipeline.errors import InputError


def snapshot(path: str) -> list:
    if not os.path.exists(path):
        raise InputError(f"baseline path does not exist: {path}")
    files = [path] if os.path.isfile(path) else sorted(
        os.path.join(d, f) for d, _, names in os.walk(path) for f in names)
    return [(os.path.relpath(f, path) if f != path else os.path.basename(f), os.path.getsize(f),
             os.stat(f).st_mtime_ns) for f in files]
