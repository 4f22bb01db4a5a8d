"""Reading STS data: STS12-16 and STS-B in SentEval's file layout, SICK-R as distributed, and STS pair files
(MTEB's layout: sentence1, sentence2, score columns in CSV, TSV, JSONL or Parquet, optionally gzipped; one task
per file, named by the file's stem), into `StsSubset`s; a bad file or row is an error naming it.
pipeline.evaluate.sts scores them."""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from pipeline.config_base import unusable_name
from pipeline.errors import InputError
from pipeline.file_snapshot import rglob
from pipeline.jsonlines import json_objects
from pipeline.parquet_files import reading_parquet
from pipeline.readers import registry
from pipeline.readers.names import (
    PAIR_SUFFIXES,
    SENTEVAL_TABLES,
    SICK_TASK,
    STS_TASKS,
    STSB_FILES,
    kind_file,
    pair_format,
)

LEADERBOARD_SPLIT = "test"

_STSB_DIR = "STSBenchmark"
# Only test and dev are scored; train is read for SentEval's regressor, which is fitted on it.
SCORED_SPLITS = ("test", "dev")
SPLITS = (*SCORED_SPLITS, "train")
# SentEval's STSBenchmarkEval reads these 0-based columns; later ones are ignored.
_STSB_SCORE, _STSB_SENT1, _STSB_SENT2 = 4, 5, 6
# The SICK files as distributed for SemEval 2014 task 1 (SICK-R and SICK-E read the same files).
SICK_TEST = "SICK_test_annotated.txt"
SICK_FILES = {"train": "SICK_train.txt", "dev": "SICK_trial.txt", "test": SICK_TEST}
_SICK_HEADER = ["pair_ID", "sentence_A", "sentence_B", "relatedness_score", "entailment_judgment"]
# The gold scores' scales as the datasets define them: SemEval's STS guidelines score 0 to 5 (STS12-16, and STS-B
# drawn from them), SICK's relatedness 1 to 5. A score outside is a broken or mixed-up file, not a harder pair.
# STS pair files declare no scale (MTEB's are 0-5, others 0-4 or 1-4), so theirs are only required to be numbers.
STS_SCALE, SICK_SCALE = (0.0, 5.0), (1.0, 5.0)
# STS pair files: the columns MTEB's STS datasets use (their formats: names.PAIR_SUFFIXES).
PAIR_COLUMNS = ("sentence1", "sentence2", "score")


class EvalDataError(InputError):
    """Evaluation data is missing or malformed; the message names the path (and line)."""


class StsDataError(EvalDataError):
    """The STS data directory is missing or malformed; the message names the path."""


@dataclass(frozen=True)
class StsSubset:
    task: str
    name: str
    split: str
    sent1: list[str]
    sent2: list[str]
    gold: np.ndarray


def _task_dir(task: str) -> str:
    return _STSB_DIR if task == "STSB" else f"{task}-en-test"


# The names by which SentEval's STS tasks are found below an evaluation directory (SICK's files, STS-B's tables).
SENTEVAL_NAMES = frozenset((*map(_task_dir, STS_TASKS), *SICK_FILES.values(), *STSB_FILES.values()))


def _lines(path: Path, encodings: tuple[str, ...] = ("utf-8",)) -> list[str]:
    """The file's lines, decoded with the first of `encodings` that fits the whole file; an empty file is an error,
    not a task of no pairs."""
    data = path.read_bytes()
    if not data.strip():
        raise EvalDataError(f"{path}: empty file")
    for encoding in encodings:
        try:
            text = data.decode(encoding)
            break
        except UnicodeDecodeError as err:
            lineno = data.count(b"\n", 0, err.start) + 1
            if encoding == encodings[-1]:
                raise EvalDataError(f"{path}:{lineno}: not valid {' or '.join(encodings)}") from None
    # Split on newlines only: str.splitlines() would also break inside a
    # sentence at characters such as U+2028 and misalign sentences and scores.
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r") for line in lines]


def _float(value: str, path: Path, lineno: int, scale: tuple[float, float] | None = None) -> float:
    try:
        score = float(value)
    except ValueError:
        raise StsDataError(f"{path}:{lineno}: gold score {value!r} is not a number") from None
    if scale is not None and not scale[0] <= score <= scale[1]:  # NaN too
        raise StsDataError(
            f"{path}:{lineno}: gold score {value.strip()} is outside the task's range {scale[0]:g} to {scale[1]:g}"
        )
    return score


def _varied(subset: StsSubset, path: Path) -> StsSubset:
    """A subset whose gold scores all agree has no correlation (Spearman is NaN, the leaderboard's "-"): an error,
    as no model can score on it."""
    if len(subset.gold) > 1 and np.all(subset.gold == subset.gold[0]):
        raise StsDataError(
            f"{path}: all {len(subset.gold)} pairs have the gold score {subset.gold[0]:g}; "
            "a correlation needs scores that differ"
        )
    return subset


def _read_sts_subset(task: str, input_path: Path) -> StsSubset:
    name = input_path.name[len("STS.input.") : -len(".txt")]
    gs_path = input_path.with_name(f"STS.gs.{name}.txt")
    if not gs_path.is_file():
        raise StsDataError(f"{input_path} has no gold file {gs_path}")
    inputs, golds = _lines(input_path), _lines(gs_path)
    if len(inputs) != len(golds):
        raise StsDataError(f"{input_path} has {len(inputs)} lines but {gs_path} has {len(golds)}")
    sent1, sent2, gold = [], [], []
    for lineno, (line, g) in enumerate(zip(inputs, golds), start=1):
        fields = line.split("\t")
        if len(fields) < 2:
            raise StsDataError(f"{input_path}:{lineno}: expected sentence1<TAB>sentence2")
        # An empty gold line marks a pair the organisers did not score (SentEval skips it).
        if not g.strip():
            continue
        # SentEval's download script keeps columns 1-2 (cut -f1/-f2); extra ones are ignored alike.
        sent1.append(fields[0])
        sent2.append(fields[1])
        gold.append(_float(g, gs_path, lineno, STS_SCALE))
    subset = StsSubset(task, name, LEADERBOARD_SPLIT, sent1, sent2, np.asarray(gold, dtype=np.float64))
    return _varied(subset, gs_path)


def read_stsb_split(path: Path, split: str) -> StsSubset:
    # Plain tab splitting, not the csv module: sentences contain unbalanced quotes.
    sent1, sent2, gold = [], [], []
    for lineno, line in enumerate(_lines(path), start=1):
        fields = line.split("\t")
        if len(fields) <= _STSB_SENT2:
            raise StsDataError(
                f"{path}:{lineno}: expected at least {_STSB_SENT2 + 1} tab-separated columns, got {len(fields)}"
            )
        gold.append(_float(fields[_STSB_SCORE], path, lineno, STS_SCALE))
        sent1.append(fields[_STSB_SENT1])
        sent2.append(fields[_STSB_SENT2])
    return _varied(StsSubset("STSB", f"sts-{split}", split, sent1, sent2, np.asarray(gold, dtype=np.float64)), path)


def find_file(data_dir: Path, name: str) -> Path | None:
    """The one file (or directory) called `name`: data_dir itself (`--eval-data .../STSBenchmark`, one task's
    folder) or anywhere under it; None when there is none; two copies are an error, not a guess."""
    if data_dir.name == name:
        return data_dir
    found = sorted(rglob(data_dir, name))
    if len(found) > 1:
        raise EvalDataError(f"{name} is in several places under {data_dir}: {', '.join(map(str, found))}")
    return found[0] if found else None


def sick_rows(path: Path) -> list[tuple[int, list[str]]]:
    """(line number, fields) of a SICK file after its header, every row checked for all five columns."""
    lines = _lines(path)
    if not lines or lines[0].split("\t")[: len(_SICK_HEADER)] != _SICK_HEADER:
        raise EvalDataError(f"{path}:1: expected the header {' '.join(_SICK_HEADER)} (tab-separated)")
    rows = []
    for lineno, line in enumerate(lines[1:], start=2):
        fields = line.split("\t")
        if len(fields) < len(_SICK_HEADER):
            raise EvalDataError(
                f"{path}:{lineno}: expected {len(_SICK_HEADER)} tab-separated columns, got {len(fields)}"
            )
        rows.append((lineno, fields))
    return rows


def _read_sick(path: Path, split: str) -> StsSubset:
    rows = sick_rows(path)
    gold = np.asarray([_float(f[3], path, lineno, SICK_SCALE) for lineno, f in rows], dtype=np.float64)
    return _varied(StsSubset(SICK_TASK, path.stem, split, [f[1] for _, f in rows], [f[2] for _, f in rows], gold), path)


def _read_task(task: str, task_dir: Path) -> list[StsSubset]:
    if task == "STSB":
        test = task_dir / STSB_FILES["test"]
        if not test.is_file():
            raise StsDataError(f"{task_dir} has no {STSB_FILES['test']}")
        return [
            read_stsb_split(task_dir / STSB_FILES[split], split)
            for split in SPLITS
            if (task_dir / STSB_FILES[split]).is_file()
        ]
    inputs = sorted(task_dir.glob("STS.input.*.txt"))
    if not inputs:
        raise StsDataError(f"{task_dir} has no STS.input.*.txt files")
    return [_read_sts_subset(task, path) for path in inputs]


def task_name(name: str, source: Path) -> str:
    """`name`, the task that the file or directory `source` names (an STS pair file's stem, `<task>.<kind>.<format>`,
    a BEIR folder's name), checked as the config checks the names it is given (pipeline.config_base.unusable_name):
    it names the task's leaderboard column and its MTEB result file, which a newline split in two."""
    if why := unusable_name(name):
        raise EvalDataError(f"{source.parent}: {source.name!r} names the task {name!r}, which is no usable name: {why}")
    return name


def pair_task(path: Path) -> str:
    """The task a pair file is scored as: its name without the format suffixes (sts12-sts.jsonl.gz -> sts12-sts)."""
    return task_name(
        path.name[: -len("".join(path.suffixes[-2:] if path.suffix == ".gz" else path.suffixes[-1:]))], path
    )


def text_file(path: Path) -> io.TextIOBase:
    return (
        gzip.open(path, "rt", encoding="utf-8", newline="")
        if path.suffix == ".gz"
        else open(path, encoding="utf-8", newline="")
    )


def records(path: Path, fmt: str, columns: tuple[str, ...] = PAIR_COLUMNS):
    """(where, record) for each row: where is "path:line" for text files, "path: row N" for Parquet. Every
    task kind's table files (pipeline.evaluate.kinds) are read by it too."""
    if fmt == ".parquet":
        with reading_parquet(path, StsDataError):
            table = pq.read_table(path)
        missing = [c for c in columns if c not in table.column_names]
        if missing:
            raise StsDataError(f"{path}: no column(s) {', '.join(missing)} (columns: {', '.join(table.column_names)})")
        for row, record in enumerate(table.select(list(columns)).to_pylist(), start=1):
            yield f"{path}: row {row}", record
        return
    with text_file(path) as f:
        if fmt == ".jsonl":
            for lineno, record in json_objects(f, path, StsDataError):
                yield f"{path}:{lineno}", record
            return
        # Quoted as the csv module and pandas write them, so a sentence may hold the delimiter or a newline.
        reader = csv.DictReader(f, delimiter="\t" if fmt == ".tsv" else ",")
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise StsDataError(
                f"{path}:1: no column(s) {', '.join(missing)} in the header (got: {', '.join(reader.fieldnames or [])})"
            )
        for record in reader:
            # DictReader reads a row of more fields than the header's with the rest ignored, of fewer with None.
            if None in record or None in record.values():
                fields = sum(v is not None for k, v in record.items() if k is not None) + len(record.get(None, []))
                said = f"{fields} field" + ("s" if fields != 1 else "")
                raise StsDataError(f"{path}:{reader.line_num}: {said}, but the header names {len(reader.fieldnames)}")
            yield f"{path}:{reader.line_num}", record


def _pair_score(value, where: str) -> float:
    try:
        score = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        score = math.nan
    if not math.isfinite(score):
        raise StsDataError(f"{where}: score {value!r} is not a number")
    return score


def sentence_pairs(path: Path, fmt: str, columns: tuple[str, str, str], value, error: type[EvalDataError]):
    """(sentence1s, sentence2s, values) of a pair table whose columns are two sentences and a value, the value read
    by `value(raw, where)`; a row without two sentences, or a file that cannot be read, is `error` naming it."""
    sent1, sent2, values = [], [], []
    try:
        for where, record in records(path, fmt, columns):
            for column in columns[:2]:
                if not isinstance(record.get(column), str):
                    raise error(f"{where}: {column} is {record.get(column)!r}, not a sentence")
            values.append(value(record.get(columns[2]), where))
            sent1.append(record[columns[0]])
            sent2.append(record[columns[1]])
    except (UnicodeDecodeError, gzip.BadGzipFile, EOFError, OSError, csv.Error) as e:
        raise error(f"{path}: cannot read ({e})") from None
    return sent1, sent2, values


def read_pair_file(path: str | Path) -> StsSubset:
    """One STS pair file as a test split: every row needs two sentences (strings) and a numeric score."""
    path = Path(path)
    fmt = pair_format(path)
    if fmt is None:
        raise StsDataError(
            f"{path}: not an STS pair file (expected {', '.join(PAIR_SUFFIXES)}, text ones optionally .gz)"
        )
    sent1, sent2, gold = sentence_pairs(path, fmt, PAIR_COLUMNS, _pair_score, StsDataError)
    if len(gold) < 2:
        raise StsDataError(f"{path}: {len(gold)} pair(s); a correlation needs at least 2")
    task = pair_task(path)
    return _varied(StsSubset(task, task, LEADERBOARD_SPLIT, sent1, sent2, np.asarray(gold, dtype=np.float64)), path)


def find_pairs(data: Path) -> list[StsSubset]:
    """STS pair files: `data` itself when it is a file, else every file directly in the directory with a pair
    file's suffix, SentEval's own tables and the other task kinds' `<task>.<kind>.<format>` aside (SentEval's tasks
    sit in subdirectories). Each is read as if it
    were passed alone, so a file that does not parse stops the run naming it, never drops out of the scores."""
    if data.is_file():
        return [read_pair_file(data)]
    files = [
        p
        for p in sorted(data.iterdir())
        if p.is_file() and pair_format(p) and p.name not in SENTEVAL_TABLES and kind_file(p, registry.names()) is None
    ]
    subsets, seen = [], {}
    for path in files:
        task = pair_task(path)
        if task in (*STS_TASKS, SICK_TASK):
            raise StsDataError(
                f"{path}: an STS pair file may not be named {task}, a SentEval task's name: "
                "its scores would pass for SentEval's; rename the file"
            )
        if task in seen:
            raise StsDataError(f"{path} and {seen[task]} both name the task {task}")
        seen[task] = path
        subsets.append(read_pair_file(path))
    return subsets


def find_sts(data_dir: str | Path, required: bool = True) -> tuple[list[StsSubset], list[str]]:
    """Load every known STS task under data_dir, and the STS pair files in it; return (subsets, names of absent
    SentEval tasks). `data_dir` may also be one STS pair file. Finding none is an error when `required` (the
    evaluation passes False when other kinds of task are there: pipeline.evaluate.kinds).

    STS tasks sit in fixed directories (SentEval's layout); SICK-R is found by its
    test file anywhere below data_dir (SentEval's SICK/, or sick2014/ as distributed).
    """
    data_dir = Path(data_dir)
    if data_dir.is_file():
        return find_pairs(data_dir), [*STS_TASKS, SICK_TASK]
    if not data_dir.is_dir():
        raise StsDataError(f"STS data directory {data_dir} does not exist")
    subsets: list[StsSubset] = []
    absent: list[str] = []
    for task in STS_TASKS:
        # SentEval's directory, directly under data_dir or anywhere below it (eval/senteval/STS12-en-test)
        task_dir = find_file(data_dir, _task_dir(task))
        if task_dir is not None and task_dir.is_dir():
            subsets.extend(_read_task(task, task_dir))
        else:
            absent.append(task)
    sick_test = find_file(data_dir, SICK_TEST)
    if sick_test is None:
        if found := [p for name in SICK_FILES.values() if (p := find_file(data_dir, name)) is not None]:
            raise StsDataError(
                f"{found[0].parent}: a partial SICK folder ({', '.join(p.name for p in found)}): missing {SICK_TEST}"
            )
        absent.append(SICK_TASK)
    else:
        subsets.extend(
            _read_sick(sick_test.with_name(SICK_FILES[split]), split)
            for split in SPLITS
            if sick_test.with_name(SICK_FILES[split]).is_file()
        )
    subsets.extend(find_pairs(data_dir))
    if not subsets and required:
        looked_for = ", ".join(f"{_task_dir(t)}/" for t in STS_TASKS)
        raise StsDataError(
            f"no known STS task in {data_dir} (looked for {looked_for}, {SICK_TEST} below it, and "
            f"STS pair files with {', '.join(PAIR_COLUMNS)} columns in it)"
        )
    return subsets, absent


def data_hash(subsets: list[StsSubset]) -> str:
    """Short sha256 of exactly what was scored, so scores from different data never mix silently."""
    h = hashlib.sha256()
    for s in subsets:
        h.update(json.dumps([s.task, s.name, s.split, s.sent1, s.sent2, s.gold.tolist()]).encode())
        h.update(b"\n")
    return h.hexdigest()[:16]


def same_pair(a: str, b: str) -> frozenset[str]:
    """A sentence pair as another file may hold it: either order, whitespace runs as one space."""
    return frozenset((" ".join(a.split()), " ".join(b.split())))


def scored_splits(eval_data, splits: tuple[str, ...] = ("test",)) -> list[StsSubset]:
    """The STS subsets of `splits` the evaluation scores from eval_data, for the checks that a file a run trains or
    selects on is no copy of one. None where eval_data is no local path or does not parse: that is the evaluate
    stage's to refuse, and a run that stops before it (--until train) needs no evaluation files."""
    if not (isinstance(eval_data, str) and Path(eval_data).exists()):
        return []
    try:
        return [s for s in find_sts(eval_data, required=False)[0] if s.split in splits]
    except EvalDataError:
        return []
