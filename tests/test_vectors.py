import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipeline.baselines.vectors import RandomEncoder, VectorsError, WordVectorEncoder, read_vectors

SHARED = os.environ.get("CPIPE_SHARED_DATA")

GLOVE = (
    "the 0.5 1.0 -1.5\n"
    "cat 1.0 0.0 2.0\n"
    ". . . 0.25 0.25 0.25\n"  # GloVe 840B has words with spaces in them
    "New\u00a0York 3 3 3\n"  # and with no-break spaces, which are not separators
    "the 9 9 9\n"  # a repeated word keeps its first vector
)
# fastText .vec: a "<count> <dim>" header, and a space before every line end.
FASTTEXT = "3 2\nthe 1 2 \ncat 3 4 \ndog 5 6 \n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_glove_text_with_spaces_in_words(tmp_path):
    vocab, matrix = read_vectors(write(tmp_path, "g.txt", GLOVE))
    assert list(vocab) == ["the", "cat", ". . .", "New\u00a0York"]
    assert matrix.shape == (4, 3) and matrix.dtype == np.float32
    assert matrix[vocab["the"]].tolist() == [0.5, 1.0, -1.5]
    assert matrix[vocab[". . ."]].tolist() == [0.25, 0.25, 0.25]


def test_fasttext_header_is_detected(tmp_path):
    vocab, matrix = read_vectors(write(tmp_path, "f.vec", FASTTEXT))
    assert list(vocab) == ["the", "cat", "dog"]
    assert matrix.tolist() == [[1, 2], [3, 4], [5, 6]]


def test_words_filter_keeps_only_those(tmp_path):
    vocab, matrix = read_vectors(write(tmp_path, "g.txt", GLOVE), words={"cat", "absent"})
    assert list(vocab) == ["cat"] and matrix.tolist() == [[1.0, 0.0, 2.0]]


@pytest.mark.parametrize(
    "text, lineno, message",
    [
        ("the 1 2 3\ncat 1 2\n", 2, "expected a word and 3 numbers"),
        ("the 1 2 3\ncat 1 x 3\n", 2, "not a number"),
        ("2 3\nthe 1 2 3\ncat 1 2 nan\n", 3, "non-finite"),
        ("the 1 2 3\n\ncat 1 2\n", 3, "expected a word and 3 numbers"),  # blank lines are skipped, not counted off
    ],
)
def test_malformed_rows_name_file_and_line(tmp_path, text, lineno, message):
    path = write(tmp_path, "bad.txt", text)
    with pytest.raises(VectorsError) as err:
        read_vectors(path)
    assert f"{path}:{lineno}:" in str(err.value) and message in str(err.value)


def test_undecodable_row_names_the_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"the 1 2\ncaf\xe9 1 2\n")
    with pytest.raises(VectorsError, match=f"{path}:2: not valid UTF-8"):
        read_vectors(path)


def test_encoder_averages_known_words(tmp_path):
    enc = WordVectorEncoder(write(tmp_path, "g.txt", GLOVE))
    out = enc.encode(["the cat", "the unknown cat", "nothing known here", "", "The"], batch_size=2)
    assert out.shape == (5, 3) and out.dtype == np.float32
    assert out[0].tolist() == [0.75, 0.5, 0.25]
    assert out[1].tolist() == out[0].tolist()  # unknown words are skipped, not zeros in the mean
    assert out[2].tolist() == out[3].tolist() == out[4].tolist() == [0, 0, 0]  # lookups are case-sensitive
    assert enc.parameters == 4 * 3 and enc.dim == 3


def test_lowercase_lookup(tmp_path):
    enc = WordVectorEncoder(write(tmp_path, "f.vec", FASTTEXT), lowercase=True)
    assert enc.encode(["The DOG"]).tolist() == [[3.0, 4.0]]


@pytest.mark.slow  # a Python process
def test_random_encoder_is_deterministic_across_processes():
    enc = RandomEncoder(dim=16, seed=3)
    out = enc.encode(["a man plays", "plays a man", "a dog", ""])
    assert out.shape == (4, 16)
    assert np.allclose(out[0], out[1])  # a bag of words
    assert not np.allclose(out[0], out[2]) and not out[3].any()
    assert np.allclose(RandomEncoder(dim=16, seed=3).encode(["a dog"]), out[2])
    assert not np.allclose(RandomEncoder(dim=16, seed=4).encode(["a dog"]), out[2])
    assert enc.parameters == 0
    # Word vectors come from a hash of the word, not Python's per-process salted hash().
    code = (
        "import sys; from pipeline.baselines.vectors import RandomEncoder; "
        "sys.stdout.write(RandomEncoder(dim=16, seed=3).encode(['a dog'])[0].tobytes().hex())"
    )
    child = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "123"},
    )
    assert bytes.fromhex(child.stdout) == out[2].tobytes()


def test_random_word_vectors_have_unit_norm_on_average():
    vectors = RandomEncoder(dim=300, seed=0).encode([f"w{i}" for i in range(200)])
    assert np.linalg.norm(vectors, axis=1).mean() == pytest.approx(1.0, abs=0.05)


@pytest.mark.skipif(not SHARED, reason="CPIPE_SHARED_DATA is not set (path to the team's shared data directory)")
def test_real_vector_files():
    vectors = Path(SHARED) / "vectors"
    glove = WordVectorEncoder(vectors / "glove.840B.300d.first100.txt")
    assert glove.matrix.shape == (100, 300)
    assert "the" in glove.vocab and "The" in glove.vocab and "n't" in glove.vocab
    fasttext = WordVectorEncoder(vectors / "fasttext.wiki.en.first100.vec", lowercase=True)
    # The header says 2519370 words: the file is the first 100 lines, header included.
    assert fasttext.matrix.shape == (99, 300)
    assert list(fasttext.vocab)[:3] == [",", ".", "the"]
    for enc in (glove, fasttext):
        out = enc.encode(["the cat sat on the mat .", "zzzz"])
        assert np.abs(out[0]).sum() > 0 and not out[1].any()
        assert np.isfinite(out).all()
