"""Permission bits of what we write: what the umask gives a new file, whichever library wrote it.

safetensors' save_file writes its file with mode 0600 whatever the umask, so every model.safetensors that
transformers' and sentence-transformers' save methods write would be its owner's alone, where a shared artifacts
directory is meant for the group or everyone the umask lets in.
"""

from __future__ import annotations

import os
import stat
from contextlib import suppress


def umask() -> int:
    """The process's umask. Linux says it in /proc; os.umask can only read it by setting another for a moment,
    when a file another thread creates would get that mode instead, so the fallback sets the narrowest."""
    with suppress(OSError), open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def follow_umask(root: str, withheld: int = 0) -> None:
    """Give `root` and everything under it the mode the umask gives a new file or directory (a file its owner may
    execute keeps its execute bits), less the `withheld` bits; setuid, setgid and sticky bits are kept (a shared
    directory's setgid makes what is created in it the group's). Links are left alone (chmod follows them)."""
    mask = umask() | withheld
    for directory, dirs, files in os.walk(root):
        for p in [directory, *(os.path.join(directory, name) for name in dirs + files)]:
            mode = os.lstat(p).st_mode
            if stat.S_ISLNK(mode):
                continue
            full = 0o777 if stat.S_ISDIR(mode) or mode & stat.S_IXUSR else 0o666
            wanted = stat.S_IMODE(mode) & 0o7000 | full & ~mask
            if stat.S_IMODE(mode) != wanted:
                os.chmod(p, wanted)
