"""The notes under the leaderboard's Markdown table: each column's protocol, each average's tasks, what its intervals
and marks mean, and where compared rows differ in their training data or budget."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from pipeline.leaderboard import bootstrap
from pipeline.leaderboard.columns import (
    ANALYSIS,
    BUDGET,
    DATA,
    DOCUMENTS,
    MISSING,
    TRAINED_ON,
    data_sections,
    derived_columns,
    escaped,
    kind_columns,
    rows_over_seeds,
)
from pipeline.leaderboard.intervals import CORRECTION, CORRECTIONS, LO, SIGNIFICANT
from pipeline.leaderboard.readouts import notes as readout_notes
from pipeline.readers import registry
from pipeline.readers.names import (
    AVG_DOWNSTREAM_DECLUTR,
    AVG_PAIRS,
    AVG_SIMCSE,
    AVG_STS_SENTEVAL,
    AVG_TRANSFER_SIMCSE,
    SIMILARITY_PROTOCOLS,
    TRANSFER_PROTOCOLS,
    avg_transfer,
    is_pair_column,
)
from pipeline.train.devset import SELECTED


def _interval_notes(table: pd.DataFrame, compare_to: str | None) -> list[str]:
    if not any(c.endswith(f" {LO}") for c in derived_columns(table.columns)):
        return []
    seed_rows = rows_over_seeds(table)
    single = ~table["model"].isin(seed_rows)
    bootstrapped = [c for c in derived_columns(table.columns) if c.endswith(f" {LO}")]
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
            f'Rows over several seeds ({", ".join(map(escaped, seed_rows))}; column "seeds"): each '
            "trained, or initialised, once per seed (seeds or repeats in the config). Their cells are the "
            "mean over seeds ±its standard deviation (n - 1) [a 95% t-interval over the seeds: mean ± "
            "t(0.975, n - 1) x std / sqrt(n)], an average's from each seed's average; the per-seed scores "
            'are in the CSV and Parquet ("<column> per seed"). Such an interval covers the training '
            "seed, not the choice of test items."
        )
    significant = [c for c in derived_columns(table.columns) if c.endswith(f" {SIGNIFICANT}")]
    if compare_to is not None and significant:
        flags = table[significant]
        n, marked = int(flags.notna().sum().sum()), int(flags.fillna(False).astype(bool).sum().sum())
        families = [k for i in data_sections(table) if (k := int(flags.iloc[i].notna().sum().sum()))]
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
    sections = data_sections(table)
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
        f"{', '.join(map(escaped, group['model']))} {budget}" for budget, group in trained.groupby(BUDGET, sort=False)
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
        said.append(f"{', '.join(map(escaped, group['model']))} on {group[TRAINED_ON].iat[0]} ({digest})")
    if (unknown := trained.loc[keys.isna(), "model"]).size:
        said.append(
            f"{', '.join(map(escaped, unknown))} on documents not known (pairs made before their manifest "
            "recorded the documents drawn; rebuilding the augment stage records them)"
        )
    return "; ".join(said)


def table_notes(
    table: pd.DataFrame, absent: list[str], rank_by: str | None, compare_to: str | None = None
) -> list[str]:
    columns = set(table.columns)
    notes = []
    if absent:
        notes.append(f"Absent from the evaluation data: {', '.join(absent)}.")
    similarity = {f"{t} {p}" for t, protocols in SIMILARITY_PROTOCOLS.items() for p in protocols}
    if columns & similarity or not kind_columns(columns):  # said of every table but one of other kinds alone
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
    if other := kind_columns(table.columns):
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
        notes.append(f"Ranked by {rank_by}{' within each data that has it' if len(data_sections(table)) > 1 else ''}.")
    return notes
