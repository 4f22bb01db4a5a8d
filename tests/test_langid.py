"""Language identification: a tiny fastText classifier trained here, and the real lid.176 on shared data."""

from __future__ import annotations

import glob
import os
import random
from pathlib import Path

import fasttext
import pytest

from pipeline.errors import InputError
from pipeline.filter.langid import PREFIX_CHARS, LangIdError, LanguageIdentifier
from tests.helpers import DE_WORDS, EN_WORDS, sentence

SHARED = os.environ.get("CPIPE_SHARED_DATA")
needs_shared = pytest.mark.skipif(
    not SHARED, reason="CPIPE_SHARED_DATA is not set (path to the team's shared data directory with models/lid.176.ftz)"
)


def test_tiny_model_labels_each_text_in_order(tiny_lid_model):
    rng = random.Random(1)
    texts = [sentence(rng, EN_WORDS), sentence(rng, DE_WORDS), sentence(rng, DE_WORDS), sentence(rng, EN_WORDS)]
    result = LanguageIdentifier(str(tiny_lid_model)).predict(texts)
    assert [lang for lang, _ in result] == ["en", "de", "de", "en"]
    assert all(isinstance(score, float) and 0.5 < score <= 1.0 for _, score in result)


def test_one_model_call_per_list(tiny_lid_model):
    rng = random.Random(6)
    ident = LanguageIdentifier(str(tiny_lid_model))
    calls, predict = [], ident.model.predict
    ident.model.predict = lambda lines, **kw: calls.append(len(lines)) or predict(lines, **kw)
    result = ident.predict([sentence(rng, EN_WORDS) for _ in range(5)] + ["", sentence(rng, DE_WORDS)])
    assert calls == [6] and len(result) == 7


def test_tiny_model_blank_text_is_unknown(tiny_lid_model):
    rng = random.Random(2)
    result = LanguageIdentifier(str(tiny_lid_model)).predict(["", sentence(rng, DE_WORDS), " \n\t "])
    assert result[0] == ("unknown", 0.0) and result[2] == ("unknown", 0.0)
    assert result[1][0] == "de"


def test_tiny_model_empty_list(tiny_lid_model):
    assert LanguageIdentifier(str(tiny_lid_model)).predict([]) == []


def test_tiny_model_newlines_read_as_spaces(tiny_lid_model):
    rng = random.Random(3)
    words = sentence(rng, EN_WORDS, 30).split()
    with_newlines = "\n".join(" ".join(words[i : i + 5]) for i in range(0, 30, 5))
    ident = LanguageIdentifier(str(tiny_lid_model))
    assert ident.predict([with_newlines]) == ident.predict([" ".join(words)])
    assert ident.predict([with_newlines])[0][0] == "en"


def test_only_a_prefix_is_classified(tiny_lid_model):
    rng = random.Random(4)
    english = ""
    while len(english) < PREFIX_CHARS:
        english += sentence(rng, EN_WORDS) + " "
    german_tail = " ".join(sentence(rng, DE_WORDS) for _ in range(200))  # far longer than the English head
    assert LanguageIdentifier(str(tiny_lid_model)).predict([english + german_tail])[0][0] == "en"


def test_missing_model_names_the_path(tmp_path):
    path = tmp_path / "no-such-model.ftz"
    with pytest.raises(LangIdError, match="no-such-model.ftz") as info:
        LanguageIdentifier(str(path))
    assert isinstance(info.value, InputError)


def test_unloadable_model_names_the_path(tmp_path):
    path = tmp_path / "garbage.bin"
    path.write_bytes(b"not a fasttext model\n" * 10)
    with pytest.raises(LangIdError, match="garbage.bin"):
        LanguageIdentifier(str(path))


def test_unsupervised_model_is_rejected(tmp_path):
    rng = random.Random(5)
    (tmp_path / "u.txt").write_text("\n".join(sentence(rng, EN_WORDS) for _ in range(100)) + "\n")
    model = fasttext.train_unsupervised(str(tmp_path / "u.txt"), dim=8, epoch=1, minCount=1, thread=12, verbose=0)
    model.save_model(str(tmp_path / "vectors.bin"))
    with pytest.raises(LangIdError, match="vectors.bin.*not a fastText classification model"):
        LanguageIdentifier(str(tmp_path / "vectors.bin"))


# --- the real lid.176 model on real text -----------------------------------------------------------


@pytest.fixture(scope="module")
def lid176() -> LanguageIdentifier:
    return LanguageIdentifier(os.path.join(SHARED, "models", "lid.176.ftz"))


def english_documents() -> list[str]:
    paths = sorted(glob.glob(os.path.join(SHARED, "corpus", "sotu", "*.txt")))
    assert len(paths) > 200, f"expected the State of the Union corpus under {SHARED}"
    return [Path(p).read_text(encoding="utf-8") for p in paths[::40]]


def caption_paragraphs(lang: str, n: int = 20) -> list[str]:
    """Multi30k captions, five to a paragraph: short documents in one language."""
    lines = Path(SHARED, "parallel", "multi30k", f"test_2016_flickr.{lang}").read_text(encoding="utf-8").splitlines()
    return [" ".join(lines[i : i + 5]) for i in range(0, 5 * n, 5)]


@needs_shared
@pytest.mark.parametrize("lang", ["en", "de", "fr"])
def test_lid176_identifies_language(lid176, lang):
    texts = english_documents() if lang == "en" else caption_paragraphs(lang)
    result = lid176.predict(texts)
    assert len(result) == len(texts)
    for text, (label, score) in zip(texts, result):
        assert label == lang and score > 0.65, (text[:80], label, score)


@needs_shared
@pytest.mark.parametrize("lang", ["de", "fr"])
def test_lid176_single_captions_mostly_right(lid176, lang):
    lines = Path(SHARED, "parallel", "multi30k", f"val.{lang}").read_text(encoding="utf-8").splitlines()[:300]
    labels = [label for label, _ in lid176.predict(lines)]
    assert labels.count(lang) / len(lines) > 0.95


@needs_shared
def test_lid176_mixed_list_keeps_order(lid176):
    en, de, fr = english_documents()[0], caption_paragraphs("de")[0], caption_paragraphs("fr")[0]
    result = lid176.predict([de, en, "", fr, de, en])
    assert [label for label, _ in result] == ["de", "en", "unknown", "fr", "de", "en"]


@needs_shared
def test_lid176_newlines_and_probability_bound(lid176):
    lines = Path(SHARED, "parallel", "multi30k", "val.de").read_text(encoding="utf-8").splitlines()[:8]
    [(label, score)] = lid176.predict(["\n".join(lines)])
    assert label == "de" and lid176.predict([" ".join(lines)]) == [(label, score)]
    # A sure prediction makes fastText return a probability a little above 1.
    [(sure_label, sure_score)] = lid176.predict(["Ein Mann mit einem Hut " * 50])
    assert sure_label == "de" and 0.99 < sure_score <= 1.0
