"""BEIR's layout, read: a retrieval task's directory holds `corpus.jsonl` (`_id`, `text`, optional `title`),
`queries.jsonl` (`_id`, `text`) and `qrels/<split>.tsv` (`query-id`, `corpus-id`, `score`, tab-separated, with a
header line); each file may be gzipped (`.gz`). A passage is its title and text joined by a space (stripped); a
query-passage pair is relevant when its qrels score is above 0; queries without a relevant passage are left out, and
judgements of queries that queries.jsonl lacks are left out with a warning. A corpus whose every passage is relevant
to every query (one passage, say) is refused: any model ranks it perfectly. pipeline.evaluate.retrieval scores what
this reads."""

from __future__ import annotations

import csv
import gzip
from dataclasses import dataclass
from pathlib import Path

from pipeline.file_snapshot import rglob
from pipeline.jsonlines import json_objects
from pipeline.readers.sts import EvalDataError, text_file
from pipeline.readers.warn import warn_once

SPLIT = "test"
QRELS_HEADER = ("query-id", "corpus-id", "score")
PARTS = ("corpus.jsonl", "queries.jsonl", "qrels")
EXAMPLES = 3  # ids a warning names
# A passage or query is cut to its first MAX_CHARS characters as it is read. No encoder reads that far (a transformer
# stops at evaluate.max_length tokens, a few thousand characters at most), but each would tokenize the whole text: a
# 50 MB line (a dump run into one record) took over 300 s and 4 GB.
MAX_CHARS = 100_000


@dataclass(frozen=True)
class Data:
    passage_ids: list[str]
    passages: list[str]
    query_ids: list[str]
    queries: list[str]
    relevant: dict[str, set[str]]  # query id -> relevant passage ids, for the queries that have one


def _file(directory: Path, name: str) -> Path | None:
    return next((p for p in (directory / name, directory / f"{name}.gz") if p.is_file()), None)


def _id(value, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise EvalDataError(f"{where}: _id is {value!r}, not a string")
    return str(value)


def _texts(path: Path, title: bool) -> tuple[list[str], list[str]]:
    ids, texts, seen, cut = [], [], set(), []
    with text_file(path) as f:
        for lineno, record in json_objects(f, path, EvalDataError):
            where = f"{path}:{lineno}"
            _id_ = _id(record.get("_id"), where)
            text, head = record.get("text"), (record.get("title") or "") if title else ""
            if not isinstance(text, str):
                raise EvalDataError(f"{where}: text is {text!r}, not a string")
            if not isinstance(head, str):
                raise EvalDataError(f"{where}: title is {head!r}, not a string")
            if not title and not text.strip():  # a passage may be its title alone
                raise EvalDataError(f"{where}: query {_id_!r} has an empty text")
            if _id_ in seen:
                raise EvalDataError(f"{where}: _id {_id_!r} appears twice")
            seen.add(_id_)
            ids.append(_id_)
            texts.append((head + " " + text).strip() if title else text)
            if len(texts[-1]) > MAX_CHARS:
                texts[-1] = texts[-1][:MAX_CHARS]
                cut.append(f"line {lineno}")
    if cut:
        warn_once(
            f"{path}: {len(cut)} text{'s' if len(cut) > 1 else ''} longer than {MAX_CHARS:,} characters "
            f"cut to them ({', '.join(cut[:EXAMPLES])}{', ...' if len(cut) > EXAMPLES else ''}); no "
            "encoder reads that far"
        )
    return ids, texts


def _qrels(path: Path) -> dict[str, set[str]]:
    relevant: dict[str, set[str]] = {}
    with text_file(path) as f:
        lines = csv.reader(f, delimiter="\t")
        header = next(lines, None)
        if header is None or tuple(h.strip() for h in header) != QRELS_HEADER:
            raise EvalDataError(f"{path}:1: expected the header {' '.join(QRELS_HEADER)} (tab-separated)")
        for fields in lines:
            where = f"{path}:{lines.line_num}"
            if not fields:
                continue
            if len(fields) != 3:
                raise EvalDataError(f"{where}: expected query-id<TAB>corpus-id<TAB>score")
            try:
                grade = float(fields[2])
            except ValueError:
                raise EvalDataError(f"{where}: score {fields[2]!r} is not a number") from None
            if grade > 0:
                relevant.setdefault(fields[0], set()).add(fields[1])
    return relevant


def _parts(directory: Path, split: str) -> tuple[Path | None, Path | None, Path | None]:
    return (
        _file(directory, "corpus.jsonl"),
        _file(directory, "queries.jsonl"),
        _file(directory / "qrels", f"{split}.tsv"),
    )


def _absent(qrels: Path, relevant: dict[str, set[str]], passage_ids: list[str]) -> None:
    """Relevant passages missing from the corpus can never be ranked, so they lower every metric (nDCG to 0 when
    all are missing) while the evaluator still counts them, as sentence-transformers' and BEIR's do: a warning
    naming some, or an error when the corpus holds none of them."""
    corpus = set(passage_ids)
    judged = [p for ids in relevant.values() for p in sorted(ids)]
    absent = [p for p in judged if p not in corpus]
    if absent and len(absent) == len(judged):
        raise EvalDataError(
            f"{qrels}: none of its {len(judged)} relevant corpus-ids is in the corpus "
            f"(e.g. {', '.join(map(repr, absent[:EXAMPLES]))}); the qrels belong to another corpus"
        )
    if absent:
        warn_once(
            f"{qrels}: {len(absent)} of its {len(judged)} relevant corpus-ids are not in the corpus "
            f"(e.g. {', '.join(map(repr, absent[:EXAMPLES]))}); they count as relevant passages never "
            "retrieved, lowering the scores"
        )


def read(directory: Path, split: str = SPLIT) -> tuple[tuple[str, ...], Data]:
    """The task in `directory`, its queries those of qrels/<split>.tsv (train.select_by reads the dev split): the
    files it was read from and what they hold."""
    corpus, queries, qrels = _parts(directory, split)
    if corpus is None or queries is None or qrels is None:
        missing = next(
            name
            for name, part in zip(("corpus.jsonl", "queries.jsonl", f"qrels/{split}.tsv"), (corpus, queries, qrels))
            if part is None
        )
        raise EvalDataError(f"{directory}: a retrieval task (BEIR's layout) without {missing}")
    try:
        passage_ids, passages = _texts(corpus, title=True)
        query_ids, query_texts = _texts(queries, title=False)
        relevant = _qrels(qrels)
    except (UnicodeDecodeError, gzip.BadGzipFile, EOFError, OSError, csv.Error) as e:
        raise EvalDataError(f"{directory}: cannot read ({e})") from None
    kept = [i for i, q in enumerate(query_ids) if relevant.get(q)]
    if not kept:
        raise EvalDataError(f"{qrels}: no query of {queries.name} has a relevant passage (a score above 0)")
    if not passages:
        raise EvalDataError(f"{corpus}: no passage")
    if unknown := sorted(set(relevant) - set(query_ids)):
        warn_once(
            f"{qrels}: {len(unknown)} of its {len(relevant)} query-ids with a relevant passage are not in "
            f"{queries.name} (e.g. {', '.join(map(repr, unknown[:EXAMPLES]))}); their judgements are left out"
        )
    data = Data(
        passage_ids,
        passages,
        [query_ids[i] for i in kept],
        [query_texts[i] for i in kept],
        {query_ids[i]: relevant[query_ids[i]] for i in kept},
    )
    _absent(qrels, data.relevant, passage_ids)
    every = set(passage_ids)
    if all(every <= data.relevant[q] for q in data.query_ids):  # a corpus of one passage, say
        raise EvalDataError(
            f"{corpus}: all {len(every)} of its passages are relevant to every query, so that every ranking, and every "
            "model, scores the same; a retrieval task needs passages that a query should not find"
        )
    return tuple(map(str, (corpus, queries, qrels))), data


def _has(directory: Path, part: str) -> bool:
    return (directory / part).is_dir() if part == "qrels" else _file(directory, part) is not None


def directories(data_dir: Path) -> list[Path]:
    """Every directory under data_dir holding two of BEIR's three parts (corpus, queries, a qrels directory): a
    folder that lacks the third is an error (read's) naming it, not a task skipped without a word. One part alone is
    no retrieval task (pipeline.evaluate.kinds names what no task reads)."""
    names = ("corpus.jsonl", "corpus.jsonl.gz", "queries.jsonl", "queries.jsonl.gz", "qrels")
    found = sorted({p.parent for name in names for p in rglob(data_dir, name)})
    return [d for d in found if sum(_has(d, part) for part in PARTS) >= 2]
