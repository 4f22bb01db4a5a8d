"""Sentence segmentation of documents, offline: rules, no model to download.

A sentence ends at . ! ? or … followed, after any closing quotes or brackets,
by whitespace; except after a known abbreviation (Dr., e.g.), an initial
(J. R. R. Tolkien) or a dotted acronym (U.S.), or when the next word starts in
lower case, a digit, or , ; : (a question inside a sentence). Every line break ends
a sentence too: the corpora here (OpenWebText, Wikipedia, WikiText) put one
paragraph on a line. Boundaries fall on whitespace only, so the segments,
whitespace-collapsed and joined with single spaces, give back the document
with its whitespace collapsed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator

import numpy as np

# Sentences shorter than this are left out wherever sentences are read from documents, unless a stage sets its own
# (augment.min_chars, backtranslate.min_chars).
MIN_SENTENCE_CHARS = 20

# Words that (almost) never end a sentence, in lower case without the final dot. Dotted
# ones (e.g., i.e., U.S.) are recognised by their shape, and "No. 5", "Fig. 3" by the digit.
ABBREVIATIONS = frozenset(
    """
mr mrs ms messrs dr prof rev hon sr jr st mt ft gen col lt capt cmdr adm sgt maj gov sen rep pres supt
cf viz vs al approx ca esp dept univ assn bros inc ltd co corp jan feb mar apr jun jul aug sep sept oct nov dec
""".split()
)

# End punctuation, then closing quotes/brackets, then whitespace (not consumed).
_END = re.compile(r"""[.!?…]+["'”’»)\]]*(?=\s)""")
_LINE = re.compile(r"[^\n\r\u2028\u2029]+")
_WORD_BEFORE = re.compile(r"[\w.]*$")
_INITIAL_OR_ACRONYM = re.compile(r"[A-Z]|(?:[A-Za-z]\.)+[A-Za-z]")
_NEXT = re.compile(r"\s+(\S)")


def segments(text: str) -> list[tuple[int, int]]:
    """(start, end) character offsets of the sentences of `text`: in order, disjoint, whitespace trimmed."""
    spans = []
    for line in _LINE.finditer(text):
        start = line.start()
        for end in _ends(line.group()):
            spans.append((start, line.start() + end))
            start = line.start() + end
        spans.append((start, line.end()))
    return [trimmed for span in spans if (trimmed := _trim(text, *span))]


def sentences(text: str) -> list[str]:
    """The sentences of `text`, each with its whitespace collapsed (line-wrapped text becomes one line)."""
    return [" ".join(text[s:e].split()) for s, e in segments(text)]


def segment_id(doc_id: str, index: int) -> str:
    """A stable id for the index-th segment of a document; ids of one document sort in order."""
    return f"{doc_id}-{index:05d}"


def document_sentences(
    docs: Iterable[tuple[str, str]],
    min_chars: int,
    limit: int | None,
    count: Callable[[str], None],
    seed: int | None = None,
) -> Iterator[dict]:
    """Rows (doc_id, segment_id, start, end, text) of the documents' sentences of at least `min_chars`
    characters; with a `limit`, the first `limit` of them, or with a `seed` too, `limit` drawn uniformly from all
    of them (a reservoir, so memory holds `limit`), in the corpus's order: the first N of a corpus in document
    order are its first documents only. `count` hears of each one left out and why."""
    return drawn(_sentences(docs, min_chars, count), limit, count, seed)


def drawn(rows: Iterable[dict], limit: int | None, count: Callable[[str], None], seed: int | None) -> Iterator[dict]:
    """`rows` as `document_sentences` draws them: all, the first `limit`, or `limit` drawn from `seed`."""
    if limit is None:
        yield from rows
        return
    if seed is None:
        for taken, row in enumerate(rows):
            if taken < limit:
                yield row
            else:
                count("over_max_sentences")
        return
    rng, reservoir = np.random.default_rng(seed), []
    for seen, row in enumerate(rows):  # Vitter's algorithm R
        if seen < limit:
            reservoir.append((seen, row))
        else:
            count("over_max_sentences")
            if (slot := int(rng.integers(seen + 1))) < limit:
                reservoir[slot] = (seen, row)
    yield from (row for _, row in sorted(reservoir, key=lambda entry: entry[0]))


def unit_sentences(min_chars: int, docs: list[tuple[str, str]]) -> tuple[list[dict], int]:
    """A unit of documents' sentences of at least `min_chars` characters, and how many were shorter: what a
    worker returns (`pipeline.corpus.sentences`), drawing nothing at random."""
    short: list[str] = []
    return list(_sentences(docs, min_chars, short.append)), len(short)


def _sentences(docs: Iterable[tuple[str, str]], min_chars: int, count: Callable[[str], None]) -> Iterator[dict]:
    for doc, text in docs:
        for i, (start, end) in enumerate(segments(text)):
            if end - start < min_chars:
                count("short_sentence")
            else:
                yield {
                    "doc_id": doc,
                    "segment_id": segment_id(doc, i),
                    "start": start,
                    "end": end,
                    "text": " ".join(text[start:end].split()),
                }


def _ends(line: str) -> list[int]:
    ends = []
    for m in _END.finditer(line):
        nxt = _NEXT.match(line, m.end())
        if nxt is None:  # only trailing whitespace: the line's end closes the sentence anyway
            break
        first = nxt.group(1)
        if first.islower() or first.isdigit() or first in ",;:":
            continue
        if m.group().startswith(".") and not m.group().startswith(".."):
            # A bounded look back: searching from the line's start would be quadratic in its length.
            word = _WORD_BEFORE.search(line, max(0, m.start() - 32), m.start()).group()
            if word.lower() in ABBREVIATIONS or _INITIAL_OR_ACRONYM.fullmatch(word):
                continue
        ends.append(m.end())
    return ends


def _trim(text: str, start: int, end: int) -> tuple[int, int] | None:
    piece = text[start:end]
    stripped = piece.strip()
    if not stripped:
        return None
    start += len(piece) - len(piece.lstrip())
    return start, start + len(stripped)
