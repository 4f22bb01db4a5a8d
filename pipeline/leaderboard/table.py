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
import textwrap
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
from pipeline.leaderboard import bootstrap
from pipeline.leaderboard.intervals import CORRECTION, CORRECTIONS, DIFF_LO, HI, LO, SEEDS, SIGNIFICANT, STD, SUFFIXES
from pipeline.leaderboard.readouts import READOUT, matched_intervals
from pipeline.leaderboard.readouts import notes as readout_notes
from pipeline.leaderboard.seeds import aggregate, groups
from pipeline.readers import registry
from pipeline.readers.names import (
    AVERAGES,
    AVG_DOWNSTREAM_DECLUTR,
    AVG_PAIRS,
    AVG_SIMCSE,
    AVG_STS_SENTEVAL,
    AVG_TRANSFER_SIMCSE,
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
from pipeline.train.devset import SELECTED
from storage import put_file

META = ("kind", "objective", "parameters", "dimension", "corpus", READOUT)  # shown when the scores carry them
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


def _kind_columns(columns) -> list[str]:
    return [c for c in columns if is_kind_column(c)]


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
            present = [c for c in rankable_columns() if c in table.columns] + _kind_columns(table.columns)
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
    return _escaped(value)


def _escaped(value) -> str:
    """A pipe would end the Markdown cell: a model or STS pair file may be named with one."""
    return str(value).replace("|", "\\|")


def _derived(columns) -> set[str]:
    """The interval and comparison columns that follow a score column (shown inside its Markdown cell)."""
    present = set(columns)
    return {c for c in present for s in SUFFIXES if c.endswith(f" {s}") and c[: -len(s) - 1] in present}


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


def _seed_rows(table: pd.DataFrame) -> list[str]:
    if SEEDS not in table.columns:
        return []
    return [m for m, s in zip(table["model"], table[SEEDS]) if isinstance(s, (list, np.ndarray))]


def _interval_notes(table: pd.DataFrame, compare_to: str | None) -> list[str]:
    if not any(c.endswith(f" {LO}") for c in _derived(table.columns)):
        return []
    seed_rows = _seed_rows(table)
    single = ~table["model"].isin(seed_rows)
    bootstrapped = [c for c in _derived(table.columns) if c.endswith(f" {LO}")]
    notes = []
    if table.loc[single, bootstrapped].notna().any().any():
        notes.append(
            f"[lo, hi]{' on a row of one model' if seed_rows else ''}: a 95% percentile bootstrap interval "
            f"over the test items ({bootstrap.B} resamples, seed {bootstrap.SEED}): STS pairs resampled "
            "within each STS12-16 subset, transfer test predictions within each cross-validation fold, and "
            "each score recomputed as its column's protocol does; an average's tasks resampled together "
            "and the average recomputed. Such an interval is one model's, from one evaluation of one "
            "trained model: it covers the choice of test items, not the training seed."
        )
    if seed_rows:
        notes.append(
            f'Rows over several seeds ({", ".join(map(_escaped, seed_rows))}; column "seeds"): each '
            "trained, or initialised, once per seed (seeds or repeats in the config). Their cells are the "
            "mean over seeds ±its standard deviation (n - 1) [a 95% t-interval over the seeds: mean ± "
            "t(0.975, n - 1) x std / sqrt(n)], an average's from each seed's average; the per-seed scores "
            'are in the CSV and Parquet ("<column> per seed"). Such an interval covers the training '
            "seed, not the choice of test items."
        )
    significant = [c for c in _derived(table.columns) if c.endswith(f" {SIGNIFICANT}")]
    if compare_to is not None and significant:
        flags = table[significant]
        n, marked = int(flags.notna().sum().sum()), int(flags.fillna(False).astype(bool).sum().sum())
        families = [k for i in _sections(table) if (k := int(flags.iloc[i].notna().sum().sum()))]
        family = (
            f"each data section's comparisons ({', '.join(map(str, families))})"
            if len(families) > 1
            else f"the table's {n} comparisons"
        )
        notes.append(
            f"▲/▼: higher/lower than the reference row {compare_to} (evaluate.compare_to), decided after "
            f"{CORRECTIONS[CORRECTION]} over {family}, the family: every cell with a difference interval. A "
            f'cell is marked where its adjusted p ("<column> p adjusted" in the CSV) is at most 0.05, '
            "so any false mark in a family has at most a 5% chance. Between two rows of one model each, "
            "the difference's interval is the 95% percentile interval of the paired bootstrap over the test "
            "items (the same resamples for both rows) and p is two-sided on the normal, 2 P(Z > |diff| / se), "
            "se the standard deviation of the resampled differences (not a count of the resamples past 0, "
            f"which could not go below 2 / {bootstrap.B + 1}: too coarse for a correction over many cells). "
            "Where either row is over several seeds both noises count: the difference of the means over "
            "seeds ± t(0.975, df) x sqrt(items' variance + seeds' variance), the items' from the paired "
            "bootstrap (each row's mean over its seeds on each resample), the seeds' from the per-seed "
            "scores (var/n of each row's, or of the "
            "per-seed differences when both rows have the same seeds: a run's seed s starts from the "
            "untrained encoder's seed s), df by Welch-Satterthwaite; a row of one model adds no seed "
            'variance. The "diff lo", "diff hi" (CSV) are each cell\'s unadjusted 95% interval: one that '
            f"excludes 0 may stay unmarked. This table makes {n} such comparisons and marks {marked}."
        )
    return notes


def _data_notes(table: pd.DataFrame) -> list[str]:
    """Which trained rows were trained on which documents, and for how long, where the rows a table compares (each
    data section's with each other, and so with its reference row) differ in them or some have no record of the
    documents: a difference between such rows compares their training data or budget too, not only their
    objectives."""
    if "kind" not in table.columns:
        return []
    notes = []
    if DOCUMENTS in table.columns and (clauses := _section_clauses(table, _trained_on)):
        notes.append(
            "Training data differs between compared rows: " + "; ".join(clauses) + ". Differences between them "
            "also compare their data, not only their objectives and recipes (the recipe says how many pairs each "
            'run read of which; column "documents digest" in the CSV, from each pairs dataset\'s manifest).'
        )
    if BUDGET in table.columns and (clauses := _section_clauses(table, _budgets)):
        notes.append(
            "Training budgets differ between compared rows: " + "; ".join(clauses) + ". Differences between them "
            "also compare how long each trained (its own steps taken and pairs a step; a row continued from "
            'another, "from <row>" in its recipe, trained that row\'s first; column "budget" in the CSV).'
        )
    return notes


def _section_clauses(table: pd.DataFrame, said_of: Callable[[pd.DataFrame], str | None]) -> list[str]:
    """What `said_of` says of each data section's rows, each named by its data where the table has several."""
    sections = _sections(table)
    return [
        f"on data {str(table[DATA].iat[index[0]])[:8]}: {said}" if len(sections) > 1 else said
        for index in sections
        if (said := said_of(table.iloc[index]))
    ]


def _budgets(rows: pd.DataFrame) -> str | None:
    """ "declutr, mlm 1000 steps of 16 pairs; simcse-sup 27 steps of 16 pairs" for one section's trained rows, or
    None when those with a known budget all share it."""
    trained = rows[(rows["kind"] == "trained") & rows[BUDGET].notna()]
    if trained[BUDGET].nunique() < 2:
        return None
    return "; ".join(
        f"{', '.join(map(_escaped, group['model']))} {budget}" for budget, group in trained.groupby(BUDGET, sort=False)
    )


def _trained_on(rows: pd.DataFrame) -> str | None:
    """ "simcse, tsdae on 20,000 sentences of 96 documents (1a2b3c4d); declutr on 275 documents (5e6f7a8b)" for one
    section's trained rows, or None when they are fewer than two or were all trained on the same documents."""
    trained = rows[rows["kind"] == "trained"]
    keys = trained[DOCUMENTS]
    if len(trained) < 2 or keys.notna().all() and keys.nunique() == 1:
        return None
    said = []
    for key, group in trained[keys.notna()].groupby(DOCUMENTS, sort=False):
        digest = " + ".join(k[:8] for k in str(key).split(" + "))
        said.append(f"{', '.join(map(_escaped, group['model']))} on {group[TRAINED_ON].iat[0]} ({digest})")
    if (unknown := trained.loc[keys.isna(), "model"]).size:
        said.append(
            f"{', '.join(map(_escaped, unknown))} on documents not known (pairs made before their manifest "
            "recorded the documents drawn; rebuilding the augment stage records them)"
        )
    return "; ".join(said)


def _notes(table: pd.DataFrame, absent: list[str], rank_by: str | None, compare_to: str | None = None) -> list[str]:
    columns = set(table.columns)
    notes = []
    if absent:
        notes.append(f"Absent from the evaluation data: {', '.join(absent)}.")
    similarity = {f"{t} {p}" for t, protocols in SIMILARITY_PROTOCOLS.items() for p in protocols}
    if columns & similarity or not _kind_columns(columns):  # said of every table but one of other kinds alone
        notes.append(
            "STS columns: Spearman correlation x 100 on test. STS12-16: senteval = mean of per-subset "
            'Spearman of cosine similarity (SentEval\'s "all" mean); simcse = one Spearman of cosine over '
            'all subsets concatenated (SimCSE\'s "all"). STSB and SICKR: cosine = Spearman of cosine '
            "similarity (as SimCSE reports them); senteval = Spearman of SentEval's relatedness regressor on "
            "[|u-v|, u*v], trained on the train split and selected on dev (as DeCLUTR reports them)."
        )
    pair_columns = [c for c in table.columns if is_pair_column(c)]
    if pair_columns:
        notes.append(
            f"STS pair files ({', '.join(pair_columns)}): Spearman x 100 on each file's pairs of the cosine "
            "similarity with its scores, the protocol of STSB cosine (and MTEB's), named by the file."
        )
    averages = []
    if AVG_PAIRS in columns:
        averages.append(f"{AVG_PAIRS} = mean of the STS pair file columns")
    if AVG_SIMCSE in columns:
        averages.append(f"{AVG_SIMCSE} = mean of STS12-16 simcse, STSB cosine and SICKR cosine (SimCSE's table 1)")
    if AVG_STS_SENTEVAL in columns:
        averages.append(f"{AVG_STS_SENTEVAL} = mean of STS12-16, STSB and SICKR senteval (DeCLUTR's protocol)")
    transfer = [avg_transfer(p) for p in TRANSFER_PROTOCOLS if avg_transfer(p) in columns]
    if transfer:
        averages.append(
            f"{' and '.join(transfer)} = mean over the transfer tasks in this table, MRPC counted "
            "once as the mean of its accuracy and F1 (DeCLUTR)"
        )
    if AVG_TRANSFER_SIMCSE in columns:
        averages.append(
            f"{AVG_TRANSFER_SIMCSE} = mean of MR, CR, SUBJ, MPQA, SST2, TREC and MRPC accuracy under "
            "senteval (SimCSE's transfer average, its evaluation.py's)"
        )
    if AVG_DOWNSTREAM_DECLUTR in columns:
        averages.append(
            f"{AVG_DOWNSTREAM_DECLUTR} = mean of CR, MR, MPQA, SUBJ, SST2, TREC, MRPC (its accuracy and "
            "F1 averaged), SICKE, and SICKR, STSB and STS12-16 under senteval: DeCLUTR's \"Downstream "
            '(-SNLI)" less SST5 and COCO, which are not scored here'
        )
    if averages:
        notes.append("; ".join(averages) + f". An average is {MISSING} when a row lacks any of its tasks.")
    if transfer:
        notes.append(
            "Transfer columns: test accuracy x 100 of a logistic regression on frozen embeddings; "
            "senteval = SentEval's PyTorch classifier (the setting DeCLUTR and SimCSE ran), sklearn = "
            "SentEval's scikit-learn path."
        )
    if other := _kind_columns(table.columns):
        main = ", ".join(
            f"{k} by {registry.main_metric(k)}" for k in registry.names() if registry.average(k) in columns
        )
        notes.append(
            f"Other task kinds ({', '.join(other)}): each task's main metric x 100 on its test split ({main}; "
            "by cosine similarity as sentence-transformers' evaluators score them, clustering as V-measure of "
            'seeded k-means); "avg <kind>" = mean '
            f"over that kind's tasks, {MISSING} when a row lacks any. Their other metrics (MRR@10, "
            "Recall@100, MAP@100 of retrieval, accuracy and F1 of pairclass, ...) are in the evaluate "
            "datasets. Retrieval and reranking columns' intervals resample the queries; clustering and "
            "pair classification columns have none."
        )
    if columns & set(ANALYSIS):
        notes.append(
            "On STS-B test: alignment and uniformity (Wang & Isola, 2020, as SimCSE computes them; lower is "
            "better); anisotropy = mean cosine of random pairs of contextual token representations from "
            "different sentences (Ethayarajh, 2019); sentence_anisotropy = mean cosine of two different "
            "sentences' embeddings."
        )
    if "recipe" in columns and table["recipe"].astype(str).str.contains(SELECTED, regex=False).any():
        notes.append(
            f'A recipe that says "{SELECTED} N ... by X" is a dev-selected run (train.eval_every, as '
            "SimCSE's load_best_model_at_end): its model is step N's, the best by X (train.select_by: "
            "sts-dev Spearman of cosine on the dev set, STS-B dev unless train.dev_set names another; "
            "heldout-loss, the contrastive loss on documents held out of training, lower is better; or "
            "a task's main metric on its dev split), not the last."
        )
    notes += _data_notes(table)
    notes += readout_notes(table, compare_to)
    notes += _interval_notes(table, compare_to)
    if DATA in columns:
        notes.append(
            f"{DATA}: the hash of the evaluation data a row was scored on. Scores on different data are not "
            "comparable: the rows are in one section per data, the latest run's first, each ranked, and "
            "its intervals and differences computed, among its own rows alone; a section without the "
            "reference row has no differences."
        )
    if rank_by:
        notes.append(f"Ranked by {rank_by}{' within each data that has it' if len(_sections(table)) > 1 else ''}.")
    return notes


def to_markdown(
    table: pd.DataFrame, absent: list[str], title: str, rank_by: str | None = None, compare_to: str | None = None
) -> str:
    """GitHub-flavoured Markdown: missing scores as "—", intervals inside their score's cell, then notes on every
    column's protocol."""
    derived = _derived(table.columns) | {TRAINED_ON, DOCUMENTS, BUDGET}  # said in the notes
    columns = [c for c in table.columns if c not in derived]
    text = ("model", DATA, SEEDS, "kind", "objective", "corpus", READOUT, "recipe")
    lines = [
        f"# {title}",
        "",
        "| " + " | ".join(map(_escaped, columns)) + " |",
        "|" + "|".join("---" if c in text else "---:" for c in columns) + "|",
    ]
    for record in table.to_dict("records"):
        lines.append("| " + " | ".join(_score_cell(c, record) for c in columns) + " |")
    # Blank lines between notes, or Markdown renders them as one paragraph.
    return "\n".join(lines) + "\n\n" + "\n\n".join(_notes(table, absent, rank_by, compare_to)) + "\n"


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


def plot(table: pd.DataFrame, title: str, path: str, compare_to: str | None = None) -> None:
    """The leaderboard's picture (figure()) as a PNG at `path`."""
    import matplotlib.pyplot as plt

    fig = figure(table, title, compare_to)
    fig.savefig(path, format="png", dpi=DPI, bbox_inches="tight", pad_inches=0.1)
    plt.close(fig)


def figure(table: pd.DataFrame, title: str, compare_to: str | None = None):
    """One panel per task of SimCSE's seven-task average (else per STS pair file), PANELS_PER_ROW to a row: each
    model's score as a dot with its interval as whiskers, in the table's order (best on top); the reference row's
    score as a dashed line, and the dots that differ significantly from it filled (higher) or hollow (lower). The
    figure grows with the tasks and the models, and its titles and caption wrap to its width, so that nothing is
    cut or overlaps from one task to thirty."""
    import matplotlib

    matplotlib.use("Agg")  # no display on servers and workers
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    columns = [c for c in STS_AVERAGES[AVG_SIMCSE] if c in table.columns] or [
        c for c in table.columns if is_pair_column(c)
    ]
    rows = table.iloc[::-1].reset_index(drop=True)
    panels = max(1, len(columns))
    down = -(-panels // PANELS_PER_ROW)
    across = -(-panels // down)  # rows of panels as even as they go: SimCSE's seven as 4 and 3, not 5 and 2
    labels = rows["model"].astype(str)
    if len(_sections(rows)) > 1:  # a model scored on two data is on two rows
        labels += " (" + rows[DATA].astype(str).str[:8] + ")"
    label_width = 0.3 + 0.075 * max((len(s) for s in labels), default=0)  # about a character's width at TICK_FONT
    width = max(4.5, label_width + PANEL_WIDTH * across)
    height = 1.4 + down * (PANEL_MARGIN + ROW_HEIGHT * max(1, len(rows)))
    fig, axes = plt.subplots(
        down, across, sharey=True, squeeze=False, figsize=(width, height), dpi=DPI, layout="constrained"
    )
    for ax in axes.flat[panels:]:  # the last row's empty places
        fig.delaxes(ax)
    for ax, column in zip(axes.flat, columns):
        _panel(ax, rows, column, compare_to)
        ax.set_title(textwrap.fill(column, 26), fontsize=TITLE_FONT)
        ax.xaxis.set_major_locator(MaxNLocator(nbins=3))  # four numbers at most: they never touch in a panel
        ax.tick_params(labelsize=TICK_FONT)
        ax.grid(axis="x", alpha=0.3)
    axes[0][0].set_yticks(np.arange(len(rows)), labels)
    axes[0][0].set_ylim(-0.6, len(rows) - 0.4)
    note = (
        ""
        if compare_to is None
        else (f"; dashed: {compare_to}, green: significantly higher, hollow: significantly lower")
    )
    whiskers = (
        ""
        if not any(f"{c} {LO}" in rows.columns for c in columns)
        else ", 95% interval (t over seeds where a row has several, else bootstrap)"
        if _seed_rows(rows)
        else ", 95% bootstrap interval"
    )
    characters = int(width * 72 / (0.55 * CAPTION_FONT))  # a line's worth at the caption's size
    fig.supxlabel(
        textwrap.fill(f"Spearman x 100 of cosine similarity on test{whiskers}{note}", characters), fontsize=CAPTION_FONT
    )
    fig.suptitle(textwrap.fill(title, int(width * 72 / (0.6 * 12))), fontsize=12)
    return fig


def _panel(ax, rows: pd.DataFrame, column: str, compare_to: str | None) -> None:
    y, x = np.arange(len(rows)), rows[column].to_numpy(dtype=float)
    if f"{column} {LO}" in rows.columns:
        lo, hi = rows[f"{column} {LO}"].to_numpy(dtype=float), rows[f"{column} {HI}"].to_numpy(dtype=float)
        ax.errorbar(x, y, xerr=[x - lo, hi - x], fmt="none", ecolor="0.4", capsize=2, lw=1)
    ax.plot(x, y, "o", color="C0", ms=5)
    if compare_to is not None and compare_to in set(rows["model"]):
        _reference_lines(ax, rows, x, compare_to)
        flags = rows.get(f"{column} {SIGNIFICANT}")
        if flags is not None:
            marked = flags.fillna(False).astype(bool).to_numpy()
            lower = marked & (rows[f"{column} {DIFF_LO}"].to_numpy(dtype=float) < 0)
            ax.plot(x[marked & ~lower], y[marked & ~lower], "o", color="C2", ms=7)
            ax.plot(x[lower], y[lower], "o", mfc="white", mec="C3", ms=7)


def _sections(table: pd.DataFrame) -> list[np.ndarray]:
    """The positions of each data's rows (column DATA), or of all rows in a table without it."""
    if DATA not in table.columns:
        return [np.arange(len(table))]
    return list(table.reset_index(drop=True).groupby(DATA, sort=False).indices.values())


def _reference_lines(ax, rows: pd.DataFrame, x: np.ndarray, compare_to: str) -> None:
    """The reference row's score as a dashed line, spanning only the rows scored on its data when the table has
    several: a row on other data is not compared with it."""
    sections = _sections(rows)
    for index in sections:
        at = [i for i in index if rows["model"].iat[i] == compare_to]
        if at and len(sections) == 1:
            ax.axvline(x[at[0]], color="C3", ls="--", lw=1)
        elif at:
            ax.vlines(x[at[0]], index.min() - 0.5, index.max() + 0.5, color="C3", ls="--", lw=1)
