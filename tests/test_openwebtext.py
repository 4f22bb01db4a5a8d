"""OpenWebTextSource on tarballs built here in the release layout: urlsf_subsetNN.tar of xz tars of .txt files."""

import pickle
import shutil
import tarfile

import pytest

from pipeline.corpus.openwebtext import OpenWebTextSource, is_openwebtext
from pipeline.corpus.sources import SourceError, doc_id
from tests.helpers import write_subset, xz_tar


def test_every_document_comes_back_exactly_with_stable_ids(release, tmp_path):
    root, expected = release
    src = OpenWebTextSource(str(root))
    docs = list(src.documents())
    assert [d.title_or_url for d in docs] == list(expected)
    assert {d.title_or_url: d.text for d in docs} == {name: text for name, (_, text) in expected.items()}
    assert [d.doc_id for d in docs] == [doc_id(key) for key, _ in expected.values()]
    assert len({d.doc_id for d in docs}) == len(docs)
    assert {d.source for d in docs} == {str(root / "urlsf_subset00.tar"), str(root / "urlsf_subset01.tar")}
    assert not src.counts and not src.skipped
    # Ids come from names inside the tarballs, not from where the tarballs sit.
    moved = shutil.copytree(root, tmp_path / "elsewhere")
    assert [d.doc_id for d in OpenWebTextSource(str(moved)).documents()] == [d.doc_id for d in docs]


def test_subset_selection_and_single_tarball(release):
    root, expected = release
    only01 = [k for k, _ in expected.values() if k.startswith("urlsf_subset01.tar/")]
    assert [d.doc_id for d in OpenWebTextSource(str(root), subsets=[1]).documents()] == [doc_id(k) for k in only01]
    single = list(OpenWebTextSource(str(root / "urlsf_subset00.tar")).documents())
    assert len(single) == 6 and {d.source for d in single} == {str(root / "urlsf_subset00.tar")}
    with pytest.raises(SourceError, match=r"subsets \[7\]"):
        OpenWebTextSource(str(root), subsets=[7])


def test_each_xz_member_is_a_part_readable_on_its_own(release):
    root, expected = release
    src = OpenWebTextSource(str(root))
    parts = list(src.parts())
    assert len(parts) == len({(p.path, p.name) for p in parts}) > 1
    # Read back to front, as a worker pool might: each part needs nothing but itself.
    reads = [pickle.loads(pickle.dumps(p)).read() for p in reversed(parts)]
    docs = [d for r in reversed(reads) for d in r.documents]
    assert docs == list(OpenWebTextSource(str(root)).documents())
    assert [d.title_or_url for d in docs] == list(expected)


def test_corrupt_xz_member_is_counted_named_and_skipped(tmp_path):
    good = {"0000001-a.txt": b"first good document", "0000002-b.txt": b"second good document"}
    later = {"0000003-c.txt": b"document after the bad member"}
    path = write_subset(
        tmp_path / "urlsf_subset03.tar",
        {
            "urlsf_subset03-1_data.xz": xz_tar(good),
            "urlsf_subset03-2_data.xz": b"\xfd7zXZ\x00" + bytes(range(256)) * 10,  # xz magic, then garbage
            "urlsf_subset03-3_data.xz": xz_tar(later),
        },
    )
    src = OpenWebTextSource(str(path))
    texts = [d.text for d in src.documents()]
    assert texts == ["first good document", "second good document", "document after the bad member"]
    assert src.counts == {"corrupt_member": 1}
    assert len(src.skipped) == 1 and "urlsf_subset03-2_data.xz" in src.skipped[0]


def test_non_utf8_document_is_counted_and_skipped(tmp_path):
    path = write_subset(
        tmp_path / "urlsf_subset04.tar",
        {
            "urlsf_subset04-1_data.xz": xz_tar(
                {"0000001-a.txt": "caf\u00e9 in latin-1".encode("latin-1"), "0000002-b.txt": b"fine"}
            )
        },
    )
    src = OpenWebTextSource(str(path))
    assert [d.text for d in src.documents()] == ["fine"]
    assert src.counts == {"not_utf8": 1} and "0000001-a.txt" in src.skipped[0]


def test_truncated_tarball_raises_naming_the_file(release):
    """Policy: a cut outer tarball is an incomplete download and raises, wherever the cut falls."""
    root, _ = release
    path = root / "urlsf_subset00.tar"
    with tarfile.open(path) as tar:
        second = tar.getmembers()[1]
    full = path.read_bytes()
    for cut in (second.offset_data + second.size // 2, second.offset):  # inside a member; between members
        path.write_bytes(full[:cut])
        with pytest.raises(SourceError, match="urlsf_subset00.tar: truncated"):
            list(OpenWebTextSource(str(path)).documents())
    path.write_bytes(b"this is not a tar archive at all" * 40)
    with pytest.raises(SourceError, match="not a readable tar archive"):
        list(OpenWebTextSource(str(path)).documents())


def test_snapshot_follows_the_tarballs(release):
    root, _ = release
    before = OpenWebTextSource(str(root)).snapshot()
    assert OpenWebTextSource(str(root)).snapshot() == before
    assert OpenWebTextSource(str(root), subsets=[0]).snapshot() != before
    with open(root / "urlsf_subset01.tar", "ab") as f:  # a tar's zero padding: readable, different content
        f.write(bytes(512))
    assert OpenWebTextSource(str(root)).snapshot() != before


def test_is_openwebtext_by_name():
    assert is_openwebtext("/data/owt/urlsf_subset00.tar")
    assert is_openwebtext(
        "https://huggingface.co/datasets/Skylion007/openwebtext/resolve/main/subsets/urlsf_subset20.tar?download=true"
    )
    assert not is_openwebtext("/data/owt/urlsf_subset00-1_data.xz")
    assert not is_openwebtext("/data/owt/urlsf_subset00.tar.gz")
    assert not is_openwebtext("/data/corpus/openwebtext/train.jsonl")
