"""Files replaced whole: a reader, or a rerun after a stop, sees the old file or the new one, never part of one.

On an object store every PUT is whole already. On local disk a file is written to a hidden sibling and renamed
into place when it is closed; a writer killed before that leaves the old file and a stray `.<name>.*.tmp`, a
write that fails (a full disk) leaves the old file alone.
"""

from __future__ import annotations

import io
import os
import shutil
import uuid

import fsspec
from pyarrow import PythonFile
from pyarrow.fs import FSSpecHandler, PyFileSystem

from storage.dataset import is_local, no_space, remove


class ReplacedOnClose(io.FileIO):
    """A binary file opened for writing at `path` on local disk that replaces `path` when it is closed, and
    leaves it untouched when the `with` block it is used in raises or a write fails. A full disk is one line
    naming the file."""

    def __init__(self, path: str):
        directory, name = os.path.split(os.path.abspath(path))
        self._tmp, self._path = os.path.join(directory, f".{name}.{uuid.uuid4().hex[:8]}.tmp"), path
        # Not mkstemp: its 0600 would outlive the rename; the umask decides, as for any new file.
        super().__init__(os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), "wb")

    def write(self, data) -> int:
        """All of `data`, or an error. A raw write may take part of it (a disk filling up takes what fits and
        fails the next write), and neither shutil.copyfileobj nor pyarrow writes the rest: the file would have
        replaced `path` cut short."""
        view, done = memoryview(data).cast("B"), 0
        try:
            while done < len(view):
                done += super().write(view[done:])
        except BaseException as e:
            self._discard()
            no_space(e, self._path)
            raise
        return done

    def close(self) -> None:
        if not self.closed:
            super().close()
            os.replace(self._tmp, self._path)

    def _discard(self) -> None:
        """Closed without replacing `path`, the part written removed at once: pyarrow closes a file whose write
        failed (a `with` block of its own would replace `path` with it) or, copying files, leaves it open, holding
        the full disk's space."""
        if not self.closed:
            super().close()
            os.unlink(self._tmp)

    def __exit__(self, kind, value, traceback) -> None:
        if kind is None:
            self.close()
        else:
            self._discard()


def put_file(local: str, path: str) -> None:
    """Replace the file at `path` (any fsspec URL) with a local file."""
    fs, p = fsspec.core.url_to_fs(path)
    fs.makedirs(p.rsplit("/", 1)[0], exist_ok=True)
    if not is_local(path):
        fs.put_file(local, p)
        return
    with open(local, "rb") as source, ReplacedOnClose(p) as target:
        shutil.copyfileobj(source, target)


def arrow_filesystem(path: str) -> PyFileSystem:
    """The pyarrow filesystem Ray Train keeps its run state at `path` through (any fsspec filesystem, through
    pyarrow's handler). Ray rewrites the run's checkpoint snapshot in place at every checkpoint: a stop that
    killed it mid-write on local disk left an empty snapshot, which the rerun could not read. Here each file
    it writes on local disk replaces the old one whole."""
    fs = fsspec.core.url_to_fs(path)[0]
    return PyFileSystem(_WholeFiles(fs) if is_local(path) else _Literal(fs))


class _WholeFiles(FSSpecHandler):
    def open_output_stream(self, path, metadata):
        return PythonFile(ReplacedOnClose(path), mode="w")


class _Literal(FSSpecHandler):
    """What Ray Train deletes (its older checkpoints) is deleted by its path: fsspec's rm, which pyarrow's handler
    calls, reads [ ] * ? in a path as a glob pattern, and a checkpoint of runs[1]/ was runs1/'s."""

    def delete_dir(self, path):
        if not self.fs.isdir(path):
            raise FileNotFoundError(path)
        remove(self.fs.unstrip_protocol(path))

    def delete_file(self, path):
        if not self.fs.exists(path):
            raise FileNotFoundError(path)
        self.fs.rm_file(path)
