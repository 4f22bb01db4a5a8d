"""Score rows of several models -> one leaderboard table (Markdown, CSV, Parquet).

Only STS Spearman on the leaderboard split is tabulated, under both protocols
side by side, because the SentEval and SimCSE numbers are not comparable.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from pipeline.sts import LEADERBOARD_SPLIT, STS_TASKS

PROTOCOLS = ("senteval", "simcse")
MISSING = "—"


def _leaderboard_rows(scores: pd.DataFrame, tasks: Sequence[str]) -> pd.DataFrame:
    keep = (
        scores["task"].isin(list(tasks))
        & (scores["metric"] == "spearman")
        & scores["protocol"].isin(PROTOCOLS)
        & (scores["subset"] == "all")
        & (scores["split"] == LEADERBOARD_SPLIT)
    )
    return scores[keep]


def absent_tasks(scores: pd.DataFrame, tasks: Sequence[str] = STS_TASKS) -> list[str]:
    """Tasks in `tasks` that no model was scored on."""
    present = set(_leaderboard_rows(scores, tasks)["task"])
    return [t for t in tasks if t not in present]


def leaderboard(scores: pd.DataFrame, tasks: Sequence[str] = STS_TASKS) -> pd.DataFrame:
    """One row per model: `<TASK> senteval/simcse` (Spearman x 100), averages, and `complete`."""
    rows = _leaderboard_rows(scores, tasks)
    dup = rows.duplicated(["model", "task", "protocol"], keep=False)
    if dup.any():
        first = rows[dup].iloc[0]
        raise ValueError(
            f"several scores for model {first['model']!r}, task {first['task']}, protocol {first['protocol']}")

    models = pd.unique(scores["model"])
    table = scores.groupby("model", sort=False)["kind"].first().reindex(models).reset_index()
    present = set(rows["task"])
    task_cols = [f"{t} {p}" for t in tasks if t in present for p in PROTOCOLS]
    values = rows.assign(column=rows["task"] + " " + rows["protocol"], value=rows["value"] * 100)
    wide = values.pivot(index="model", columns="column", values="value").reindex(index=models, columns=task_cols)
    table[task_cols] = wide.to_numpy(dtype=float)

    for p in PROTOCOLS:
        cols = [c for c in task_cols if c.endswith(f" {p}")]
        table[f"avg {p}"] = table[cols].mean(axis=1) if cols else np.nan
    table["complete"] = ~table[task_cols].isna().any(axis=1)
    numeric = task_cols + [f"avg {p}" for p in PROTOCOLS]
    table[numeric] = table[numeric].round(2)
    # Stable sort keeps first-appearance order among ties.
    return table.sort_values("avg senteval", ascending=False, na_position="last", kind="stable").reset_index(drop=True)


def _cell(value, suffix: str = "") -> str:
    if isinstance(value, (float, np.floating)):
        return MISSING if np.isnan(value) else f"{value:.2f}{suffix}"
    return str(value).replace("|", "\\|")


def to_markdown(table: pd.DataFrame, absent: list[str], title: str) -> str:
    """GitHub-flavoured Markdown: missing scores as "—", averages over incomplete rows marked "*"."""
    columns = [c for c in table.columns if c != "complete"]
    numeric = [c for c in columns if c not in ("model", "kind")]
    lines = [f"# {title}", "",
             "| " + " | ".join(columns) + " |",
             "|" + "|".join("---:" if c in numeric else "---" for c in columns) + "|"]
    any_incomplete = False
    for record in table.to_dict("records"):
        marked = not record["complete"]
        any_incomplete |= marked
        cells = [_cell(record[c], "*" if marked and c.startswith("avg ") else "") for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    notes = []
    if any_incomplete:
        notes.append("\\* average over fewer tasks than other models have (a task column shows "
                     f"{MISSING}), so it is not comparable with complete rows.")
    if absent:
        notes.append(f"Absent from the evaluation data: {', '.join(absent)}.")
    notes.append("Values are Spearman correlation x 100 of cosine similarity. "
                 "senteval = mean of per-subset Spearman (SentEval); "
                 "simcse = one Spearman over all subsets concatenated (SimCSE's \"all\").")
    # Blank lines between notes, or Markdown renders them as one paragraph.
    return "\n".join(lines) + "\n\n" + "\n\n".join(notes) + "\n"


def _atomic_write(path: Path, write: Callable[[str], None]) -> None:
    # A temporary sibling on the same filesystem makes os.replace atomic.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_leaderboard(table: pd.DataFrame, absent: list[str], out_dir: str, title: str) -> dict[str, str]:
    """Write leaderboard.md/.csv/.parquet into out_dir atomically; return their paths by format."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {fmt: out / f"leaderboard.{fmt}" for fmt in ("md", "csv", "parquet")}
    markdown = to_markdown(table, absent, title)
    _atomic_write(paths["md"], lambda tmp: Path(tmp).write_text(markdown, encoding="utf-8"))
    _atomic_write(paths["csv"], lambda tmp: table.to_csv(tmp, index=False))
    _atomic_write(paths["parquet"], lambda tmp: table.to_parquet(tmp, index=False))
    return {fmt: str(p) for fmt, p in paths.items()}
