"""leaderboard stage: every model's scores in one table (Markdown, CSV, Parquet)."""

from __future__ import annotations

import logging

import pandas as pd

from pipeline.leaderboard import absent_tasks, leaderboard, to_markdown, write_leaderboard
from storage import read_manifest, read_table

NAME, VERSION = "leaderboard", "1"
SCHEMA = None
TITLE = "STS leaderboard"
log = logging.getLogger("cpipe")


def load_scores(paths: list[str]) -> pd.DataFrame:
    return pd.concat([read_table(p).to_pandas() for p in paths], ignore_index=True)


def run(config: dict, inputs: dict, out) -> None:
    scores = load_scores([inputs[k] for k in sorted(inputs)])
    table = leaderboard(scores)
    absent = absent_tasks(scores)
    write_leaderboard(table, absent, out.local_dir, title=TITLE)
    out.extra.update({"models": table["model"].tolist(), "absent_tasks": absent})


def publish(path: str, artifacts: str) -> tuple[pd.DataFrame, str]:
    """Rewrite the leaderboard at the artifacts root, where users look for it (atomically)."""
    table = pd.read_parquet(f"{path}/leaderboard.parquet")
    absent = read_manifest(path)["absent_tasks"]
    write_leaderboard(table, absent, artifacts, title=TITLE)
    return table, to_markdown(table, absent, title=TITLE)
