"""The leaderboard's side of the model cards (pipeline.train.card): each trained row's train run, its recipe
restated as it ran, and each trained model's card rewritten with its scores beside the reference row's."""

from __future__ import annotations

import math
from typing import NamedTuple

import pandas as pd

from pipeline.leaderboard.columns import ANALYSIS, BUDGET, DOCUMENTS, MISSING, TRAINED_ON
from pipeline.leaderboard.intervals import DIFF, DIFF_HI, DIFF_LO, SIGNIFICANT
from pipeline.leaderboard.readouts import references
from pipeline.model.transformer import ST_DIR
from pipeline.readers.names import rankable_columns
from pipeline.train import devset
from pipeline.train.card import Reference, drawn, pairs_per_step, ran_recipe, write_card
from storage import complete, dataset_parts, dataset_path, read_manifest


class TrainedRun(NamedTuple):
    """A leaderboard row's train run: its dataset, that dataset's manifest, its pairs dataset's manifest (None when
    that dataset is gone), and whether the row is the model post-processed (evaluate.baselines.postprocess)."""

    model_dir: str
    train: dict
    pairs: dict | None
    postprocessed: bool


def trained_runs(scores_inputs: dict[str, str], train_stage: str, pairs_stage: str) -> dict[str, TrainedRun]:
    """{row: its TrainedRun} of each trained model among the leaderboard's scores datasets, which name their model,
    and it its pairs, by fingerprint beside them in the same artifacts."""
    runs = {}
    for path in scores_inputs.values():
        manifest = read_manifest(path)
        if manifest["config"]["spec"]["kind"] != "trained":
            continue
        root = dataset_parts(path)[0]
        model_dir = dataset_path(root, train_stage, manifest["inputs"]["model"])
        train = read_manifest(model_dir)
        pairs = dataset_path(root, pairs_stage, train["inputs"]["pairs"])
        runs[manifest["config"]["model"]] = TrainedRun(
            model_dir,
            train,
            read_manifest(pairs) if complete(pairs) else None,
            bool(manifest["config"]["spec"].get("postprocess")),
        )
    return runs


def restated(scores: pd.DataFrame, runs: dict[str, TrainedRun]) -> pd.DataFrame:
    """The leaderboard's scores with each trained row's recipe stating what ran (ran_recipe, and the dev-selected
    step where selection chose one; a post-processed row's recipe is its post-processing) and, in TRAINED_ON and
    DOCUMENTS, what its pairs were made from (missing for pairs made before their manifest recorded it, and for
    rows not trained) and in BUDGET how long it trained."""
    scores = scores.assign(**{TRAINED_ON: None, DOCUMENTS: None, BUDGET: None})
    for model, (_, train, pairs, postprocessed) in runs.items():
        rows = scores["model"] == model
        if not rows.any():
            continue
        text, key = drawn(pairs) if pairs is not None else (None, None)
        for column, value in ((TRAINED_ON, text), (DOCUMENTS, key), (BUDGET, _budget(train))):
            scores.loc[rows, column] = value
        if not postprocessed and "recipe" in scores.columns and pd.notna(said := scores.loc[rows, "recipe"].iloc[0]):
            scores.loc[rows, "recipe"] = _row_recipe(said, train, pairs)
    return scores


def _budget(train: dict) -> str | None:
    if train.get("steps") is None:
        return None
    return f"{train['steps']} steps of {pairs_per_step(train['config']['train'])} pairs"


def _row_recipe(recipe: str, train: dict, pairs: dict | None) -> str:
    recipe = ran_recipe(recipe, train["config"]["train"], train.get("steps"), pairs)
    if (chosen := devset.selected(train)) and devset.SELECTED not in recipe:  # rows scored before it was said
        recipe += f", {chosen}"
    return recipe


def score_texts(scores: dict[str, float | None]) -> dict[str, str]:
    """A leaderboard row's scores (column -> value) as the card lists them: missing ones marked, the analysis
    columns to three decimals, the others to two."""
    return {column: _value(column, value) for column, value in scores.items()}


def _value(column: str, value) -> str:
    if value is None or isinstance(value, float) and math.isnan(value):
        return MISSING
    return f"{value:.3f}" if column in ANALYSIS else f"{value:.2f}"


def update_cards(runs: dict[str, TrainedRun], table: pd.DataFrame, compare_to: str | None = None) -> list[str]:
    """Rewrite the card of every trained model among the leaderboard's rows (`runs`: trained_runs) with its row's
    scores (the table's score, average and analysis columns; not a post-processed row's, which are not the
    model's) beside its reference row's (`compare_to`, read as the row is: readouts.references) with the
    difference, a recipe that states what ran (ran_recipe: a card written before it said max_steps) and the
    parameters the leaderboard counts (a card written before said the init stage's). Returns the model
    directories whose cards it wrote."""
    columns = [c for c in (*rankable_columns(), *ANALYSIS) if c in table.columns]
    rows = table.set_index("model")
    against = dict(zip(table["model"], references(table, compare_to)))
    written = []
    for name, (model_dir, train, pairs, postprocessed) in runs.items():
        info = train.get("card")
        if info is None or postprocessed or name not in rows.index:  # a model trained before cards has none
            continue
        recipe = ran_recipe(info["recipe"], train["config"]["train"], train.get("steps"), pairs)
        info = {**info, "name": name, "recipe": recipe}
        counted = rows.at[name, "parameters"] if "parameters" in rows.columns else None
        if counted is not None and pd.notna(counted) and int(counted) != info.get("parameters"):
            info.update(parameters=int(counted), stored_parameters=None)  # an older card's: the init stage's count
        scores = {c: float(rows.at[name, c]) for c in columns if pd.notna(rows.at[name, c])}
        reference = _reference(rows, name, against.get(name), list(scores))
        write_card(f"{model_dir.rstrip('/')}/{ST_DIR}", info, score_texts(scores), reference)
        written.append(model_dir)
    return written


def _reference(rows: pd.DataFrame, name: str, ref: str | None, columns: list[str]) -> Reference | None:
    """Row `ref`'s scores in `columns` and row `name`'s difference to each: the leaderboard's (with its interval
    and mark) where it took one, else the two scores' difference."""
    if ref is None or ref == name or ref not in rows.index:
        return None
    theirs = {c: rows.at[ref, c] for c in columns}
    return Reference(ref, score_texts(theirs), {c: _difference(rows.loc[name], c, theirs[c]) for c in columns})


def _difference(row: pd.Series, column: str, theirs) -> str:
    if pd.isna(theirs):
        return MISSING
    diff = row.get(f"{column} {DIFF}")
    if diff is None or pd.isna(diff):
        return f"{row[column] - theirs:+.3f}" if column in ANALYSIS else f"{row[column] - theirs:+.2f}"
    lo, hi, flag = row[f"{column} {DIFF_LO}"], row[f"{column} {DIFF_HI}"], row.get(f"{column} {SIGNIFICANT}")
    mark = (" ▲" if lo > 0 else " ▼") if flag is not None and not pd.isna(flag) and flag else ""
    return f"{diff:+.2f} [{lo:+.2f}, {hi:+.2f}]{mark}"
