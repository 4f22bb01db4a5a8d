import random
from pathlib import Path

import numpy as np
import pytest

from pipeline.baselines.fasttext.bow import FastTextEncoder, train_fasttext

VOCAB = "the a cat dog bird sat ran flew on under mat tree house red big small quickly slowly".split()


def _corpus() -> list[str]:
    rng = random.Random(0)
    sentences = [" ".join(rng.choice(VOCAB) for _ in range(rng.randint(5, 12))) for _ in range(300)]
    # Mixed case and an embedded newline: training must lowercase and keep one document per line.
    sentences[0] = "The Cat sat\non the MAT"
    return sentences * 3


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bow") / "fasttext.bin"
    assert train_fasttext(_corpus(), str(out), dim=16, epoch=2) == str(out)
    return out


def test_model_file_written_without_leftovers(model_path):
    assert model_path.is_file() and model_path.stat().st_size > 0
    assert [p.name for p in model_path.parent.iterdir()] == [model_path.name]


def test_encode_shape_dtype_and_finite(model_path):
    encoder = FastTextEncoder(str(model_path))
    vectors = encoder.encode(["the cat sat on the mat", "a bird flew", "unseenword", ""])
    assert vectors.shape == (4, 16)
    assert vectors.dtype == np.float32
    assert np.isfinite(vectors).all()
    assert np.abs(vectors[:3]).sum(axis=1).min() > 0  # known words and subwords give real vectors


def test_same_text_same_vector(model_path):
    encoder = FastTextEncoder(str(model_path))
    a, b, c, d = encoder.encode(["the cat sat", "the cat sat", "The CAT\nsat", "a dog ran"])
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)  # lowercased, newline treated as a space
    assert not np.allclose(a, d)


def test_too_few_threads_rejected(tmp_path):
    def texts():
        raise AssertionError("texts must not be read when the arguments are invalid")
        yield

    with pytest.raises(ValueError, match="threads"):
        train_fasttext(texts(), str(tmp_path / "m.bin"), threads=10)
    assert not (tmp_path / "m.bin").exists()


def test_empty_texts_rejected(tmp_path):
    with pytest.raises(ValueError, match="empty"):
        train_fasttext([], str(tmp_path / "m.bin"))
    with pytest.raises(ValueError, match="empty"):
        train_fasttext(["", "  \n  "], str(tmp_path / "m.bin"))
    assert list(tmp_path.iterdir()) == []


def test_bucket_bounds_the_model_size(model_path):
    encoder = FastTextEncoder(str(model_path))
    # rows = vocabulary + subword buckets (200,000 by default, not fastText's 2M)
    assert encoder.parameters == (len(encoder.model.get_words()) + 200_000) * 16
    assert model_path.stat().st_size < 20 * 2**20
