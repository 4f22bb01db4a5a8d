"""The evaluation's names: SentEval's task names, the STS pair files' suffixes, the leaderboard columns they
make, and which tasks are MTEB's (MTEB's names, Hub datasets and revisions: MTEB's result files and the Hub card).
A leaf, importing nothing of this project's, so that the config (pipeline.evaluate.config) checks evaluate.data
and evaluate.rank_by by the names the evaluation and the leaderboard use (pipeline.evaluate.sts,
pipeline.readers.transfer, pipeline.leaderboard.table)."""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import NamedTuple

STS_TASKS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSB")
SICK_TASK = "SICKR"
# Tasks with train/dev/test splits, scored by cosine and by SentEval's supervised regressor.
RELATEDNESS_TASKS = ("STSB", SICK_TASK)
TRANSFER_TASKS = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC", "SICKE")
# STS pair files: the formats they may come in.
PAIR_SUFFIXES = (".csv", ".tsv", ".jsonl", ".parquet")
# SentEval's own tables that end in a pair file's suffix (STS-B's, and MRPC's as split by brmson): directly in
# an evaluation directory they are their tasks' data, and every other file with such a suffix is a pair file.
STSB_FILES = {split: f"sts-{split}.csv" for split in ("test", "dev", "train")}
MRPC_TABLES = ("msr-para-train.tsv", "msr-para-val.tsv", "msr-para-test.tsv")
SENTEVAL_TABLES = (*STSB_FILES.values(), *MRPC_TABLES)


def pair_format(path: Path) -> str | None:
    """The format of an STS pair file by its name (.csv, .tsv, .jsonl, .parquet; the text ones may end in .gz),
    else None."""
    suffixes = path.suffixes[-2:] if path.suffix == ".gz" else path.suffixes[-1:]
    fmt = suffixes[0] if suffixes else ""
    return fmt if fmt in PAIR_SUFFIXES and not (fmt == ".parquet" and path.suffix == ".gz") else None


def pair_suffix(spec: str) -> str:
    """The format suffix a pair file's path or URL ends in (".jsonl.gz", ".csv", ...); "" when it is none."""
    path = Path(urllib.parse.urlsplit(spec).path)
    fmt = pair_format(path)
    return "" if fmt is None else fmt + (".gz" if path.suffix == ".gz" else "")


class MtebTask(NamedTuple):
    """One of our tasks as MTEB scores it: MTEB's name, its test split's size (a file of another size is not MTEB's
    task), and the Hub dataset MTEB reads, at its revision (mteb's task metadata, mteb/tasks/sts/eng)."""

    name: str
    test_pairs: int
    dataset: str
    revision: str


_MTEB_STS = (
    MtebTask("STS12", 3108, "mteb/sts12-sts", "a0d554a64d88156834ff5ae9920b964011b16384"),
    MtebTask("STS13", 1500, "mteb/sts13-sts", "7e90230a92c190f1bf69ae9002b8cea547a64cca"),
    MtebTask("STS14", 3750, "mteb/sts14-sts", "6031580fec1f6af667f0bd2da0a551cf4f0b2375"),
    MtebTask("STS15", 3000, "mteb/sts15-sts", "ae752c7c21bf194d8b67fd573edf7ae58183cbe3"),
    MtebTask("STS16", 1186, "mteb/sts16-sts", "4d8694f8f0e0100860b497b999b3dbed754a0513"),
    MtebTask("STSBenchmark", 1379, "mteb/stsbenchmark-sts", "b0fddb56ed78048fa8b90373c8a3cfc37b684831"),
    MtebTask("SICK-R", 9927, "mteb/sickr-sts", "20a6d6f312dd54037fe07a32d58e5e168867909d"),
)
# Our tasks that are MTEB's, by the names SentEval gives them and the names of MTEB's own files (the Hub dataset's,
# as configs/default.yaml names them; "sickr-mteb" there). SentEval's STS12-16 and STS-B are MTEB's test pairs;
# SentEval's SICK-R test split (4,927 pairs) is not MTEB's SICK-R (all 9,927 SICK pairs): the size tells them apart.
MTEB_STS = {
    **dict(zip((*STS_TASKS, SICK_TASK), _MTEB_STS)),
    **{t.dataset.split("/")[1]: t for t in _MTEB_STS},
    "sickr-mteb": _MTEB_STS[-1],
}


def mteb_task(task: str, test_pairs: int | None, tasks=MTEB_STS) -> MtebTask | None:
    """MTEB's task that `task` is when its test split has MTEB's number of pairs, else None."""
    known = tasks.get(task)
    return known if known is not None and known.test_pairs == test_pairs else None


# The leaderboard's columns (pipeline.leaderboard.table).
SIMILARITY_TASKS = (*STS_TASKS, SICK_TASK)
STS_YEARS = tuple(t for t in STS_TASKS if t not in RELATEDNESS_TASKS)  # STS12-16
# The two protocols of each similarity task, in column order.
SIMILARITY_PROTOCOLS = {
    **{t: ("senteval", "simcse") for t in STS_YEARS},
    **{t: ("cosine", "senteval") for t in RELATEDNESS_TASKS},
}
# Transfer protocols and how an average's name spells them.
TRANSFER_PROTOCOLS = {"senteval": "SentEval", "sklearn": "sklearn"}
AVG_SIMCSE, AVG_STS_SENTEVAL = "avg STS (SimCSE 7)", "avg STS (SentEval)"
# Each STS average: the seven tasks of SimCSE's table 1 under SimCSE's protocol, and the same seven under
# SentEval's (as DeCLUTR's scripts/run_senteval.py counts them: STS12-16 by the mean of per-subset Spearman,
# STS-B and SICK-R by the regressor's test Spearman).
STS_AVERAGES = {
    AVG_SIMCSE: [f"{t} simcse" for t in STS_YEARS] + [f"{t} cosine" for t in RELATEDNESS_TASKS],
    AVG_STS_SENTEVAL: [f"{t} senteval" for t in (*STS_YEARS, *RELATEDNESS_TASKS)],
}


def avg_transfer(protocol: str) -> str:
    return f"avg transfer ({TRANSFER_PROTOCOLS[protocol]})"


# MRPC as DeCLUTR's averages count it: once, as the mean of its accuracy and F1 (not a column of its own).
MRPC_BOTH = "MRPC accuracy+F1"
AVG_TRANSFER_SIMCSE, AVG_DOWNSTREAM_DECLUTR = "avg transfer (SimCSE 7)", "avg downstream (DeCLUTR 15)"
# The papers' averages over SentEval's protocol, each over every column it names. SimCSE's transfer "Avg." (its
# evaluation.py's): seven transfer tasks, MRPC by its accuracy, no SICK-E. DeCLUTR's "Downstream (-SNLI)" (its README's table; its
# scripts/run_senteval.py's DOWNSTREAM_TASKS less SNLI) has 17 tasks, and 15 of them are scored here: all but
# SST5 and COCO's image-caption retrieval; so this column is DeCLUTR's average over those 15, not its number.
PAPER_AVERAGES = {
    AVG_TRANSFER_SIMCSE: [f"{t} senteval" for t in ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")],
    AVG_DOWNSTREAM_DECLUTR: [f"{t} senteval" for t in ("CR", "MR", "MPQA", "SUBJ", "SST2", "TREC")]
    + [f"{MRPC_BOTH} senteval", "SICKE senteval", "SICKR senteval", "STSB senteval"]
    + [f"{t} senteval" for t in STS_YEARS],
}

# STS pair files are named by their files, so their columns are known only from the scores.
PAIR_PROTOCOL, AVG_PAIRS = "cosine", "avg STS pair files"
AVERAGES = (*STS_AVERAGES, AVG_PAIRS, *(avg_transfer(p) for p in TRANSFER_PROTOCOLS), *PAPER_AVERAGES)


def kind_file(path: Path, kinds) -> str | None:
    """Which of `kinds` `path` is a file of by its name, `<task>.<kind>.<format>` (pipeline.evaluate.kind.task_files),
    else None: such a file is no STS pair file."""
    fmt = pair_format(path)
    stem = path.name[: -len(fmt + (".gz" if path.suffix == ".gz" else ""))] if fmt else ""
    return next((k for k in kinds if stem.endswith(f".{k}") and len(stem) > len(k) + 1), None)


def rankable_columns() -> list[str]:
    """Every column a leaderboard can be ranked by (`evaluate.rank_by`), less the STS pair files' (is_pair_column)."""
    similarity = [f"{t} {p}" for t, protocols in SIMILARITY_PROTOCOLS.items() for p in protocols]
    transfer = [f"{t} {p}" for p in TRANSFER_PROTOCOLS for t in (*TRANSFER_TASKS, "MRPC F1")]
    return [*AVERAGES, *similarity, *transfer]


def is_pair_column(column: str) -> bool:
    """Whether `column` can be an STS pair file's: "<task> cosine" for a task that is not SentEval's."""
    task, _, protocol = column.rpartition(" ")
    return protocol == PAIR_PROTOCOL and bool(task) and task not in (*SIMILARITY_TASKS, *TRANSFER_TASKS)
