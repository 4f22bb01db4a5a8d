"""A dataset is no more readable by group or others than what it was built from: a corpus file only its owner
can read never becomes a world-readable shard, nor does anything built from that shard (storage.dataset)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from pipeline.config import Config
from pipeline.corpus import stage as corpus
from pipeline.corpus.config import CorpusConfig
from pipeline.init import stage as init
from pipeline.init.config import ModelConfig
from pipeline.stage import run_stage
from pipeline.tokenizer import stage as tokenizer
from storage import DatasetWriter
from tests.conftest import write_corpus


@pytest.fixture(autouse=True)
def umask_022():
    """The common umask, under which every new file was world-readable."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def modes(dataset: str) -> dict[str, int]:
    """Every file's and directory's permission bits in a dataset, by path relative to it."""
    found = {".": stat.S_IMODE(os.stat(dataset).st_mode)}
    for p in Path(dataset).rglob("*"):
        found[str(p.relative_to(dataset))] = stat.S_IMODE(p.lstat().st_mode)
    return found


def build_corpus(docs: Path, artifacts: Path) -> str:
    return run_stage(corpus.STAGE, corpus.config(Config(corpus=CorpusConfig(sources=[str(docs)]))), {}, str(artifacts))


def build_tokenizer(documents: str, artifacts: Path) -> str:
    return run_stage(
        tokenizer.STAGE,
        {"base": None, "vocab_size": 300, "min_frequency": 2, "max_length": 64},
        {"corpus": documents},
        str(artifacts),
    )


def test_a_corpus_file_only_its_owner_reads_gives_shards_and_what_follows_only_the_owner_reads(tmp_path):
    docs = write_corpus(tmp_path / "docs", n_docs=4, n_words=60)
    os.chmod(docs / "doc002.txt", 0o600)  # one private file among public ones
    documents = build_corpus(docs, tmp_path / "artifacts")
    shards = [p for p in modes(documents) if p.startswith("part-")]
    assert shards and all(mode & 0o077 == 0 for mode in modes(documents).values()), modes(documents)
    # The tokenizer is trained on that text: a directory written by a library, private too.
    built = modes(build_tokenizer(documents, tmp_path / "artifacts"))
    assert len(built) > 3 and all(mode & 0o077 == 0 for mode in built.values()), built


def test_a_source_group_may_read_keeps_the_group_and_loses_others(tmp_path):
    docs = write_corpus(tmp_path / "docs", n_docs=3, n_words=60)
    os.chmod(docs, 0o750)
    built = modes(build_corpus(docs, tmp_path / "artifacts"))
    assert built["."] == 0o750 and all(mode & 0o007 == 0 and mode & 0o040 for mode in built.values()), built


def test_public_sources_leave_the_modes_to_the_umask(tmp_path):
    docs = write_corpus(tmp_path / "docs", n_docs=3, n_words=60)
    built = modes(build_corpus(docs, tmp_path / "artifacts"))
    assert built["."] == 0o755 and {mode for path, mode in built.items() if path != "."} == {0o644}, built
    os.umask(0o077)  # a private umask is kept, not widened to the sources'
    built = modes(build_corpus(write_corpus(tmp_path / "more", n_docs=2, n_words=60), tmp_path / "artifacts"))
    assert all(mode & 0o077 == 0 for mode in built.values()), built


def test_a_model_a_library_writes_0600_is_as_readable_as_the_umask_says(tmp_path):
    """safetensors writes every model.safetensors 0600; train's models are published as init's are."""
    documents = build_corpus(write_corpus(tmp_path / "docs", n_docs=3, n_words=60), tmp_path / "artifacts")
    model = ModelConfig(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, max_position_embeddings=66)
    built = run_stage(
        init.STAGE,
        model.model_dump(),
        {"tokenizer": build_tokenizer(documents, tmp_path / "artifacts")},
        str(tmp_path / "artifacts"),
    )
    found = modes(built)
    assert {"hf/model.safetensors", "sentence-transformers/model.safetensors"} <= found.keys()
    assert {mode for path, mode in found.items() if not Path(built, path).is_dir()} == {0o644}, found


def test_a_dataset_is_private_while_it_is_written(tmp_path):
    """Before its sources are all known, group and others cannot open what is written so far."""
    with DatasetWriter(str(tmp_path), "corpus", "f" * 16, config={}, inputs={}) as out:
        out.write([{"text": "x"}])
        assert stat.S_IMODE(os.stat(out.tmp).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "corpus" / ("f" * 16)).st_mode) == 0o755


def test_a_url_or_a_hub_name_among_the_sources_withholds_nothing(tmp_path):
    with DatasetWriter(str(tmp_path), "evaluate", "e" * 16, config={}, inputs={}) as out:
        out.built_from("https://example.com/corpus.txt", "org/model", str(tmp_path / "missing"))
        out.write([{"text": "x"}])
    assert stat.S_IMODE(os.stat(tmp_path / "evaluate" / ("e" * 16)).st_mode) == 0o755
