import pytest

from pipeline import corpus, filter, tokenizer
from pipeline.filter import FilterError
from pipeline.stage import run_stage
from storage import read_manifest, read_table
from tests.conftest import make_document

import numpy as np


@pytest.fixture
def stages(tmp_path):
    rng = np.random.default_rng(0)
    root = tmp_path / "in"
    root.mkdir()
    long_doc = make_document(rng, 300)
    (root / "long.txt").write_text(long_doc)
    (root / "long-copy.txt").write_text("  " + long_doc.upper().replace(" ", "\n "))  # same text, other case/space
    (root / "other-long.txt").write_text(make_document(rng, 300))
    (root / "short.txt").write_text(make_document(rng, 10))
    art = str(tmp_path / "artifacts")
    docs = run_stage(corpus, corpus.stage_config([str(root)], None), {}, art)
    tok = run_stage(tokenizer, {"base": None, "vocab_size": 300, "min_frequency": 2, "max_length": 64},
                    {"corpus": docs}, art)

    def run(**config):
        return run_stage(filter, {"min_tokens": 100, "dedup": True, **config}, {"corpus": docs, "tokenizer": tok}, art)
    return run


def test_keeps_long_documents_once_and_counts_the_rest(stages):
    path = stages()
    table = read_table(path)
    assert sorted(table.column("title_or_url").to_pylist())[0] in {"long", "long-copy"}
    assert table.num_rows == 2
    assert min(table.column("n_tokens").to_pylist()) >= 100
    assert read_manifest(path)["counts"] == {"too_short": 1, "duplicate": 1, "kept": 2}


def test_dedup_can_be_turned_off(stages):
    assert read_table(stages(dedup=False)).num_rows == 3


def test_no_document_long_enough_says_how_many_and_the_longest(stages):
    with pytest.raises(FilterError, match=r"no document has at least 100000 tokens: saw 4 documents, the longest has \d+"):
        stages(min_tokens=100_000)
