"""SentEval's transfer tasks (MR, CR, SUBJ, MPQA, SST2, TREC, MRPC, SICK-E): finding and reading their files.

Each task is found by one of its files anywhere below the data directory, so
both SentEval's `data/downstream/` layout and the files as distributed
(harvardnlp's `MR/rt-polarity.pos`, `msr-para-*.tsv`, `sick2014/`) work.

Samples are read, and ordered, exactly as SentEval reads and orders them,
because its folds are drawn over that order: a different sample set or order
moves accuracies by tenths of a point (CR by 0.27 on order alone).

- MR, CR, SUBJ, MPQA and TREC are decoded as Latin-1, SST2, MRPC and SICK as
  UTF-8 (senteval/binary.py, trec.py, sst.py, mrpc.py, sick.py).
- The four binary tasks are split with str.splitlines(), which also breaks
  lines at U+0085 (byte 0x85, an ellipsis in Windows-1252) and keeps blank
  lines as empty samples: 10685 MR, 3775 CR, 10021 SUBJ and 10606 MPQA samples.
  The other tasks are read line by line at \n, \r and \r\n, as iterating a
  file does, and each line is stripped.
- Sentences are re-joined on single spaces, as SentEval's batchers see them
  (SentEval splits every line on whitespace).
- Each split is sorted, stably, by (number of words, label), and pairs by
  (words of the first, words of the second, label), as SentEval sorts "to
  reduce padding" before it folds or trains.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.readers.names import MRPC_TABLES, TRANSFER_TASKS
from pipeline.readers.sts import SICK_FILES, EvalDataError, find_file, sick_rows

_TREC_CLASSES = ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")
_SICK_CLASSES = ("CONTRADICTION", "NEUTRAL", "ENTAILMENT")
_SST_SPLITS = ("train", "dev", "test")
_TREC_FILES = ("train_5500.label", "TREC_10.label")


class TransferDataError(EvalDataError):
    """A transfer task's file is malformed; the message names the file and line."""


@dataclass(frozen=True)
class Examples:
    text: list[str]
    pair: list[str] | None  # the second sentence, for sentence-pair tasks (MRPC, SICK-E)
    labels: np.ndarray


Loader = Callable[[Path], dict[str, Examples]]


@dataclass(frozen=True)
class TransferTask:
    """`splits` is {"all"} (cross-validated), {"train", "test"} or {"train", "dev", "test"}."""

    name: str
    path: Path
    classes: tuple[str, ...]
    splits: dict[str, Examples]


def _text(raw: str) -> str:
    return " ".join(raw.split())


def _label(value: str, classes: tuple[str, ...], path: Path, lineno: int) -> int:
    if value not in classes:
        raise TransferDataError(f"{path}:{lineno}: label {value!r} is not one of {', '.join(classes)}")
    return classes.index(value)


def _examples(text: list[str], labels: list[int], pair: list[str] | None = None) -> Examples:
    """The split in SentEval's order: sorted by length in words, then label (a stable sort)."""

    def key(i: int) -> tuple[int, ...]:
        return (len(text[i].split()), *((len(pair[i].split()),) if pair is not None else ()), labels[i])

    order = sorted(range(len(text)), key=key)
    return Examples(
        [text[i] for i in order],
        None if pair is None else [pair[i] for i in order],
        np.asarray([labels[i] for i in order], dtype=np.int64),
    )


def _decode(path: Path, encoding: str) -> str:
    data = path.read_bytes()
    if not data.strip():
        raise TransferDataError(f"{path}: empty file")  # not a task of no samples
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as err:
        lineno = data.count(b"\n", 0, err.start) + 1
        raise TransferDataError(f"{path}:{lineno}: not valid {encoding}") from None


def _lines(path: Path, encoding: str) -> list[str]:
    """Stripped lines as `for line in open(path)` yields them: universal newlines, nothing else."""
    return [line.strip() for line in io.StringIO(_decode(path, encoding), newline=None)]


def _sentences(path: Path) -> list[str]:
    return [_text(line) for line in _decode(path, "latin-1").splitlines()]


def _binary(neg: str, pos: str) -> Loader:
    def load(directory: Path) -> dict[str, Examples]:
        negatives, positives = _sentences(directory / neg), _sentences(directory / pos)
        return {"all": _examples(negatives + positives, [0] * len(negatives) + [1] * len(positives))}

    return load


def _sst2(files: dict[str, str], label_first: bool) -> Loader:
    """harvardnlp's stsa.binary.* hold "<label> <sentence>"; SentEval's sentiment-* "<sentence>\\t<label>"."""

    def load(directory: Path) -> dict[str, Examples]:
        splits = {}
        for split, name in files.items():
            path, text, labels = directory / name, [], []
            for lineno, line in enumerate(_lines(path, "utf-8"), start=1):
                label, _, sentence = line.partition(" ") if label_first else line.rpartition("\t")[::-1]
                labels.append(_label(label.strip(), ("0", "1"), path, lineno))
                text.append(_text(sentence))
            splits[split] = _examples(text, labels)
        return splits

    return load


def _trec(directory: Path) -> dict[str, Examples]:
    splits = {}
    for split, name in zip(("train", "test"), _TREC_FILES):
        path, text, labels = directory / name, [], []
        for lineno, line in enumerate(_lines(path, "latin-1"), start=1):
            # "LOC:city What county is ..." -- the coarse class is scored, as SentEval does.
            coarse, _, rest = line.partition(":")
            question = rest.partition(" ")[2]
            labels.append(_label(coarse, _TREC_CLASSES, path, lineno))
            text.append(_text(question))
        splits[split] = _examples(text, labels)
    return splits


def _mrpc_rows(path: Path) -> list[tuple[str, str, int]]:
    """(first sentence, second sentence, label) of each pair in file order."""
    lines = _lines(path, "utf-8-sig")
    if not lines or not lines[0].startswith("Quality\t"):
        raise TransferDataError(f"{path}:1: expected the header Quality, #1 ID, #2 ID, #1 String, #2 String")
    rows = []
    for lineno, line in enumerate(lines[1:], start=2):
        fields = line.split("\t")
        if len(fields) < 5:
            raise TransferDataError(f"{path}:{lineno}: expected 5 tab-separated columns, got {len(fields)}")
        rows.append((_text(fields[3]), _text(fields[4]), _label(fields[0], ("0", "1"), path, lineno)))
    return rows


def _pairs(rows: list[tuple[str, str, int]]) -> Examples:
    return _examples([r[0] for r in rows], [r[2] for r in rows], [r[1] for r in rows])


def _mrpc(train: tuple[str, ...], test: str) -> Loader:
    """SentEval cross-validates on MSR's 4076 training pairs; msr-para-* moved 500 of them to a val file."""

    def load(directory: Path) -> dict[str, Examples]:
        # Concatenated before SentEval's sort, so that msr-para-val's pairs fall among the others' as in one file.
        train_rows = [row for name in train for row in _mrpc_rows(directory / name)]
        return {"train": _pairs(train_rows), "test": _pairs(_mrpc_rows(directory / test))}

    return load


def _sick_e(directory: Path) -> dict[str, Examples]:
    splits = {}
    for split, name in SICK_FILES.items():
        path, text, pair, labels = directory / name, [], [], []
        for lineno, fields in sick_rows(path):
            text.append(_text(fields[1]))
            pair.append(_text(fields[2]))
            labels.append(_label(fields[4], _SICK_CLASSES, path, lineno))
        splits[split] = _examples(text, labels, pair)
    return splits


_BINARY = ("neg", "pos")
# Per task: (classes, [(the files of one layout, loader of the directory holding them), ...]). A task is present
# when any of a layout's files is, and then every one of them must be there.
_LAYOUTS: dict[str, tuple[tuple[str, ...], list[tuple[tuple[str, ...], Loader]]]] = {
    "MR": (_BINARY, [(("rt-polarity.neg", "rt-polarity.pos"), _binary("rt-polarity.neg", "rt-polarity.pos"))]),
    "CR": (_BINARY, [(("custrev.neg", "custrev.pos"), _binary("custrev.neg", "custrev.pos"))]),
    "SUBJ": (
        ("subjective", "objective"),
        [(("subj.subjective", "subj.objective"), _binary("subj.subjective", "subj.objective"))],
    ),
    "MPQA": (_BINARY, [(("mpqa.neg", "mpqa.pos"), _binary("mpqa.neg", "mpqa.pos"))]),
    "SST2": (
        _BINARY,
        [
            (
                tuple(f"stsa.binary.{s}" for s in _SST_SPLITS),
                _sst2({s: f"stsa.binary.{s}" for s in _SST_SPLITS}, label_first=True),
            ),
            (
                tuple(f"sentiment-{s}" for s in _SST_SPLITS),
                _sst2({s: f"sentiment-{s}" for s in _SST_SPLITS}, label_first=False),
            ),
        ],
    ),
    "TREC": (_TREC_CLASSES, [(_TREC_FILES, _trec)]),
    "MRPC": (
        ("different", "paraphrase"),
        [
            (MRPC_TABLES, _mrpc(MRPC_TABLES[:2], MRPC_TABLES[2])),
            (
                ("msr_paraphrase_train.txt", "msr_paraphrase_test.txt"),
                _mrpc(("msr_paraphrase_train.txt",), "msr_paraphrase_test.txt"),
            ),
        ],
    ),
    "SICKE": (_SICK_CLASSES, [(tuple(SICK_FILES.values()), _sick_e)]),
}


# The names by which the transfer tasks are found below an evaluation directory.
LAYOUT_FILES = frozenset(f for _, layouts in _LAYOUTS.values() for files, _ in layouts for f in files)


def _present(data_dir: Path, name: str, files: tuple[str, ...]) -> Path | None:
    """The directory holding the layout's files, None when none is below data_dir; a partial set is an error."""
    found = [p for f in files if (p := find_file(data_dir, f)) is not None]
    if not found:
        return None
    directory = found[0].parent
    if missing := [f for f in files if not (directory / f).is_file()]:
        raise TransferDataError(
            f"{name} in {directory}: missing {', '.join(str(directory / f) for f in missing)} (a partial {name} folder)"
        )
    return directory


def find_transfer(data_dir: str | Path) -> tuple[list[TransferTask], list[str]]:
    """Load every transfer task found below data_dir; return (tasks, names of absent tasks)."""
    data_dir = Path(data_dir)
    if data_dir.is_file():  # one STS pair file (pipeline.evaluate.sts)
        return [], list(TRANSFER_TASKS)
    if not data_dir.is_dir():
        raise TransferDataError(f"transfer data directory {data_dir} does not exist")
    tasks, absent = [], []
    for name in TRANSFER_TASKS:
        classes, layouts = _LAYOUTS[name]
        for files, load in layouts:
            directory = _present(data_dir, name, files)
            if directory is not None:
                tasks.append(TransferTask(name, directory, classes, load(directory)))
                break
        else:
            absent.append(name)
    return tasks, absent


def transfer_data_hash(tasks: list[TransferTask]) -> str:
    """Short sha256 of exactly what is scored, like sts.data_hash, so scores from different data never mix."""
    h = hashlib.sha256()
    for task in tasks:
        for split, ex in task.splits.items():
            h.update(json.dumps([task.name, split, ex.text, ex.pair, ex.labels.tolist()]).encode())
            h.update(b"\n")
    return h.hexdigest()[:16]
