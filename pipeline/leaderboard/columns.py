"""The leaderboard table's columns beside the scores, and what reads them off a built table (its data sections, its rows
over seeds, the interval columns after a score, the task kinds' columns), shared by the table, its notes and its
figure."""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipeline.evaluate.analysis import KIND as SPACE
from pipeline.evaluate.analysis import TASK as DESCRIBED_TASK
from pipeline.leaderboard.intervals import SEEDS, SUFFIXES
from pipeline.readers.registry import is_kind_column

ANALYSIS = tuple(c.name for c in SPACE.task_columns(DESCRIBED_TASK))  # the analysis kind's columns, unscaled
MISSING = "—"
DATA = "data"  # the cumulative table's: the evaluation data's hash, by which its rows are sectioned
# A trained row's training data (pipeline.leaderboard.cards.restated): what its pairs were made from, and the digest of
# the documents drawn, which tells rows trained on different documents apart. In the CSV and Parquet; the
# Markdown says them in a note.
TRAINED_ON, DOCUMENTS = "trained on", "documents digest"
# A trained row's own training budget: "1000 steps of 16 pairs" (steps taken, pairs a step), said in a note where
# compared rows differ in it. A row continued from another (its recipe's "from <row>") trained that one's first.
BUDGET = "budget"


def kind_columns(columns) -> list[str]:
    return [c for c in columns if is_kind_column(c)]


def escaped(value) -> str:
    """A pipe would end the Markdown cell: a model or STS pair file may be named with one."""
    return str(value).replace("|", "\\|")


def derived_columns(columns) -> set[str]:
    """The interval and comparison columns that follow a score column (shown inside its Markdown cell)."""
    present = set(columns)
    return {c for c in present for s in SUFFIXES if c.endswith(f" {s}") and c[: -len(s) - 1] in present}


def rows_over_seeds(table: pd.DataFrame) -> list[str]:
    if SEEDS not in table.columns:
        return []
    return [m for m, s in zip(table["model"], table[SEEDS]) if isinstance(s, (list, np.ndarray))]


def data_sections(table: pd.DataFrame) -> list[np.ndarray]:
    """The positions of each data's rows (column DATA), or of all rows in a table without it."""
    if DATA not in table.columns:
        return [np.arange(len(table))]
    return list(table.reset_index(drop=True).groupby(DATA, sort=False).indices.values())
