"""A passage of megabytes in a retrieval corpus (a dump run into one record) is read cut to what an encoder could
ever read, with a warning naming its line: each encoder tokenized the whole text (a 50 MB line took over 300 s
and 4 GB)."""

from __future__ import annotations

import logging

from pipeline.evaluate import retrieval
from tests.test_task_kinds import write_beir


def test_a_passage_of_megabytes_is_cut_to_max_chars_with_a_warning_naming_its_line(tmp_path, caplog):
    huge = " ".join(f"word{i % 997}" for i in range(600_000))  # about 4.6 MB
    assert len(huge) > 40 * retrieval.MAX_CHARS
    root = write_beir(
        tmp_path / "task",
        [("p1", "", "a short passage"), ("p2", "Huge", huge), ("p3", "", "another")],
        [("q1", "a short query")],
        [("q1", "p1", 1)],
    )
    with caplog.at_level(logging.WARNING, logger="cpipe"):
        data = retrieval.read(root).data
    assert data.passage_ids == ["p1", "p2", "p3"]
    assert data.passages[1] == ("Huge " + huge)[: retrieval.MAX_CHARS]
    assert data.passages[0] == "a short passage" and data.passages[2] == "another"  # the others as they are
    warned = [r.getMessage() for r in caplog.records if "longer than" in r.getMessage()]
    assert len(warned) == 1 and "corpus.jsonl.gz: 1 text longer than 100,000 characters" in warned[0]
    assert "line 2" in warned[0]
