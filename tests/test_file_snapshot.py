"""A source's snapshot follows its content: a copy with new modification times keeps every fingerprint, an edit
changes it, and a remembered digest is reused only while the file's size, mtime and inode are the ones it had."""

import hashlib
import json
import os
import shutil

import pytest

from pipeline import file_snapshot
from pipeline.corpus.sources import LocalSource


@pytest.fixture(autouse=True)
def memo(tmp_path, monkeypatch):
    path = tmp_path / "cache" / "digests.json"
    monkeypatch.setattr(file_snapshot, "MEMO", path)
    return path


def write(root, files):
    root.mkdir(parents=True)
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_listing_names_sizes_and_sha256_of_each_file(tmp_path):
    root = write(tmp_path / "d", {"a.txt": "alpha", "sub/b.txt": "beta beta"})
    assert file_snapshot.snapshot(str(root)) == [
        ("a.txt", 5, hashlib.sha256(b"alpha").hexdigest()[:32]),
        (os.path.join("sub", "b.txt"), 9, hashlib.sha256(b"beta beta").hexdigest()[:32]),
    ]


def test_a_copy_with_new_mtimes_keeps_the_snapshot_and_an_edit_of_the_same_size_changes_it(tmp_path):
    a = write(tmp_path / "a", {"x.txt": "one document", "y.txt": "another"})
    before = LocalSource(str(a)).snapshot()
    b = tmp_path / "b"
    shutil.copytree(a, b, copy_function=shutil.copyfile)  # new inodes and modification times
    os.utime(b / "x.txt", ns=(0, 0))
    assert LocalSource(str(b)).snapshot() == before
    (b / "x.txt").write_text("one DOCUMENT")
    assert LocalSource(str(b)).snapshot() != before


def test_digests_are_remembered_by_stat_but_not_while_a_file_is_fresh(tmp_path, memo):
    root = write(tmp_path / "d", {"old.txt": "settled", "new.txt": "just written"})
    os.utime(root / "old.txt", ns=(10**18, 10**18))  # 2001: long settled
    file_snapshot.snapshot(str(root))
    assert set(json.loads(memo.read_text())) == {str(root / "old.txt")}
    # A remembered stat means no rehash: the same size and mtime back on other bytes read as unchanged,
    # as in git's index; any other stat rehashes.
    (root / "old.txt").write_text("SETTLED")
    os.utime(root / "old.txt", ns=(10**18, 10**18))
    assert file_snapshot.snapshot(str(root))[1][2] == hashlib.sha256(b"settled").hexdigest()[:32]
    os.utime(root / "old.txt", ns=(10**18 + 1, 10**18 + 1))
    assert file_snapshot.snapshot(str(root))[1][2] == hashlib.sha256(b"SETTLED").hexdigest()[:32]
