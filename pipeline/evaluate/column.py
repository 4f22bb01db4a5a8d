"""A leaderboard column as what it shows (task, kind, metric, protocol, split), not as a string parsed back: its
name, the one the tables, the CSV and the Parquet carry, is rendered from those fields by its kind's `form`. A
leaf, importing nothing of this project's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    task: str
    kind: str
    metric: str
    protocol: str
    split: str = "test"
    # How the kind spells its columns: a task kind's "<task> <metric>" ("scifact nDCG@10").
    form: str = "{task} {metric}"
    # How the leaderboard's bootstrap recomputes it (pipeline.leaderboard.intervals): from the test items kept under
    # `kept_as` ("" for its own protocol) by `statistic` (None for its kind's; pipeline.evaluate.resampled):
    # STS12-16's "senteval" column is the mean of per-subset Spearman of the items kept as "cosine".
    kept_as: str = ""
    statistic: Callable | None = None

    @property
    def name(self) -> str:
        return self.form.format(
            task=self.task, kind=self.kind, metric=self.metric, protocol=self.protocol, split=self.split
        )

    def __str__(self) -> str:
        return self.name
