"""Translators on tiny FSMT and Marian models built here (random weights, real tokenizer files)."""

from __future__ import annotations

import importlib

import pytest
import torch

from pipeline.backtranslate.translate import FAIRSEQ_TO_HF, check_backend, load_translator
from pipeline.errors import InputError
from tests.translation_models import build_fsmt, build_marian, parallel_sentences

FAST = dict(max_new_tokens=6, batch_size=4)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def corpus():
    return parallel_sentences(300)


@pytest.fixture(scope="module")
def models(tmp_path_factory, corpus):
    en, de = corpus
    root = tmp_path_factory.mktemp("mt")
    return {
        "fsmt": build_fsmt(root / "fsmt-en-de", en, de),
        "fsmt-de-en": build_fsmt(root / "fsmt-de-en", de, en, langs=("de", "en"), seed=1),
        "marian": build_marian(root / "marian-en-de", en, de),
    }


def mixed_lengths(en: list[str]) -> list[str]:
    """Short, long and blank inputs interleaved, so length sorting really reorders them."""
    texts = []
    for i, s in enumerate(en[:40]):
        texts.append(" ".join(en[i : i + 1 + i % 4]) if i % 3 else s.split()[0])
    return texts[:20] + ["", "   "] + texts[20:]


@pytest.mark.parametrize("kind", ["fsmt", "marian"])
@pytest.mark.parametrize("num_beams", [1, 3])
def test_batched_output_in_input_order_equals_one_by_one(models, corpus, kind, num_beams):
    translator = load_translator("hf", str(models[kind]), num_beams=num_beams, **FAST)
    texts = mixed_lengths(corpus[0])
    batched = translator.translate(texts)
    one_by_one = [translator.translate([t])[0] for t in texts]
    assert len(batched) == len(texts)
    assert batched == one_by_one
    assert batched[20:22] == ["", ""]
    # Random weights, but the output depends on the input: a mix-up would show.
    assert len(set(batched)) > len(texts) // 2
    assert translator.translate(texts) == batched, "deterministic"
    assert translator.counts["empty"] == 2 * 3


@pytest.mark.parametrize("kind", ["fsmt", "marian"])
def test_sampling_is_reproducible_with_a_seed(models, corpus, kind):
    texts = corpus[0][:12]
    sample = dict(do_sample=True, top_k=20, temperature=1.5, num_beams=1, **FAST)
    first = load_translator("hf", str(models[kind]), seed=7, **sample)
    again = load_translator("hf", str(models[kind]), seed=7, **sample)
    other = load_translator("hf", str(models[kind]), seed=8, **sample)
    greedy = load_translator("hf", str(models[kind]), num_beams=1, **FAST)
    out = first.translate(texts)
    assert out == first.translate(texts) == again.translate(texts)
    assert out != other.translate(texts)
    assert out != greedy.translate(texts)


@pytest.mark.parametrize("kind", ["fsmt", "marian"])
def test_long_inputs_are_truncated_and_counted(models, corpus, kind):
    translator = load_translator("hf", str(models[kind]), num_beams=1, **FAST)
    assert translator.max_input_tokens == 64  # the tiny models' position limit
    long = " ".join(corpus[0][:20])
    longer = long + " " + " ".join(corpus[0][20:40])
    out = translator.translate([corpus[0][0], long, longer])
    assert translator.counts["truncated"] == 2
    # Both keep the same first 63 tokens (and </s>), so greedy decoding says the same.
    assert out[1] == out[2]
    tight = load_translator("hf", str(models[kind]), num_beams=1, max_input_tokens=8, **FAST)
    tight.translate([s for s in corpus[0] if len(s.split()) >= 8][:10])
    assert tight.max_input_tokens == 8 and tight.counts["truncated"] == 10


def test_a_round_trip_does_not_depend_on_batching(models, corpus):
    forward = load_translator("hf", str(models["fsmt"]), num_beams=2, **FAST)
    backward = load_translator("hf", str(models["fsmt-de-en"]), num_beams=2, **FAST)
    texts = corpus[0][:10] + [""]
    back = backward.translate(forward.translate(texts))
    assert len(back) == len(texts) and back[-1] == ""
    assert back[:3] == [backward.translate(forward.translate([t]))[0] for t in texts[:3]]
    assert forward.counts["translated"] == backward.counts["translated"] == 10 + 3


def test_bfloat16_runs(models, corpus):
    translator = load_translator("hf", str(models["fsmt"]), dtype="bfloat16", num_beams=1, **FAST)
    assert translator.model.dtype == torch.bfloat16
    assert len(translator.translate(corpus[0][:5])) == 5


def test_missing_or_broken_model_directory_is_an_input_error(tmp_path):
    missing = tmp_path / "no" / "such-model"
    with pytest.raises(InputError, match=str(missing)):
        load_translator("hf", str(missing))
    empty = tmp_path / "empty-model"
    empty.mkdir()
    with pytest.raises(InputError, match=f"cannot load translation model {empty}"):
        load_translator("hf", str(empty))


def test_bad_options_are_input_errors(models):
    with pytest.raises(InputError, match="num_beam"):
        load_translator("hf", str(models["fsmt"]), num_beam=4)
    with pytest.raises(InputError, match="dtype 'float8'"):
        load_translator("hf", str(models["fsmt"]), dtype="float8")
    with pytest.raises(InputError, match="unknown translation backend 'ctranslate2'"):
        check_backend("ctranslate2", "x")
    with pytest.raises(InputError, match="use facebook/wmt19-de-en"):
        check_backend("hf", "transformer.wmt19.de-en")


def test_fairseq_backend_names_the_hf_alternative():
    try:
        importlib.import_module("fairseq")
    except Exception:
        pass
    else:
        pytest.skip("fairseq imports here")
    for fairseq_name, hf_name in [
        ("transformer.wmt19.en-de", "facebook/wmt19-en-de"),
        ("transformer.wmt19.ru-en.single_model", "facebook/wmt19-ru-en"),
    ]:
        with pytest.raises(InputError) as err:
            check_backend("fairseq", fairseq_name)
        message = str(err.value)
        assert "fairseq is missing or broken" in message and "backend 'hf'" in message
        assert f"model {hf_name}" in message
        assert all(name in message for name in set(FAIRSEQ_TO_HF.values()))
    with pytest.raises(InputError, match="backend 'hf'"):
        load_translator("fairseq", "transformer.wmt19.de-en")
