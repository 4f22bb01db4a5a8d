"""Score rows of several models -> one leaderboard table (Markdown, CSV, Parquet, PNG).

Columns: what the model is (kind, objective, size, embedding dimension,
training corpus), STS Spearman on the leaderboard split under both protocols
side by side (their numbers are not comparable), the transfer tasks' test
accuracy (MRPC also F1) and their average as DeCLUTR reports it, and
alignment/uniformity/anisotropy on STS-B. A task a model was not scored on
shows as missing, never as zero, and averages over incomplete rows are marked.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from pipeline.sts import LEADERBOARD_SPLIT, SICK_TASK, STS_TASKS
from pipeline.transfer import AVERAGE_PROTOCOL, AVERAGE_TASK
from pipeline.transfer_data import TRANSFER_TASKS
from storage import put_file

PROTOCOLS = ("senteval", "simcse")
SIMILARITY_TASKS = (*STS_TASKS, SICK_TASK)
META = ("kind", "objective", "parameters", "dimension", "corpus")  # shown when the scores carry them
ANALYSIS = ("alignment", "uniformity", "anisotropy")
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


def absent_tasks(scores: pd.DataFrame, tasks: Sequence[str] = SIMILARITY_TASKS) -> list[str]:
    """Tasks in `tasks` that no model was scored on."""
    present = set(_leaderboard_rows(scores, tasks)["task"])
    return [t for t in tasks if t not in present]


def _wide(rows: pd.DataFrame, models, column: pd.Series, columns: list[str], scale: float = 100) -> pd.DataFrame:
    values = rows.assign(column=column, value=rows["value"] * scale)
    return values.pivot(index="model", columns="column", values="value").reindex(index=models, columns=columns)


def _transfer(scores: pd.DataFrame, models) -> pd.DataFrame:
    test = scores[(scores["split"] == LEADERBOARD_SPLIT) & (scores["subset"] == "all")]
    tasks = [t for t in TRANSFER_TASKS if t in set(test["task"])]
    if not tasks:
        return pd.DataFrame(index=models)
    accuracy = test[test["task"].isin(tasks) & (test["metric"] == "accuracy") & (test["protocol"] == "senteval")]
    f1 = test[(test["task"] == "MRPC") & (test["metric"] == "f1")]
    average = test[(test["task"] == AVERAGE_TASK) & (test["protocol"] == AVERAGE_PROTOCOL)]
    columns = tasks + (["MRPC F1"] if "MRPC" in tasks else [])
    table = pd.concat([_wide(accuracy, models, accuracy["task"], tasks),
                       _wide(f1, models, f1["task"] + " F1", ["MRPC F1"])], axis=1)[columns]
    table["avg transfer"] = _wide(average, models, average["task"], [AVERAGE_TASK])[AVERAGE_TASK]
    table["transfer complete"] = ~table[tasks].isna().any(axis=1)
    return table


def _analysis(scores: pd.DataFrame, models) -> pd.DataFrame:
    rows = scores[(scores["task"] == "STSB") & (scores["split"] == LEADERBOARD_SPLIT)
                  & scores["metric"].isin(ANALYSIS)]
    present = [m for m in ANALYSIS if m in set(rows["metric"])]
    return _wide(rows, models, rows["metric"], present, scale=1).round(3)


def leaderboard(scores: pd.DataFrame, tasks: Sequence[str] = SIMILARITY_TASKS) -> pd.DataFrame:
    """One row per model: what it is, `<TASK> senteval/simcse` (Spearman x 100) and their averages, the
    transfer accuracies (x 100) and their average, the STS-B analysis, and `complete`."""
    rows = _leaderboard_rows(scores, tasks)
    dup = rows.duplicated(["model", "task", "protocol"], keep=False)
    if dup.any():
        first = rows[dup].iloc[0]
        raise ValueError(
            f"several scores for model {first['model']!r}, task {first['task']}, protocol {first['protocol']}")

    models = pd.unique(scores["model"])
    meta = [c for c in META if c in scores.columns]
    table = scores.groupby("model", sort=False)[meta].first().reindex(models).reset_index()
    present = set(rows["task"])
    task_cols = [f"{t} {p}" for t in tasks if t in present for p in PROTOCOLS]
    table[task_cols] = _wide(rows, models, rows["task"] + " " + rows["protocol"], task_cols).to_numpy(dtype=float)
    for p in PROTOCOLS:
        cols = [c for c in task_cols if c.endswith(f" {p}")]
        table[f"avg {p}"] = table[cols].mean(axis=1) if cols else np.nan
    complete = ~table[task_cols].isna().any(axis=1)
    extra = pd.concat([_transfer(scores, models), _analysis(scores, models)], axis=1).reset_index(drop=True)
    if "transfer complete" in extra:
        complete &= extra.pop("transfer complete")
    table = pd.concat([table, extra], axis=1)
    if "recipe" in scores.columns:
        table["recipe"] = scores.groupby("model", sort=False)["recipe"].first().reindex(models).to_numpy()
    table["complete"] = complete
    numeric = [c for c in table.columns if c not in (*meta, "model", "recipe", "complete", *ANALYSIS)]
    table[numeric] = table[numeric].astype(float).round(2)
    # Stable sort keeps first-appearance order among ties.
    return table.sort_values("avg senteval", ascending=False, na_position="last", kind="stable").reset_index(drop=True)


def _cell(column: str, value, suffix: str = "") -> str:
    if value is None or isinstance(value, (float, np.floating)) and np.isnan(value):
        return MISSING
    if column in ("parameters", "dimension"):
        return f"{int(value):,}"
    if column in ANALYSIS:
        return f"{value:.3f}"
    if isinstance(value, (float, np.floating)):
        return f"{value:.2f}{suffix}"
    return str(value).replace("|", "\\|")


def to_markdown(table: pd.DataFrame, absent: list[str], title: str) -> str:
    """GitHub-flavoured Markdown: missing scores as "—", averages over incomplete rows marked "*"."""
    columns = [c for c in table.columns if c != "complete"]
    text = ("model", "kind", "objective", "corpus", "recipe")
    lines = [f"# {title}", "",
             "| " + " | ".join(columns) + " |",
             "|" + "|".join("---" if c in text else "---:" for c in columns) + "|"]
    any_incomplete = False
    for record in table.to_dict("records"):
        marked = not record["complete"]
        any_incomplete |= marked
        cells = [_cell(c, record[c], "*" if marked and c.startswith("avg ") else "") for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    notes = []
    if any_incomplete:
        notes.append("\\* average over fewer tasks than other models have (a task column shows "
                     f"{MISSING}), so it is not comparable with complete rows.")
    if absent:
        notes.append(f"Absent from the evaluation data: {', '.join(absent)}.")
    notes.append("STS columns: Spearman correlation x 100 of cosine similarity. "
                 "senteval = mean of per-subset Spearman (SentEval); "
                 "simcse = one Spearman over all subsets concatenated (SimCSE's \"all\").")
    if "avg transfer" in table.columns:
        notes.append("Transfer columns: test accuracy x 100 of logistic regression on frozen embeddings "
                     "(SentEval's protocol); avg transfer counts MRPC as the mean of its accuracy and F1 (DeCLUTR).")
    if any(c in table.columns for c in ANALYSIS):
        notes.append("alignment and uniformity (Wang & Isola, 2020; lower is better) and anisotropy (mean cosine "
                     "of random pairs) on STS-B test.")
    # Blank lines between notes, or Markdown renders them as one paragraph.
    return "\n".join(lines) + "\n\n" + "\n\n".join(notes) + "\n"


def write_leaderboard(table: pd.DataFrame, absent: list[str], out_dir: str, title: str,
                      name: str = "leaderboard") -> dict[str, str]:
    """Write <name>.md/.csv/.parquet/.png into out_dir (any fsspec URL), each file replaced whole;
    return their paths by format."""
    writers: dict[str, Callable[[str], object]] = {
        "md": lambda f: Path(f).write_text(to_markdown(table, absent, title), encoding="utf-8"),
        "csv": lambda f: table.to_csv(f, index=False),
        "parquet": lambda f: table.to_parquet(f, index=False),
        "png": lambda f: plot(table, title, f),
    }
    paths = {fmt: f"{out_dir.rstrip('/')}/{name}.{fmt}" for fmt in writers}
    with tempfile.TemporaryDirectory(prefix="cpipe-leaderboard-") as tmp:
        for fmt, write in writers.items():
            write(f"{tmp}/{name}.{fmt}")
            put_file(f"{tmp}/{name}.{fmt}", paths[fmt])
    return paths


def plot(table: pd.DataFrame, title: str, path: str) -> None:
    """Grouped horizontal bars: each model's STS scores (senteval protocol), best model on top."""
    import matplotlib

    matplotlib.use("Agg")  # no display on servers and workers
    import matplotlib.pyplot as plt

    columns = [c for c in table.columns if c.endswith(" senteval")]
    data = table.set_index("model")[columns].iloc[::-1]
    fig, ax = plt.subplots(figsize=(8, 1 + 0.35 * len(data) * max(1, len(columns)) / 2))
    data.plot.barh(ax=ax, width=0.8)
    ax.set_xlabel("Spearman x 100 (SentEval protocol)")
    ax.set_title(title)
    ax.legend([c.removesuffix(" senteval") for c in columns], fontsize="small", loc="lower right")
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)
