"""The sentence objectives' drawn sentences kept on disk (pipeline.objectives.stored): read back in any order, across
the batches they were written in and the chunks they are read in, they are the sentences given, with their token
ids and Moses words, and their files are gone after."""

from __future__ import annotations

import numpy as np
from sacremoses import MosesTokenizer

from pipeline.objectives import stored as store
from pipeline.parallel import Spread
from tests.conftest import make_document


def test_sentences_read_back_in_any_order_are_the_ones_given(tokenizer, tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    given = [
        {"doc_id": f"d{i // 7}", "segment_id": f"d{i // 7}-{i}", "start": 0, "end": 1, "text": make_document(rng, 9)}
        for i in range(300)
    ]
    monkeypatch.setattr(store, "UNIT_CHARS", 1_000)  # about 20 batches
    monkeypatch.setattr(store, "CHUNK", 64)  # and several chunks an order
    monkeypatch.setattr(store.tempfile, "tempdir", str(tmp_path))
    order = rng.permutation(len(given))
    split = MosesTokenizer(lang="en")
    with store.stored(iter(given), tokenizer, Spread(), words=True) as rows:
        assert len(rows) == len(given) and list(rows.column("text")) == [g["text"] for g in given]
        assert list(tmp_path.iterdir())  # spilled to disk, not held
        read = list(rows.read(order, ["segment_id", "doc_id", "text", "ids", "words"]))
    assert read == [
        (
            given[k]["segment_id"],
            given[k]["doc_id"],
            given[k]["text"],
            tokenizer(given[k]["text"], add_special_tokens=False)["input_ids"],
            split.tokenize(given[k]["text"], escape=False),
        )
        for k in order
    ]
    assert not list(tmp_path.iterdir())
