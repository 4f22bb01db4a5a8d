"""Score rows of several models -> one leaderboard table (Markdown, CSV, Parquet, PNG).

Columns: what the model is (kind, objective, size, embedding dimension,
training corpus); every score as `<TASK> <protocol>` (Spearman x 100 on test
for the similarity tasks, accuracy x 100 for the transfer tasks), since the
protocols' numbers are not comparable; averages that name what they average;
and alignment/uniformity/anisotropy on STS-B. A task a model was not scored on
shows as missing, never as zero, and so does any average over it: an average
is never taken over fewer tasks than it names.

Protocols (pipeline.evaluate.sts, pipeline.evaluate.transfer): STS12-16 "senteval" (mean of
per-subset Spearman) and "simcse" (one Spearman over the concatenated
subsets); STS-B and SICK-R "cosine" (Spearman of cosine similarity) and
"senteval" (SentEval's relatedness regressor); transfer tasks "senteval"
(SentEval's PyTorch classifier) or "sklearn" (its scikit-learn path). STS pair
files (MTEB's layout, any other name) "cosine", one column each after the
SentEval tasks, and "avg STS pair files" over them. The other task kinds (pipeline.evaluate.kinds: retrieval,
pair classification, ...) as `<task> <main metric>` x 100 on test (e.g. "scifact nDCG@10"), one column per task
in each kind's order, and "avg <kind>" over each kind's tasks.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.errors import ConfigError
from pipeline.evaluate import kinds
from pipeline.evaluate.analysis import KIND as SPACE
from pipeline.evaluate.analysis import TASK as DESCRIBED_TASK
from pipeline.evaluate.column import Column
from pipeline.evaluate.sts import KIND as STS
from pipeline.evaluate.transfer import PROTOCOLS as TRANSFER_CLASSIFIERS
from pipeline.evaluate.transfer import columns as transfer_columns
from pipeline.leaderboard.columns import (
    ANALYSIS,
    BUDGET,
    DATA,
    DOCUMENTS,
    MISSING,
    TRAINED_ON,
    derived_columns,
    escaped,
    kind_columns,
)
from pipeline.leaderboard.figure import plot
from pipeline.leaderboard.intervals import DIFF_LO, HI, LO, SEEDS, SIGNIFICANT, STD
from pipeline.leaderboard.notes import table_notes
from pipeline.leaderboard.readouts import READOUT, matched_intervals
from pipeline.leaderboard.seeds import aggregate, groups
from pipeline.readers import registry
from pipeline.readers.names import (
    AVERAGES,
    AVG_PAIRS,
    PAIR_PROTOCOL,
    PAPER_AVERAGES,
    SIMILARITY_PROTOCOLS,
    SIMILARITY_TASKS,
    STS_AVERAGES,
    TRANSFER_PROTOCOLS,
    TRANSFER_TASKS,
    avg_transfer,
    is_pair_column,
    rankable_columns,
)
from pipeline.readers.registry import is_kind_column
from pipeline.readers.sts import LEADERBOARD_SPLIT
from storage import put_file

META = ("kind", "objective", "parameters", "dimension", "corpus", READOUT)  # shown when the scores carry them
DESCRIBED = ("recipe", TRAINED_ON, DOCUMENTS, BUDGET)  # text: a row's first model's (a row over seeds: _described)


def _test(scores: pd.DataFrame) -> pd.DataFrame:
    return scores[(scores["subset"] == "all") & (scores["split"] == LEADERBOARD_SPLIT)]


def _similarity_rows(scores: pd.DataFrame, tasks: Sequence[str]) -> pd.DataFrame:
    test = _test(scores)
    known = np.array([p in SIMILARITY_PROTOCOLS.get(t, ()) for t, p in zip(test["task"], test["protocol"])], dtype=bool)
    keep = test["task"].isin(list(tasks)) & (test["metric"] == "spearman") & known
    return test[keep]


def _pair_rows(scores: pd.DataFrame) -> pd.DataFrame:
    test = _test(scores)
    pair = [is_pair_column(f"{t} {p}") for t, p in zip(test["task"], test["protocol"])]
    return test[np.array(pair, dtype=bool) & (test["metric"] == "spearman").to_numpy()]


def absent_tasks(scores: pd.DataFrame, tasks: Sequence[str] = SIMILARITY_TASKS) -> list[str]:
    """Tasks in `tasks` that no model was scored on."""
    present = set(_similarity_rows(scores, tasks)["task"])
    return [t for t in tasks if t not in present]


def _no_duplicates(rows: pd.DataFrame) -> None:
    dup = rows.duplicated(["model", "task", "metric", "protocol"], keep=False)
    if dup.any():
        first = rows[dup].iloc[0]
        raise ValueError(
            f"several scores for model {first['model']!r}, task {first['task']}, "
            f"metric {first['metric']}, protocol {first['protocol']}"
        )


def _wide(rows: pd.DataFrame, models, column: pd.Series, columns: list[str], scale: float = 100) -> pd.DataFrame:
    values = rows.assign(column=column, value=rows["value"] * scale)
    return values.pivot(index="model", columns="column", values="value").reindex(index=models, columns=columns)


def _mean_of_all(table: pd.DataFrame, columns: list[str]) -> pd.Series:
    """The mean over `columns`, missing wherever one of them is (skipna=False): never a mean of fewer."""
    return table.reindex(columns=columns).mean(axis=1, skipna=False)


def _similarity(scores: pd.DataFrame, models, tasks: Sequence[str]) -> tuple[pd.DataFrame, dict[str, Column]]:
    """The STS columns (SentEval's tasks', then the pair files'), as the STS kind declares them, with their
    averages; and those columns, typed, by name."""
    rows = _similarity_rows(scores, tasks)
    _no_duplicates(rows)
    present = set(rows["task"])
    typed = {c.name: c for t in tasks if t in present for c in STS.task_columns(t)}
    columns = list(typed)
    table = _wide(rows, models, rows["task"] + " " + rows["protocol"], columns)
    for name, parts in STS_AVERAGES.items():
        if any(c in columns for c in parts):
            table[name] = _mean_of_all(table, parts)
    pairs = _pair_rows(scores)
    _no_duplicates(pairs)
    paired = {c.name: c for t in dict.fromkeys(pairs["task"]) for c in STS.task_columns(t)}
    pair_columns = list(paired)
    if pair_columns:
        table = pd.concat([table, _wide(pairs, models, pairs["task"] + f" {PAIR_PROTOCOL}", pair_columns)], axis=1)
    if len(pair_columns) > 1:
        table[AVG_PAIRS] = _mean_of_all(table, pair_columns)
    return table, {**typed, **paired}


def _transfer(scores: pd.DataFrame, models) -> tuple[pd.DataFrame, dict[str, Column]]:
    """Each transfer task's accuracy (MRPC's F1 too) per protocol, with the protocol's average; and the columns
    those are recomputed from, typed, by name (pipeline.evaluate.transfer.columns)."""
    test = _test(scores)
    test = test[test["task"].isin(TRANSFER_TASKS) & test["protocol"].isin(list(TRANSFER_PROTOCOLS))]
    accuracy = test[test["metric"] == "accuracy"]
    f1 = test[(test["task"] == "MRPC") & (test["metric"] == "f1")]
    _no_duplicates(pd.concat([accuracy, f1]))
    parts, typed = [], {}
    for protocol in TRANSFER_PROTOCOLS:
        acc, mrpc_f1 = accuracy[accuracy["protocol"] == protocol], f1[f1["protocol"] == protocol]
        tasks = [t for t in TRANSFER_TASKS if t in set(acc["task"])]
        if not tasks:
            continue
        typed.update({c.name: c for t in tasks for c in transfer_columns(t, protocol)})
        columns = [transfer_columns(t, protocol)[0].name for t in tasks]
        accuracy_column, f1_column, _ = transfer_columns("MRPC", protocol)

        def named(frame: pd.DataFrame, which: int, protocol=protocol) -> pd.Series:
            return frame["task"].map(lambda task: transfer_columns(task, protocol)[which].name)

        table = pd.concat(
            [_wide(acc, models, named(acc, 0), columns), _wide(mrpc_f1, models, named(mrpc_f1, 1), [f1_column.name])],
            axis=1,
        )
        if "MRPC" not in tasks:
            table = table.drop(columns=f1_column.name)
        # DeCLUTR's rule: MRPC counts once, as the mean of its accuracy and F1.
        per_task = table[columns].copy()
        if "MRPC" in tasks:
            per_task[accuracy_column.name] = (table[accuracy_column.name] + table[f1_column.name]) / 2
        table[avg_transfer(protocol)] = _mean_of_all(per_task, columns)
        parts.append(table)
    return (pd.concat(parts, axis=1) if parts else pd.DataFrame(index=models)), typed


def _paper_averages(similarity: pd.DataFrame, transfer: pd.DataFrame, typed: dict[str, Column]) -> pd.DataFrame:
    """The papers' averages (PAPER_AVERAGES) on a table with transfer columns of the papers' classifier (SentEval's
    PyTorch one), each missing unless a row has all of its columns; MRPC, where DeCLUTR's counts it once, as the mean
    of its accuracy and F1 under that classifier. `typed`: the transfer columns (_transfer's)."""
    papers = TRANSFER_CLASSIFIERS[0]
    parts = pd.concat([similarity, transfer], axis=1)
    accuracy, f1, both = (c.name for c in transfer_columns("MRPC", papers))
    if {accuracy, f1} <= set(parts.columns):
        parts[both] = (parts[accuracy] + parts[f1]) / 2
    out = pd.DataFrame(index=parts.index)
    if any(c in typed and typed[c].protocol == papers for c in transfer.columns):
        for name, columns in PAPER_AVERAGES.items():
            out[name] = _mean_of_all(parts, columns)
    return out


def _kinds(scores: pd.DataFrame, models) -> tuple[pd.DataFrame, dict[str, Column]]:
    """Each task of the other kinds by its kind's main metric (x 100), then the kind's mean over its tasks; and
    those task columns, typed, by name."""
    test = _test(scores)
    parts, typed = [], {}
    for kind in kinds.all_kinds():
        rows = test[(test["protocol"] == kind.name) & (test["metric"] == kind.main)]
        if rows.empty:
            continue
        _no_duplicates(rows)
        columns = {(c := kind.column(task)).name: c for task in dict.fromkeys(rows["task"])}
        typed.update(columns)
        table = _wide(rows, models, rows["task"].map(lambda task, kind=kind: kind.column(task).name), list(columns))
        table[kind.average] = _mean_of_all(table, list(table.columns))
        parts.append(table)
    return (pd.concat(parts, axis=1) if parts else pd.DataFrame(index=models)), typed


def _analysis(scores: pd.DataFrame, models) -> pd.DataFrame:
    """The analysis kind's columns (pipeline.evaluate.analysis), each its metric's value on the described task's test
    split, unscaled."""
    declared = {c.metric: c for c in SPACE.task_columns(DESCRIBED_TASK)}
    test = scores[(scores["task"] == DESCRIBED_TASK) & (scores["split"] == LEADERBOARD_SPLIT)]
    rows = test[test["metric"].isin(list(declared))]
    present = [c.name for metric, c in declared.items() if metric in set(rows["metric"])]
    return _wide(rows, models, rows["metric"].map(lambda m: declared[m].name), present, scale=1).round(3)


def rank_column(table: pd.DataFrame, rank_by: str | None = None) -> str | None:
    """The column the table is ranked by: `rank_by` when given (an error if the table lacks it), else the first
    average in AVERAGES that some model has a value for, else the first score column with a value, else None."""
    if rank_by is not None:
        if rank_by not in table.columns:
            present = [c for c in rankable_columns() if c in table.columns] + kind_columns(table.columns)
            raise ConfigError(
                f"evaluate.rank_by: this leaderboard has no column {rank_by!r} (it has: {', '.join(present)})"
            )
        return rank_by
    scored = [c for c in table.columns if c in rankable_columns() or is_pair_column(c) or is_kind_column(c)]
    averages = [*AVERAGES, *map(registry.average, registry.names())]
    candidates = [c for c in averages if c in scored] + [c for c in scored if c not in averages]
    return next((c for c in candidates if table[c].notna().any()), None)


def leaderboard(
    scores: pd.DataFrame,
    tasks: Sequence[str] = SIMILARITY_TASKS,
    rank_by: str | None = None,
    items: dict[str, pd.DataFrame] | None = None,
    compare_to: str | None = None,
) -> pd.DataFrame:
    """One row per model: what it is, `<TASK> <protocol>` similarity scores (Spearman x 100) and their averages,
    transfer accuracies (x 100) and their averages, and the STS-B analysis; best first by rank_column(). A model
    trained over several seeds ("<row> (seed s)", pipeline.repeats) is one row, of its mean over seeds, with their
    spread and t-interval (pipeline.leaderboard.seeds).

    Given the models' test items ({model: pipeline.evaluate.items frame}), each score column is followed by its
    bootstrap interval, and given `compare_to` (a row's model) by the row's paired difference to that row
    (pipeline.leaderboard.intervals)."""
    models = pd.unique(scores["model"])
    meta = [c for c in META if c in scores.columns]
    table = scores.groupby("model", sort=False)[meta].first().reindex(models).reset_index()
    (similarity, sts_typed), (transfer, transfer_typed) = _similarity(scores, models, tasks), _transfer(scores, models)
    kind_table, typed = _kinds(scores, models)
    typed = {**sts_typed, **transfer_typed, **typed}
    extra = [similarity, transfer, _paper_averages(similarity, transfer, transfer_typed), kind_table]
    extra += [_analysis(scores, models)]
    table = pd.concat([table, *(e.reset_index(drop=True) for e in extra)], axis=1)
    table = _described(table, scores, models)
    numeric = [c for c in table.columns if c not in (*meta, "model", *DESCRIBED, *ANALYSIS)]
    analysis = [c for c in ANALYSIS if c in table.columns]
    table = aggregate(table, numeric, analysis)  # a row trained over several seeds: their mean, spread, t-interval
    table[numeric] = table[numeric].astype(float).round(2)
    table[analysis] = table[analysis].astype(float).round(3)
    if compare_to is not None and compare_to not in set(table["model"]):
        raise ConfigError(
            f"evaluate.compare_to: no row named {compare_to!r} on this leaderboard "
            f"(rows: {', '.join(map(str, table['model']))})"
        )
    if items is not None:
        table = matched_intervals(table, items, compare_to, typed)  # each row against its readout's reference
    column = rank_column(table, rank_by)
    return table if column is None else ranked(table, column)


def _described(table: pd.DataFrame, scores: pd.DataFrame, models) -> pd.DataFrame:
    """The DESCRIBED columns the scores carry, per model; a row over several seeds is trained on each seed's
    documents, so its seeds' models all carry every seed's (joined in seed order), and each seed's recipe where
    they differ (seeds_recipe), which aggregate keeps."""
    for column in [c for c in DESCRIBED if c in scores.columns]:
        table[column] = scores.groupby("model", sort=False)[column].first().reindex(models).to_numpy()
    for members in groups(table["model"]).values():
        models = [m for _, m in members]
        at, described = table["model"].isin(models), table.set_index("model").loc[models]
        for column in [c for c in (TRAINED_ON, DOCUMENTS, BUDGET) if c in table.columns]:
            values = described[column]
            # One seed's unknown leaves the row's unknown.
            table.loc[at, column] = " + ".join(dict.fromkeys(map(str, values))) if values.notna().all() else None
        if "recipe" in table.columns and described["recipe"].notna().all():
            table.loc[at, "recipe"] = seeds_recipe(list(described["recipe"]), [s for s, _ in members])
    return table


def seeds_recipe(recipes: list[str], seeds: list[int]) -> str:
    """One recipe for a row over seeds that says what each seed ran where they differ (dev selection picks each
    seed's own step): the parts every seed shares, then "per seed:" and each seed's other parts."""
    if len(set(recipes)) == 1:
        return recipes[0]
    parts = [r.split(", ") for r in recipes]
    shared = [p for p in parts[0] if all(p in other for other in parts[1:])]
    own = [", ".join(p for p in mine if p not in shared) or "-" for mine in parts]
    return f"{', '.join(shared)}; per seed: " + " / ".join(f"{s}: {o}" for s, o in zip(seeds, own))


def ranked(table: pd.DataFrame, column: str) -> pd.DataFrame:
    """Best first by `column`, missing last; a stable sort keeps first-appearance order among ties."""
    return table.sort_values(column, ascending=False, na_position="last", kind="stable").reset_index(drop=True)


def _cell(column: str, value) -> str:
    if column == SEEDS:  # a list, or an array read back from Parquet; missing on a row of one model
        listed = isinstance(value, (list, np.ndarray))
        return f"{', '.join(map(str, value))} (n={len(value)})" if listed else MISSING
    if value is None or isinstance(value, (float, np.floating)) and np.isnan(value):
        return MISSING
    if column in ("parameters", "dimension"):
        return f"{int(value):,}"
    if column in ANALYSIS:
        return f"{value:.3f}"
    if isinstance(value, (float, np.floating)):
        return f"{value:.2f}"
    return escaped(value)


def _score_cell(column: str, record: dict) -> str:
    """ "score [lo, hi]" ("mean ±std [lo, hi]" over seeds), then ▲ or ▼ where the difference to the reference row
    is significant."""
    text = _cell(column, record[column])
    lo, hi = record.get(f"{column} {LO}"), record.get(f"{column} {HI}")
    if text == MISSING or lo is None or pd.isna(lo):
        return text
    std = record.get(f"{column} {STD}")
    if std is not None and not pd.isna(std):
        text += f" ±{std:.2f}"
    flag, mark = record.get(f"{column} {SIGNIFICANT}"), ""
    if flag is not None and not pd.isna(flag) and flag:
        mark = " ▲" if record[f"{column} {DIFF_LO}"] > 0 else " ▼"
    return f"{text} [{lo:.2f}, {hi:.2f}]{mark}"


def to_markdown(
    table: pd.DataFrame, absent: list[str], title: str, rank_by: str | None = None, compare_to: str | None = None
) -> str:
    """GitHub-flavoured Markdown: missing scores as "—", intervals inside their score's cell, then notes on every
    column's protocol."""
    derived = derived_columns(table.columns) | {TRAINED_ON, DOCUMENTS, BUDGET}  # said in the notes
    columns = [c for c in table.columns if c not in derived]
    text = ("model", DATA, SEEDS, "kind", "objective", "corpus", READOUT, "recipe")
    lines = [
        f"# {title}",
        "",
        "| " + " | ".join(map(escaped, columns)) + " |",
        "|" + "|".join("---" if c in text else "---:" for c in columns) + "|",
    ]
    for record in table.to_dict("records"):
        lines.append("| " + " | ".join(_score_cell(c, record) for c in columns) + " |")
    # Blank lines between notes, or Markdown renders them as one paragraph.
    return "\n".join(lines) + "\n\n" + "\n\n".join(table_notes(table, absent, rank_by, compare_to)) + "\n"


def json_records(table: pd.DataFrame) -> list[dict]:
    """The table's rows as JSON values: missing as None, and a row over seeds's lists (its seeds, its per-seed
    scores; arrays when read back from Parquet) as lists."""
    return [
        {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in record.items()}
        for record in table.astype(object).where(table.notna(), None).to_dict("records")
    ]


def write_leaderboard(
    table: pd.DataFrame,
    absent: list[str],
    out_dir: str,
    title: str,
    name: str = "leaderboard",
    rank_by: str | None = None,
    compare_to: str | None = None,
) -> dict[str, str]:
    """Write <name>.md/.csv/.parquet/.png into out_dir (any fsspec URL), each file replaced whole;
    return their paths by format."""
    writers: dict[str, Callable[[str], object]] = {
        "md": lambda f: Path(f).write_text(to_markdown(table, absent, title, rank_by, compare_to), encoding="utf-8"),
        "csv": lambda f: table.to_csv(f, index=False),
        "parquet": lambda f: table.to_parquet(f, index=False),
        "png": lambda f: plot(table, title, f, compare_to),
    }
    paths = {fmt: f"{out_dir.rstrip('/')}/{name}.{fmt}" for fmt in writers}
    with tempfile.TemporaryDirectory(prefix="cpipe-leaderboard-") as tmp:
        for fmt, write in writers.items():
            write(f"{tmp}/{name}.{fmt}")
            put_file(f"{tmp}/{name}.{fmt}", paths[fmt])
    return paths


# The picture's geometry, in inches at DPI: one panel per task, PANELS_PER_ROW to a row of panels, each panel as tall
# as its models need; fonts in points, legible when the PNG is shown at its own size.
PANELS_PER_ROW, PANEL_WIDTH, ROW_HEIGHT, PANEL_MARGIN, DPI = 5, 2.2, 0.26, 0.9, 120
TICK_FONT, TITLE_FONT, CAPTION_FONT = 9, 9.5, 9
