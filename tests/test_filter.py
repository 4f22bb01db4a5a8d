import random

import pytest

from pipeline.config import Config
from pipeline.corpus import stage as corpus
from pipeline.corpus.config import CorpusConfig
from pipeline.filter import stage as filter
from pipeline.filter.config import FilterConfig
from pipeline.filter.stage import FilterError
from pipeline.stage import run_stage
from pipeline.tokenizer import stage as tokenizer
from storage import read_manifest, read_table
from tests.helpers import DE_WORDS, EN_WORDS, sentence


def document(rng: random.Random, words: list[str], n_sentences: int = 40) -> str:
    return " ".join(sentence(rng, words).capitalize() + "." for _ in range(n_sentences))


@pytest.fixture(scope="module")
def stages(tmp_path_factory, lid_model):
    rng = random.Random(0)
    root = tmp_path_factory.mktemp("filter") / "in"
    root.mkdir()
    english = document(rng, EN_WORDS)
    words = english.split()
    near = " ".join(w if i % 60 else "banana" for i, w in enumerate(words))  # 1 word in 60 changed
    # corpus order is file-name order: the copies come after the original they repeat
    files = {
        "en-1": english,
        "zz-copy": "  " + english.upper().replace(" ", "\n "),
        "zz-near": near,
        "en-2": document(rng, EN_WORDS),
        "en-3": document(rng, EN_WORDS),
        "de-1": document(rng, DE_WORDS),
        "en-short": document(rng, EN_WORDS, 2),
    }
    for name, text in files.items():
        (root / f"{name}.txt").write_text(text)
    art = str(tmp_path_factory.mktemp("artifacts"))
    docs = run_stage(corpus.STAGE, corpus.config(Config(corpus=CorpusConfig(sources=[str(root)]))), {}, art)
    tok = run_stage(
        tokenizer.STAGE, {"base": None, "vocab_size": 300, "min_frequency": 2, "max_length": 64}, {"corpus": docs}, art
    )

    def run(runtime: dict | None = None, **overrides):
        config = FilterConfig(**{"min_tokens": 100, "langid_model": lid_model, **overrides}).model_dump()
        return run_stage(filter.STAGE, {**config, "runtime": runtime or {}}, {"corpus": docs, "tokenizer": tok}, art)

    return run


def kept(path) -> list[str]:
    return sorted(read_table(path).column("title_or_url").to_pylist())


def test_keeps_long_documents_once_and_counts_the_rest(stages):
    path = stages()
    assert kept(path) == ["de-1", "en-1", "en-2", "en-3", "zz-near"]
    assert min(read_table(path).column("n_tokens").to_pylist()) >= 100
    counts = read_manifest(path)["counts"]
    assert counts["too_short"] == 1 and counts["duplicate"] == 1 and counts["kept"] == 5


def test_dedup_can_be_turned_off(stages):
    assert len(kept(stages(dedup=False))) == 6


def test_language_filter_keeps_english_and_drops_german(stages):
    path = stages(language="en")
    assert kept(path) == ["en-1", "en-2", "en-3", "zz-near"]
    assert read_manifest(path)["counts"]["language"] == 1
    table = read_table(path)
    assert set(table.column("lang").to_pylist()) == {"en"}
    assert min(table.column("lang_score").to_pylist()) >= 0.65


def test_near_duplicates_are_dropped_when_asked(stages):
    path = stages(near_dedup=True)
    assert kept(path) == ["de-1", "en-1", "en-2", "en-3"]
    assert read_manifest(path)["counts"]["near_duplicate"] == 1


@pytest.mark.slow  # worker processes
@pytest.mark.parametrize("backend", ["processes"])
def test_parallel_run_writes_the_same_documents(stages, backend):
    serial = read_table(stages(language="en", near_dedup=True))
    parallel_path = stages(runtime={"backend": backend, "workers": 2}, language="en", near_dedup=True)
    # runtime settings are not part of the fingerprint: the same dataset is reused ...
    assert read_table(parallel_path).equals(serial)
    # ... so rebuild it under another fingerprint to compare a real parallel run
    rebuilt = read_table(
        stages(runtime={"backend": backend, "workers": 2}, language="en", near_dedup=True, shard_mb=255)
    )
    assert rebuilt.equals(serial)


def test_no_document_long_enough_says_how_many_and_the_longest(stages):
    with pytest.raises(
        FilterError, match=r"no document has at least 100000 tokens: saw 7 documents, the longest has \d+"
    ):
        stages(min_tokens=100_000)


def test_nothing_in_the_wanted_language_names_the_drops(stages):
    with pytest.raises(
        FilterError,
        match=r"no document kept: of 7 documents, dropped 1 duplicate, 5 language, 1 too short \(language wanted: fr\)",
    ):
        stages(language="fr")
