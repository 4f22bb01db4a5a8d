"""The dataset-directory contract (DESIGN.md, "Stages and their artifacts").

A dataset is `<artifacts>/<stage>/<fingerprint>/` holding `part-*.parquet`
(or any files a stage writes, such as a model directory), `_manifest.json`
and `_SUCCESS`. Writers work in a hidden temporary sibling directory, write the
manifest and then `_SUCCESS`, and rename the directory into place, so readers
that check `_SUCCESS` never see a half-written dataset. The manifest records each
Parquet shard's rows, bytes and CRC-32, and every reader checks them (`verify`), so
a shard deleted or damaged after the fact stops the reader with one line rather
than changing what it reads.

A local dataset is no more readable by group or others than what it was built from (`DatasetWriter.built_from`:
its input datasets, a corpus's source files): text from a file only its owner can read stays readable only by
its owner, stage after stage. Otherwise the umask decides, as for any new file, whichever library wrote it
(storage.modes); nothing is made wider.
"""

from __future__ import annotations

import errno
import glob
import hashlib
import json
import os
import shutil
import stat
import sys
import tempfile
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from importlib import metadata
from typing import Annotated, Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, NonNegativeInt, StringConstraints, ValidationError

from storage.modes import follow_umask

SUCCESS = "_SUCCESS"
MANIFEST = "_manifest.json"
TMP_PREFIX = ".tmp-"
WORK_DIR = "_work"  # under the artifacts root, beside the stages
PART_PREFIX = "part-"
CHUNK = 8 * 2**20  # bytes read at a time to checksum a shard


class DatasetError(Exception):
    """A dataset is missing, incomplete or malformed; the message names the path."""


class DamagedDataset(DatasetError):
    """A finished dataset whose shards are not the ones its manifest records."""

    def __init__(self, path: str, what: str):
        super().__init__(f"dataset damaged: {path}: {what}")
        self.path, self.what = path, what

    def __reduce__(self):  # raised in a Ray worker, it is pickled to the driver
        return type(self), (self.path, self.what)


def fingerprint(stage: str, version: str, config: Any, inputs: dict[str, str]) -> str:
    """Hash of the stage, its version, its normalised config and its inputs' fingerprints."""
    payload = json.dumps(
        {"stage": stage, "version": version, "config": config, "inputs": dict(sorted(inputs.items()))},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def dataset_path(artifacts: str, stage: str, fp: str) -> str:
    """The artifacts layout: `<artifacts>/<stage>/<fingerprint>`."""
    return f"{artifacts.rstrip('/')}/{stage}/{fp}"


def dataset_parts(path: str) -> tuple[str, str, str]:
    """(artifacts, stage, fingerprint) of a dataset path: dataset_path's inverse."""
    artifacts, stage, fp = path.rstrip("/").rsplit("/", 2)
    return artifacts, stage, fp


def _fs(path: str) -> tuple[fsspec.AbstractFileSystem, str]:
    return fsspec.core.url_to_fs(path)


def _on_disk(fs: fsspec.AbstractFileSystem) -> bool:
    return isinstance(fs, fsspec.implementations.local.LocalFileSystem)


def _url(fs: fsspec.AbstractFileSystem, p: str) -> str:
    """A path on `fs` as the rest of this module takes it: a local path as it is, else a URL naming `fs`."""
    return p if _on_disk(fs) else fs.unstrip_protocol(p)


def is_local(path: str) -> bool:
    return _on_disk(_fs(path)[0])


@contextmanager
def local_copy(path: str) -> Iterator[str]:
    """`path` as a local file or directory, for libraries that read only local files (tokenizers, models,
    fastText): the path itself when it is local, else a temporary copy, removed on exit."""
    if is_local(path):
        yield path
        return
    fs, p = _fs(path)
    p = p.rstrip("/")
    with tempfile.TemporaryDirectory(prefix="cpipe-") as d:
        local = f"{d}/{p.rsplit('/', 1)[-1]}"  # the same last part: a dataset's is its fingerprint
        if fs.isdir(p):
            files = fs.find(p)
            fs.get(files, _moved(files, p, local))
        elif fs.isfile(p):
            fs.get_file(p, local)
        else:
            raise DatasetError(f"{path} does not exist")
        yield local


def remove(path: str) -> None:
    """Delete a file or directory tree, if it exists, on any filesystem."""
    fs, p = _fs(path)
    if _on_disk(fs):
        # fsspec's local rm asks for the working directory, which a Ray job's driver can outlive.
        shutil.rmtree(p, ignore_errors=True)
    elif fs.exists(p):  # an object store holds no empty directory
        fs.rm(glob.escape(p), recursive=True)  # fsspec's rm reads [ ] * ? in a path as a pattern


def _moved(files: list[str], root: str, to: str) -> list[str]:
    """Where each of `files` (under `root`) goes under `to`. fsspec's get, put and copy take two such lists as they
    are; a path given alone they read as a glob pattern, and `runs[1]/` copied `runs1/`."""
    return [f"{to}/{f[len(root) + 1 :]}" for f in files]


def check_writable(artifacts: str, what: str = "artifacts") -> None:
    """Write and delete a probe, so a location that cannot hold the run's datasets (a path under a regular
    file, a read-only mount, an unreachable bucket) fails before any work starts. Nothing is left behind: on
    a local disk the probe goes into the nearest existing directory of the path, which is not created yet."""
    fs, p = _fs(artifacts)
    try:
        if _on_disk(fs):
            existing = p
            while not os.path.exists(existing):
                existing = os.path.dirname(existing)
            if not os.path.isdir(existing):
                raise NotADirectoryError(f"{existing} is a file")
            with tempfile.NamedTemporaryFile(dir=existing, prefix=".cpipe-probe-"):
                pass
        else:
            probe = f"{p.rstrip('/')}/.probe-{uuid.uuid4().hex[:8]}"
            with fs.open(probe, "wb") as f:
                f.write(b"")
            fs.rm_file(probe)
    except Exception as e:  # whatever the filesystem raises, the user needs one line naming the place
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DatasetError(f"{what} {artifacts}: cannot write there ({type(e).__name__}: {reason})") from None


def remove_temporaries(artifacts: str, stage: str, fp: str) -> int:
    """Remove the temporary directories of a dataset's earlier writers; call it only while holding the
    dataset's lease, when every such writer is dead. Returns how many were removed."""
    found = temporaries(artifacts, stage, fp)
    for p in found:
        remove(p)
    return len(found)


def temporaries(artifacts: str, stage: str, fp: str) -> list[str]:
    """The temporary directories (as URLs) that writers of a dataset left or are writing."""
    fs, parent = _fs(f"{artifacts.rstrip('/')}/{stage}")
    return [_url(fs, p) for p in _listed(fs, parent) if p.rsplit("/", 1)[-1].startswith(f"{TMP_PREFIX}{fp}-")]


def _listed(fs: fsspec.AbstractFileSystem, p: str) -> list[str]:
    """The paths in the directory `p`, none where there is no such directory. Listed, never globbed: the user's
    path may hold [ ] * ?, which a glob pattern reads as wildcards."""
    try:
        return sorted(fs.ls(p, detail=False))
    except (FileNotFoundError, NotADirectoryError):
        return []


def complete(path: str) -> bool:
    fs, p = _fs(path)
    return fs.exists(f"{p}/{SUCCESS}")


def _require_complete(path: str) -> None:
    if not complete(path):
        raise DatasetError(f"{path} is not a finished dataset (no {SUCCESS}); rerun the stage that writes it")


def read_manifest(path: str) -> dict:
    _require_complete(path)
    return _load_manifest(path)


class _Shaped(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")


_Name = Annotated[str, StringConstraints(pattern=r"^[^/]+$")]  # a file in the dataset's own directory


class _Part(_Shaped):
    file: _Name
    rows: NonNegativeInt
    bytes: NonNegativeInt
    crc32: NonNegativeInt


class _Column(_Shaped):
    name: str
    type: str


def _inside(name: str) -> str:
    if not name or name.startswith("/") or ".." in name.split("/"):
        raise ValueError("a path inside the dataset")
    return name


class _File(_Shaped):
    file: Annotated[str, AfterValidator(_inside)]
    bytes: NonNegativeInt
    crc32: NonNegativeInt


class _Dropped(_Shaped):
    file: _Name
    rows: NonNegativeInt


class Manifest(_Shaped):
    """The shape of a manifest, as DatasetWriter writes it, in what every reader of one relies on: a manifest of
    another shape is a damaged dataset, not a reader's traceback. One written before shards were recorded has no
    "parts"; the keys a stage adds (`DatasetWriter.extra`) are its own."""

    stage: str
    fingerprint: str
    config: dict[str, Any]
    inputs: dict[str, str]
    columns: list[_Column] | None = Field(alias="schema")
    rows: NonNegativeInt | None
    shards: NonNegativeInt
    parts: list[_Part] | None = None
    files: list[_File] | None = None
    created: float
    dropped: _Dropped | None = None


def _load_manifest(path: str) -> dict:
    fs, p = _fs(path)
    try:
        with fs.open(f"{p}/{MANIFEST}", "r") as f:
            manifest = json.load(f)
    except FileNotFoundError:
        raise DamagedDataset(path, f"{MANIFEST} is missing") from None
    except ValueError:  # invalid JSON or UTF-8: a damaged file, not a bug
        raise DamagedDataset(path, f"{MANIFEST} is not valid JSON") from None
    try:
        Manifest.model_validate(manifest)
    except ValidationError as e:
        raise DamagedDataset(path, _wrong_shape(e)) from None
    return manifest


def _wrong_shape(e: ValidationError) -> str:
    """The first thing wrong with a manifest's shape, in one line: where, what it should be, what it is."""
    error = e.errors(include_url=False)[0]
    where = ".".join(map(str, error["loc"])) or "the whole file"
    if error["type"] == "missing":
        return f"{MANIFEST}: {where} is missing"
    should = "a JSON object" if error["type"] == "model_type" else error["msg"].removeprefix("Input should be ")
    return f"{MANIFEST}: {where} should be {should} (it is {json.dumps(error['input'], default=str)[:40]})"


def _part_files(fs: fsspec.AbstractFileSystem, p: str) -> dict[str, dict]:
    """file name -> fsspec info of each shard in a dataset directory."""
    infos = (info for info in fs.ls(p, detail=True) if info["type"] == "file")
    return {
        info["name"].rsplit("/", 1)[-1]: info
        for info in infos
        if info["name"].rsplit("/", 1)[-1].startswith(PART_PREFIX)
    }


def shards(path: str) -> list[str]:
    """The shard files of a finished dataset, checked against its manifest (`verify`)."""
    verify(path)
    fs, p = _fs(path)
    return sorted(info["name"] for info in _part_files(fs, p).values())


# (file URL, size, modification stamp) -> CRC-32, or -> rows: each shard is read once per process to check it.
_crc32s: dict[tuple, int] = {}
_rows: dict[tuple, int] = {}


def _identity(fs: fsspec.AbstractFileSystem, info: dict) -> tuple:
    stamp = next((info[k] for k in ("mtime", "LastModified", "ETag", "created") if info.get(k) is not None), None)
    return fs.unstrip_protocol(info["name"]), info["size"], str(stamp)


def _crc32(fs: fsspec.AbstractFileSystem, info: dict) -> int:
    key = _identity(fs, info)
    if key not in _crc32s:
        crc = 0
        with fs.open(info["name"], "rb") as f:
            while chunk := f.read(CHUNK):
                crc = zlib.crc32(chunk, crc)
        _crc32s[key] = crc
    return _crc32s[key]


def _parquet_rows(fs: fsspec.AbstractFileSystem, info: dict, path: str) -> int:
    key = _identity(fs, info)
    if key not in _rows:
        try:
            with fs.open(info["name"], "rb") as f:
                _rows[key] = pq.ParquetFile(f).metadata.num_rows
        except (pa.ArrowException, OSError) as e:
            reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise DamagedDataset(
                path, f"{info['name'].rsplit('/', 1)[-1]} is not a readable Parquet file ({reason})"
            ) from None
    return _rows[key]


def verify(path: str) -> None:
    """Check a finished dataset's shards against its manifest, or raise DamagedDataset naming the file: every
    shard it records is there and no other, each of its recorded size and CRC-32, and the rows add up to the
    manifest's. A manifest written before shards were recorded ("parts") is checked by shard count and rows
    (read from each shard's footer). Each file is read once per process while its size and time stay."""
    manifest = read_manifest(path)
    fs, p = _fs(path)
    found = _part_files(fs, p)
    parts = manifest.get("parts")
    if parts is None:
        parts = [{"file": f"{PART_PREFIX}{i:05d}.parquet"} for i in range(manifest.get("shards") or 0)]
    recorded = [part["file"] for part in parts]
    if missing := [f for f in recorded if f not in found]:
        raise DamagedDataset(
            path,
            f"{missing[0]} is missing ({len(recorded) - len(missing)} of the manifest's "
            f"{len(recorded)} shards are there)",
        )
    if unknown := sorted(set(found) - set(recorded)):
        raise DamagedDataset(path, f"{unknown[0]} is not a shard its manifest records")
    rows = 0
    for part in parts:
        info = found[part["file"]]
        if "bytes" not in part:
            rows += _parquet_rows(fs, info, path)
            continue
        if info["size"] != part["bytes"]:
            raise DamagedDataset(
                path, f"{part['file']} holds {info['size']} bytes, its manifest records {part['bytes']}"
            )
        if _crc32(fs, info) != part["crc32"]:
            raise DamagedDataset(path, f"{part['file']} does not match its manifest's checksum")
        rows += part["rows"]
    if manifest.get("rows") is not None and rows != manifest["rows"]:
        raise DamagedDataset(path, f"its shards hold {rows} rows, its manifest records {manifest['rows']}")
    for side in manifest.get("files") or []:  # none recorded before side files were (a manifest's "files")
        try:
            info = fs.info(f"{p}/{side['file']}")
        except FileNotFoundError:
            raise DamagedDataset(path, f"{side['file']} is missing") from None
        if info["size"] != side["bytes"]:
            raise DamagedDataset(
                path, f"{side['file']} holds {info['size']} bytes, its manifest records {side['bytes']}"
            )
        if _crc32(fs, info) != side["crc32"]:
            raise DamagedDataset(path, f"{side['file']} does not match its manifest's checksum")


def intact(path: str) -> bool:
    """Whether `path` is a finished dataset that passes `verify`: one a run may reuse."""
    if not complete(path):
        return False
    try:
        verify(path)
    except DamagedDataset:
        return False
    return True


def discard(path: str) -> None:
    """Remove a finished dataset, its `_SUCCESS` first, so that no reader takes what is left for finished."""
    fs, p = _fs(path)
    fs.rm_file(f"{p}/{SUCCESS}")
    remove(path)


def read_table(path: str, columns: list[str] | None = None) -> pa.Table:
    """All shards of a finished dataset as one table (every dataset has at least one shard)."""
    fs, _ = _fs(path)
    tables = []
    for part in shards(path):
        with fs.open(part, "rb") as f:
            tables.append(pq.read_table(f, columns=columns))
    if not tables:
        raise DatasetError(f"{path} holds no part-*.parquet files")
    return pa.concat_tables(tables)


def iter_batches(path: str, columns: list[str] | None = None, batch_size: int = 1024) -> Iterator[pa.RecordBatch]:
    """Stream a finished dataset shard by shard, so memory stays flat."""
    fs, _ = _fs(path)
    for part in shards(path):
        with fs.open(part, "rb") as f:
            yield from pq.ParquetFile(f).iter_batches(batch_size=batch_size, columns=columns)


def finished_datasets(artifacts: str) -> list[tuple[str, str]]:
    """(stage, fingerprint) of each finished dataset under an artifacts directory: its `<stage>/<fp>/_SUCCESS`
    files, found by listing (fs.find), not by a glob pattern, which would read [ ] * ? in `artifacts` as wildcards."""
    fs, root = _fs(artifacts)
    root = root.rstrip("/")
    found = []
    for file in fs.find(root, maxdepth=3):
        parts = file[len(root) + 1 :].split("/")
        if len(parts) == 3 and parts[2] == SUCCESS and not parts[1].startswith(TMP_PREFIX):
            found.append((parts[0], parts[1]))
    return sorted(found)


def list_datasets(artifacts: str) -> list[dict]:
    """Every finished stage dataset under an artifacts directory; one whose manifest is damaged too, named by its
    path (its readers, and `verify`, say what is wrong with it)."""
    fs, root = _fs(artifacts)
    if not fs.isdir(root):
        raise DatasetError(f"{artifacts} is not a directory")
    found = []
    for stage, fp in finished_datasets(artifacts):
        path = f"{root.rstrip('/')}/{stage}/{fp}"
        try:
            manifest = _load_manifest(_url(fs, path))
        except DamagedDataset:
            manifest = {"stage": stage, "fingerprint": fp}
        found.append(
            {
                "stage": manifest["stage"],
                "fingerprint": manifest["fingerprint"],
                "rows": manifest.get("rows"),
                "created": manifest.get("created"),
                "path": path,
                "url": _url(fs, path),
            }
        )
    return found


def code_version() -> str:
    try:
        return metadata.version("contrastive-pipeline")
    except metadata.PackageNotFoundError:
        return "unknown"


class _Summed:
    """A file being written, with the CRC-32 and size of what went through it: a shard's checksum costs no
    second read."""

    def __init__(self, f):
        self._f, self.crc32, self.bytes = f, 0, 0

    def write(self, data) -> int:
        self.crc32 = zlib.crc32(data, self.crc32)
        self.bytes += len(data)
        return self._f.write(data)

    def __getattr__(self, name: str):
        return getattr(self._f, name)

    def __enter__(self) -> _Summed:
        return self

    def __exit__(self, *exc) -> None:
        self._f.close()


# A full disk or quota, by its errno; the words are the OS's, which a library that wraps the OSError in its own
# error keeps (safetensors: "No space left on device (os error 28)").
FULL = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded"}


def full_disk(e: BaseException, path: str) -> DatasetError | None:
    """The one line a full disk met writing `path` is, not the writer's traceback: the user's to fix, whichever
    library was writing. `e` is the OSError, or was raised from it (torch.save's RuntimeError), or says so in its
    own words (safetensors' SafetensorError); None for any other error, and for one that is one line already."""
    if isinstance(e, DatasetError):
        return None
    seen: set[int] = set()
    cause: BaseException | None = e
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        for code, said in FULL.items():
            if isinstance(cause, OSError) and cause.errno == code or os.strerror(code) in str(cause):
                return DatasetError(f"{said} writing {path}")
        cause = cause.__cause__ or cause.__context__
    return None


def no_space(e: BaseException, path: str) -> None:
    """Raise full_disk's one line where `e` is a full disk."""
    if (error := full_disk(e, path)) is not None:
        raise error from None


def withheld_access(path: str) -> int:
    """The permission bits that what is built from the local file or directory `path` may not grant: a class's
    (group's, others') all, where `path` does not let that class read it (and, a directory, search it).
    A URL or a hub name, nothing on local disk, withholds nothing."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return 0
    withheld = 0
    for bits, read, search in ((0o070, stat.S_IRGRP, stat.S_IXGRP), (0o007, stat.S_IROTH, stat.S_IXOTH)):
        if not mode & read or stat.S_ISDIR(mode) and not mode & search:
            withheld |= bits
    return withheld


def _narrow(root: str, withheld: int) -> None:
    """Take the `withheld` bits from `root` and everything under it; links are left alone (chmod follows them)."""
    if not withheld:
        return
    for directory, dirs, files in os.walk(root):
        for p in [directory, *(os.path.join(directory, name) for name in dirs + files)]:
            mode = os.lstat(p).st_mode
            if not stat.S_ISLNK(mode) and mode & withheld:
                os.chmod(p, stat.S_IMODE(mode) & ~withheld)


class DatasetWriter:
    """Writes one stage's output atomically; use as a context manager.

    Rows stream into Parquet shards, row group by row group, so memory stays
    bounded by a row group whatever the dataset's size; a shard is closed at
    `rows_per_shard` rows or `shard_bytes` bytes. On a clean exit the manifest
    and `_SUCCESS` are written and the temporary directory is renamed to the
    final path; on an exception, the disk filling included, it is removed.
    """

    ROW_GROUP_ROWS = 4096
    ROW_GROUP_BYTES = 64 * 2**20  # long documents: 4096 of them can be hundreds of MB

    def __init__(
        self,
        artifacts: str,
        stage: str,
        fp: str,
        *,
        config: Any,
        inputs: dict[str, str],
        schema: pa.Schema | None = None,
        rows_per_shard: int | None = None,
        shard_bytes: int = 256 * 2**20,
    ):
        self.path = dataset_path(artifacts, stage, fp)
        self.fs, final = _fs(self.path)
        self._final = final
        self.tmp = f"{final.rsplit('/', 1)[0]}/{TMP_PREFIX}{fp}-{uuid.uuid4().hex[:8]}"
        self.stage, self.fp, self.config, self.inputs = stage, fp, config, inputs
        self.schema = schema
        self.rows_per_shard = rows_per_shard or sys.maxsize
        self.shard_bytes = shard_bytes
        self.counts: Counter[str] = Counter()
        self.extra: dict[str, Any] = {}
        # Paths (relative to the dataset) that a later stage rewrites in the published dataset, so left out of its
        # integrity record: a trained model's card, which the leaderboard rewrites with the model's scores.
        self.rewritten: set[str] = set()
        self.rows = 0
        self._pending: list[dict] = []
        self._pending_bytes = 0
        self._shards = 0
        self._parts: list[dict] = []  # per closed shard: file, rows, bytes, crc32
        self._file = self._writer = None
        self._shard_rows = 0
        self._started = time.time()
        self._work: str | None = None
        self._local = _on_disk(self.fs)
        self._upload: str | None = None  # a remote dataset's local_dir
        self._withheld = 0  # permission bits the finished dataset may not grant (built_from)
        self._mode = 0o700  # the temporary directory's mode as the umask made it, given back when it is published

    def built_from(self, *paths: str) -> None:
        """Local files or directories this dataset's content comes from: group or others may not read the
        dataset where they may not read one of them. Remote ones (URLs) and names say nothing."""
        for p in paths:
            self._withheld |= withheld_access(p)
        if self._work and self._local:
            _narrow(self._work, self._withheld)

    @property
    def local_dir(self) -> str:
        """A local directory for libraries that write files themselves (models, tokenizers): the temporary
        directory itself, or for remote artifacts a local one uploaded into it before the manifest."""
        if self._local:
            return self.tmp
        if self._upload is None:
            self._upload = tempfile.mkdtemp(prefix=f"cpipe-{self.stage}-")
        return self._upload

    @property
    def work_dir(self) -> str:
        """A directory for stages that resume from their own partial work, removed once the dataset is
        finished. Beside the artifacts it outlives a failed run; for remote artifacts it is a local
        temporary directory, so a killed stage starts over."""
        if self._work is None:
            if self._local:
                self._work = f"{dataset_parts(self._final)[0]}/{WORK_DIR}/{self.stage}-{self.fp}"
                self.fs.makedirs(self._work, exist_ok=True)
                _narrow(self._work, self._withheld)
            else:
                self._work = tempfile.mkdtemp(prefix=f"cpipe-{self.stage}-work-")
        return self._work

    def _url(self, p: str) -> str:
        """A path on this dataset's filesystem as a URL that names the filesystem."""
        return self.fs.unstrip_protocol(p)

    def __enter__(self) -> DatasetWriter:
        self.fs.makedirs(self.tmp, exist_ok=True)
        if self._local:
            # Private while it is written: what it may grant is known only once every source is (built_from).
            self._mode = stat.S_IMODE(os.stat(self.tmp).st_mode)
            os.chmod(self.tmp, 0o700)
        return self

    def write(self, rows: list[dict] | pa.Table) -> None:
        """Append rows (dicts or an Arrow table) to the current shard."""
        if isinstance(rows, pa.Table):
            self._append(rows)
        else:
            # Rows often arrive one at a time; convert to Arrow a row group at a time.
            self._pending.extend(rows)
            self._pending_bytes += sum(len(v) for row in rows for v in row.values() if isinstance(v, (str, bytes)))
            if (
                len(self._pending) >= min(self.ROW_GROUP_ROWS, self.rows_per_shard)
                or self._pending_bytes >= self.ROW_GROUP_BYTES
            ):
                self._append(self._convert_pending())

    def _convert_pending(self) -> pa.Table:
        table = pa.Table.from_pylist(self._pending, schema=self.schema)
        self._pending, self._pending_bytes = [], 0
        return table

    def _append(self, table: pa.Table) -> None:
        if self.schema is not None:
            table = table.select(self.schema.names).cast(self.schema)
        self.rows += table.num_rows
        while table.num_rows:
            room = self.rows_per_shard - self._shard_rows
            head, table = table.slice(0, room), table.slice(room)
            if self._writer is None:
                self._file = _Summed(self.fs.open(f"{self.tmp}/{self._part_name()}", "wb"))
                self._writer = pq.ParquetWriter(self._file, head.schema)
            self._writer.write_table(head, row_group_size=self.ROW_GROUP_ROWS)
            self._shard_rows += head.num_rows
            if self._shard_rows >= self.rows_per_shard or self._file.tell() >= self.shard_bytes:
                self._close_shard()

    def _part_name(self) -> str:
        return f"{PART_PREFIX}{self._shards:05d}.parquet"

    def _close_shard(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._file.close()
            self._parts.append(
                {
                    "file": self._part_name(),
                    "rows": self._shard_rows,
                    "bytes": self._file.bytes,
                    "crc32": self._file.crc32,
                }
            )
            self._shards += 1
            self._file = self._writer = None
            self._shard_rows = 0

    def count(self, reason: str, n: int = 1) -> None:
        """Record why rows were dropped (or any other tally) in the manifest."""
        self.counts[reason] += n

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc is not None:
                self._abandon()
                no_space(exc, self.path)
                return
            try:
                self._finish()
            except BaseException as e:
                self._abandon()
                no_space(e, self.path)
                raise
        finally:
            for d in (self._upload, None if self._local else self._work):
                if d:
                    shutil.rmtree(d, ignore_errors=True)

    def _abandon(self) -> None:
        """Remove the temporary directory; an open shard is only closed, and may fail to (a full disk)."""
        if self._writer is not None:
            with suppress(Exception):
                self._file.close()
        remove(self._url(self.tmp))

    def _finish(self) -> None:
        if self._upload:
            files = [os.path.join(d, name) for d, _, names in os.walk(self._upload) for name in names]
            self.fs.put(files, _moved(files, self._upload, self.tmp))
        if self._pending:
            self._append(self._convert_pending())
        self._close_shard()
        if self.schema is not None and self._shards == 0:
            with _Summed(self.fs.open(f"{self.tmp}/{self._part_name()}", "wb")) as f:
                pq.write_table(self.schema.empty_table(), f)
            self._parts.append({"file": self._part_name(), "rows": 0, "bytes": f.bytes, "crc32": f.crc32})
            self._shards = 1
        files = self.fs.find(self.tmp, detail=True)
        shards = {part["file"] for part in self._parts}
        sides = {
            name: info
            for info in files.values()
            if (name := info["name"][len(self.tmp.rstrip("/")) + 1 :]) not in shards and name not in self.rewritten
        }
        manifest = {
            "stage": self.stage,
            "fingerprint": self.fp,
            "config": self.config,
            "inputs": self.inputs,
            "code_version": code_version(),
            "schema": [{"name": f.name, "type": str(f.type)} for f in self.schema] if self.schema else None,
            "rows": self.rows if self.schema is not None else None,
            "shards": self._shards,
            "parts": self._parts,
            # Every other file (a model, _items.parquet, _dropped.parquet), so that a reader finds one missing or
            # changed as it finds a shard; the files a later stage rewrites (a model's card) are left out.
            "files": [
                {"file": name, "bytes": info["size"], "crc32": _crc32(self.fs, info)}
                for name, info in sorted(sides.items())
            ],
            "bytes": sum(info["size"] for info in files.values()),
            "counts": dict(self.counts),
            "created": time.time(),
            "seconds": round(time.time() - self._started, 3),
            **self.extra,
        }
        with self.fs.open(f"{self.tmp}/{MANIFEST}", "w") as f:
            json.dump(manifest, f, indent=2, default=str)
        if complete(self.path):
            # Another writer finished the same fingerprint first (without a lease: an object store's race).
            # Its dataset is the same and a reader may hold it: keep it, drop ours.
            remove(self._url(self.tmp))
            return
        if self._local:
            with self.fs.open(f"{self.tmp}/{SUCCESS}", "w") as f:
                f.write("")
            follow_umask(self.tmp, self._withheld)  # a model.safetensors is written 0600 (storage.modes)
            os.chmod(self.tmp, self._mode & ~self._withheld)
            self._publish_local()
            if self._work:
                remove(self._work)
        else:
            # Object stores have no rename: copy, then mark the copy finished, last. A leftover copy without
            # _SUCCESS (a killed run's) is never read; replace it.
            remove(self._url(self._final))
            files = self.fs.find(self.tmp)
            self.fs.copy(files, _moved(files, self.tmp, self._final))
            with self.fs.open(f"{self._final}/{SUCCESS}", "w") as f:
                f.write("")
            remove(self._url(self.tmp))

    def _publish_local(self) -> None:
        """Rename the finished temporary directory into place: readers see all of it or nothing. os.rename
        refuses to replace a non-empty directory (where a move would nest one inside the other), so a
        leftover unfinished copy is first renamed aside, and a finished one that won a race is kept."""
        try:
            os.rename(self.tmp, self._final)
            return
        except OSError:
            if complete(self.path):
                remove(self.tmp)
                return
        aside = f"{self._final.rsplit('/', 1)[0]}/{TMP_PREFIX}{self.fp}-unfinished-{uuid.uuid4().hex[:8]}"
        os.rename(self._final, aside)
        os.rename(self.tmp, self._final)
        remove(aside)
