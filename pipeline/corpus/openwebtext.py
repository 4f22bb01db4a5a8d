"""OpenWebText in its original release layout, read member by member.

The release (and its Hugging Face hub copy, `Skylion007/openwebtext`
`subsets/urlsf_subsetNN.tar`) is a set of uncompressed tarballs whose members
`openwebtext/urlsf_subsetNN-M_data.xz` are themselves xz-compressed tars of
`.txt` files, one document each. The outer tar is indexed by its headers alone (it is not
compressed, so tarfile seeks past the data), and each xz member is a part that
any process can read from its offset; nothing is extracted to disk.

Failure policy: a bad inner member (bad xz data, broken inner tar, non-UTF-8
text) is counted, named and skipped, because re-downloading would not fix it
and the rest of the tarball is fine. A truncated outer tarball raises
SourceError: it means an incomplete download, and a silently partial corpus
would be worse than asking the user to download it again.
"""

from __future__ import annotations

import fnmatch
import io
import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pipeline.corpus.sources import Document, Part, Read, Source, SourceError, doc_id
from pipeline.file_snapshot import listing_digest, rglob

_SUBSET = re.compile(r"urlsf_subset(\d+)\.tar$")


def is_openwebtext(spec: str) -> bool:
    """True for a path or URL naming an OpenWebText subset tarball (hub URLs may carry `?download=true`)."""
    name = spec.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    return fnmatch.fnmatch(name, "urlsf_subset*.tar")


class OpenWebTextSource(Source):
    """One `urlsf_subsetNN.tar`, or a directory (searched recursively) holding several."""

    def __init__(self, path: str, subsets: list[int] | None = None):
        super().__init__()
        self.root = Path(path)
        self.subsets = None if subsets is None else set(subsets)
        if not self.root.exists():
            raise SourceError(f"OpenWebText path does not exist: {path}")
        if not self.files():
            wanted = "" if self.subsets is None else f" for subsets {sorted(self.subsets)}"
            raise SourceError(f"no urlsf_subsetNN.tar files under {path}{wanted}")

    def files(self) -> list[Path]:
        candidates = [self.root] if self.root.is_file() else rglob(self.root, "urlsf_subset*.tar")
        found = []
        for p in candidates:
            m = _SUBSET.search(p.name)
            if m and p.is_file() and (self.subsets is None or int(m.group(1)) in self.subsets):
                found.append((int(m.group(1)), p))
        return [p for _, p in sorted(found)]

    def snapshot(self) -> str:
        return listing_digest(self.files())

    def parts(self) -> Iterator[Part]:
        """One part per xz member; the outer tar is uncompressed, so listing it only reads headers."""
        for path in self.files():
            size = path.stat().st_size
            try:
                with tarfile.open(path, mode="r:") as outer:
                    for member in outer:
                        if not (member.isfile() and member.name.endswith(".xz")):
                            continue
                        # A member cut short by the end of the file would otherwise look
                        # like a corrupt xz member and be skipped quietly.
                        if member.offset_data + member.size > size:
                            raise SourceError(
                                f"{path}: truncated inside {member.name} (incomplete download?); download it again"
                            )
                        yield XzMember(str(path), member.name, member.offset_data, member.size)
                    # tarfile ends iteration quietly when the file stops exactly between members;
                    # only the end-of-archive block tells a complete tarball from a cut one.
                    if outer.offset + tarfile.BLOCKSIZE > size:
                        raise SourceError(
                            f"{path}: truncated after {outer.offset} bytes (no end-of-archive "
                            f"marker; incomplete download?); download it again"
                        )
            except tarfile.ReadError as e:
                raise SourceError(f"{path}: not a readable tar archive ({e})") from None


@dataclass(frozen=True)
class XzMember(Part):
    path: str
    name: str
    offset: int
    size: int

    def read(self) -> Read:
        result, tarball = Read(), Path(self.path)
        with tarball.open("rb") as f:
            f.seek(self.offset)
            # Members of the release are about a megabyte compressed, so one is read whole.
            data = io.BytesIO(f.read(self.size))
        try:
            with tarfile.open(fileobj=data, mode="r|xz") as inner:
                for txt in inner:
                    if not (txt.isfile() and txt.name.endswith(".txt")):
                        continue
                    key = f"{tarball.name}/{self.name}/{txt.name}"
                    raw = inner.extractfile(txt).read()
                    try:
                        text = raw.decode("utf-8")
                    except UnicodeDecodeError as e:
                        result.skip(key, f"not UTF-8 (byte {e.start})", "not_utf8")
                        continue
                    result.documents.append(Document(doc_id(key), self.path, Path(txt.name).name, text))
        except tarfile.TarError as e:
            # Documents already read from this member stay; the rest of it is lost.
            result.skip(f"{self.path}:{self.name}", f"corrupt xz member ({e})", "corrupt_member")
        return result
