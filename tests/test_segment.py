"""Sentence segmentation: hard cases by hand, and the offset/round-trip properties on real and made-up text."""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np
import pytest

from pipeline.corpus.segment import segment_id, segments, sentences
from tests.conftest import SHARED


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "Dr. Smith met Mrs. Jones at St. Paul's. They talked.",
            ["Dr. Smith met Mrs. Jones at St. Paul's.", "They talked."],
        ),
        (
            "Some fruits, e.g. apples, are red. Others, i.e. the rest, are not.",
            ["Some fruits, e.g. apples, are red.", "Others, i.e. the rest, are not."],
        ),
        ("Pi is 3.14 roughly. It costs $2.50 today.", ["Pi is 3.14 roughly.", "It costs $2.50 today."]),
        (
            "J. R. R. Tolkien wrote it. H. americanus is a lobster.",
            ["J. R. R. Tolkien wrote it.", "H. americanus is a lobster."],
        ),
        (
            "The U.S. Senate met at 5 p.m. on Friday. It adjourned.",
            ["The U.S. Senate met at 5 p.m. on Friday.", "It adjourned."],
        ),
        (
            'He said "Stop." Then he left. "Why?" she asked. (It was late.) Nobody knew!',
            ['He said "Stop."', "Then he left.", '"Why?" she asked.', "(It was late.)", "Nobody knew!"],
        ),
        ("Is it? Yes! Really... Maybe.", ["Is it?", "Yes!", "Really...", "Maybe."]),
        ("See No. 5 and Fig. 3 in Vol. 2 of the report.", ["See No. 5 and Fig. 3 in Vol. 2 of the report."]),
        (
            "Title line\n\nFirst paragraph. Second sentence.\nNext paragraph without a stop\n",
            ["Title line", "First paragraph.", "Second sentence.", "Next paragraph without a stop"],
        ),
        ("no punctuation at all just words", ["no punctuation at all just words"]),
        ("Wikitext spacing , like this . Next one .", ["Wikitext spacing , like this .", "Next one ."]),
        ("", []),
        (" \n\t \n", []),
    ],
)
def test_hard_cases(text, expected):
    assert sentences(text) == expected


def check_offsets(text: str) -> list[tuple[int, int]]:
    spans = segments(text)
    for (s, e), nxt in zip(spans, spans[1:] + [(len(text), len(text))]):
        assert 0 <= s < e <= nxt[0], "in order, disjoint, non-empty"
        assert not text[s].isspace() and not text[e - 1].isspace(), "whitespace trimmed"
    # Boundaries fall on whitespace only: nothing is lost, nothing is cut inside a word.
    assert " ".join(text[s:e] for s, e in spans).split() == text.split()
    assert " ".join(sentences(text)) == " ".join(text.split())
    return spans


def made_up_documents(n: int = 40, seed: int = 0) -> list[str]:
    """Sentences full of abbreviations, numbers and quotes, glued with assorted whitespace."""
    rng = np.random.default_rng(seed)
    parts = [
        "Dr.",
        "Smith",
        "e.g.",
        "3.14",
        "J.",
        "R.",
        "Tolkien",
        '"Yes!"',
        "(maybe.)",
        "U.S.",
        "and",
        "the",
        "Washington",
        "No.",
        "5",
        "went",
        "home",
        "it",
        "...",
        "?",
        "etc.",
        "Mr.",
        "x",
        "é",
        "—",
    ]
    spaces = [" ", " ", " ", "  ", "\t", "\n", "\n\n", "\u00a0", " \r\n", "\u2009"]
    docs = []
    for _ in range(n):
        words = rng.choice(parts, size=int(rng.integers(0, 200)))
        docs.append("".join(w + str(rng.choice(spaces)) for w in words))
    return docs


def test_offsets_round_trip_on_made_up_text():
    for doc in made_up_documents():
        check_offsets(doc)


def real_or_made_documents() -> list[str]:
    if SHARED and (sotu := Path(SHARED) / "corpus" / "sotu").is_dir():
        return [p.read_text(encoding="utf-8") for p in sorted(sotu.glob("*.txt"))[::10]]
    rng = np.random.default_rng(1)
    sentence = lambda: " ".join(
        rng.choice(
            [
                "we",
                "the",
                "nation",
                "Congress",
                "Mr. Adams",
                "grew",
                "by",
                "3.5",  # noqa: E731
                "percent",
                "in",
                "the U.S. economy",
            ],
            size=int(rng.integers(4, 30)),
        )
    )
    return [" ".join(sentence().capitalize() + "." for _ in range(200)) for _ in range(5)]


def test_real_documents():
    """The State of the Union addresses (every tenth) when the shared data is there, else text made here."""
    for doc in real_or_made_documents():
        spans = check_offsets(doc)
        texts = [doc[s:e] for s, e in spans]
        words = [len(t.split()) for t in texts]
        assert 10 <= statistics.median(words) <= 60, "sentence-sized segments"
        assert not any(t.endswith(("Mr.", "Mrs.", "Dr.", "St.")) for t in texts), "no split after a title"
        assert sum(t[0].islower() for t in texts) <= 0.01 * len(texts), "segments start sentences"


def test_segment_ids_name_their_document_and_sort_in_order():
    ids = [segment_id("owt-0001-a", i) for i in range(12)]
    assert len(set(ids)) == 12 and all(s.startswith("owt-0001-a-") for s in ids)
    assert sorted(ids) == ids
