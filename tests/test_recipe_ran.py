"""A trained row's recipe states what ran (the steps taken, not max_steps; the pairs read and the documents they
were drawn from; the dev-selected step), in the leaderboard and in the model card, and the leaderboard's notes name
the compared rows that were trained on different documents, or on documents no manifest recorded, or for different
budgets."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from transformers import RobertaConfig

from pipeline.evaluate.stage import trained_about
from pipeline.leaderboard import stage as ranking
from pipeline.leaderboard.table import BUDGET, DOCUMENTS, TRAINED_ON, leaderboard, to_markdown
from pipeline.model.transformer import ST_DIR
from pipeline.stage import run_stage
from pipeline.train import selection
from pipeline.train.card import CARD, render, train_info
from pipeline.train.config import HELDOUT_LOSS, TrainConfig
from pipeline.train.devset import selected
from storage import DatasetWriter, dataset_path, read_manifest

PAIRS = 30  # rows of every pairs dataset here: with batch 4, 7 steps run before they run out
STEPS = PAIRS // 4
RAN = f"{STEPS} steps (max_steps 1000) on {STEPS * 4} of {PAIRS} pairs"
SAME, OTHER = "1a2b3c4d" * 2, "5e6f7a8b" * 2
DRAWN = {  # each objective's pairs manifest record (pipeline.corpus.sentences.record_drawn)
    "simcse": {"documents": 3, "sentences": 30, "documents_digest": SAME},
    "tsdae": {"documents": 3, "sentences": 30, "documents_digest": SAME},
    "declutr": {"documents": 5, "documents_digest": OTHER},
    "cert": None,  # pairs made before the record
}


def _dataset(
    art: Path,
    stage: str,
    fp: str,
    config: dict,
    inputs: dict,
    rows: list[dict] | None = None,
    extra: dict | None = None,
) -> str:
    schema = pa.Table.from_pylist(rows).schema if rows else None
    with DatasetWriter(str(art), stage, fp, config=config, inputs=inputs, schema=schema) as out:
        if rows:
            out.write(rows)
        out.extra.update(extra or {})
    return dataset_path(str(art), stage, fp)


def _scores(model: str, kind: str, stsb: float, recipe: str | None) -> list[dict]:
    common = {
        "model": model,
        "kind": kind,
        "subset": "all",
        "split": "test",
        "metric": "spearman",
        "n": 100,
        "task": "STSB",
        "model_fingerprint": model,
        "data_hash": "d",
        "recipe": recipe,
    }
    return [{**common, "protocol": "cosine", "value": stsb}, {**common, "protocol": "senteval", "value": stsb}]


def _run(objective: str, **settings) -> TrainConfig:
    return TrainConfig(objective=objective, batch_size=4, max_steps=1000, **settings)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, dict[str, str], str]:
    """Pairs, train and evaluate datasets as the stages leave them (hand-built manifests): four objectives that
    each ran STEPS of max_steps 1000, simcse dev-selected, declutr with a card written before recipes said what
    ran; then the leaderboard stage over them and an untrained row. Returns the artifacts, the train datasets by
    row and the leaderboard dataset."""
    art = tmp_path_factory.mktemp("ran")
    init = _dataset(art, "init", "i" * 16, {"base": None}, {})
    trains, inputs = {}, {}
    for i, (objective, record) in enumerate(DRAWN.items()):
        pairs_fp, train_fp = f"{i}" * 16, f"{i}t".ljust(16, "t")
        _dataset(
            art,
            "augment",
            pairs_fp,
            {"objective": objective},
            {},
            rows=[{"anchor_ids": [1, 2]}] * PAIRS,
            extra={"drawn": record} if record else {},
        )
        run = _run(objective, eval_every=2, select_by=HELDOUT_LOSS) if objective == "simcse" else _run(objective)
        extra = {"steps": STEPS, "final_loss": 1.5}
        if objective == "simcse":
            extra.update(
                {"best_step": 4, "select_by": HELDOUT_LOSS, "selected_by": selection.label(HELDOUT_LOSS, 1.25)}
            )
        if objective == "declutr":  # its card says max_steps, as every card written before it said what ran
            extra["card"] = {
                **train_info(
                    run,
                    {"pairs": dataset_path(str(art), "augment", pairs_fp), "init": init},
                    extra,
                    RobertaConfig(),
                    str(tmp_path_factory.mktemp("no-export")),  # no model exported: no parameters said
                ),
                "recipe": run.recipe(),
            }
        trains[objective] = _dataset(
            art, "train", train_fp, {"train": run.model_dump()}, {"pairs": pairs_fp, "init": "i" * 16}, extra=extra
        )
        about = trained_about(run, "corpus", selected(read_manifest(trains[objective])))
        rows = _scores(objective, "trained", 0.5 + i / 10, about["recipe"])
        inputs[f"scores-{objective}"] = _dataset(
            art,
            "evaluate",
            f"{i}e".ljust(16, "e"),
            {"model": objective, "spec": {"kind": "trained"}},
            {"model": train_fp},
            rows=rows,
        )
    inputs["scores-untrained"] = _dataset(
        art,
        "evaluate",
        "u" * 16,
        {"model": "untrained", "spec": {"kind": "untrained"}},
        {"model": "i" * 16},
        rows=_scores("untrained", "untrained", 0.2, None),
    )
    # declutr post-processed (evaluate.baselines.postprocess): its recipe is the post-processing's
    inputs["scores-whitened"] = _dataset(
        art,
        "evaluate",
        "w" * 16,
        {"model": "declutr+whitening", "spec": {"kind": "trained", "postprocess": {"kind": "whitening"}}},
        {"model": "2t".ljust(16, "t")},
        rows=_scores("declutr+whitening", "trained", 0.45, "whitening"),
    )
    return art, trains, run_stage(ranking.STAGE, {"rank_by": None}, inputs, str(art))


def _table(path: str) -> pd.DataFrame:
    return pd.read_parquet(f"{path}/leaderboard.parquet").set_index("model")


def test_the_recipe_states_the_steps_taken_and_the_pairs_and_documents_they_read(built):
    _, _, path = built
    recipes = _table(path)["recipe"]
    assert f", {RAN} from 30 sentences of 3 documents," in recipes["tsdae"]
    assert f", {RAN} from 5 documents," in recipes["declutr"]
    assert f", {RAN}," in recipes["cert"] and " from " not in recipes["cert"].split(", lr")[0]
    assert not any("1000 steps" in r for r in recipes.drop("untrained")), "max_steps said as the steps that ran"


def test_a_dev_selected_recipe_states_the_steps_taken_and_the_selected_one(built):
    _, _, path = built
    recipe = _table(path).at["simcse", "recipe"]
    assert f", {RAN} from 30 sentences of 3 documents," in recipe
    assert recipe.endswith(f"selected at step 4 of {STEPS} by {selection.label(HELDOUT_LOSS, 1.25)}")


def test_the_notes_name_the_rows_trained_on_different_or_unrecorded_documents(built):
    _, _, path = built
    markdown = Path(path, "leaderboard.md").read_text()
    [note] = [n for n in markdown.split("\n\n") if n.startswith("Training data differs")]
    assert "simcse, tsdae on 30 sentences of 3 documents (1a2b3c4d)" in note.replace("tsdae, simcse", "simcse, tsdae")
    assert "declutr, declutr+whitening on 5 documents (5e6f7a8b)" in note
    assert "cert on documents not known" in note
    assert "untrained" not in note, "a row trained on nothing has no training data to differ in"
    table = _table(path)
    assert table.at["declutr", DOCUMENTS] == OTHER and pd.isna(table.at["cert", TRAINED_ON])
    assert "documents digest" not in markdown.split("\n\n")[1], "the digest is a CSV column, not a Markdown one"


def test_an_older_card_is_rewritten_with_what_ran(built):
    _, trains, _ = built
    card = Path(trains["declutr"], ST_DIR, CARD).read_text()
    assert f"| recipe | batch 4, {RAN} from 5 documents, lr" in card
    assert "1000 steps" not in card
    assert "| STSB cosine | 70.00 |" in card, "the model's card took its post-processed row's scores"


def test_a_post_processed_row_keeps_its_recipe_and_is_trained_on_its_models_documents(built):
    _, _, path = built
    table = _table(path)
    assert table.at["declutr+whitening", "recipe"] == "whitening"
    assert table.at["declutr+whitening", DOCUMENTS] == table.at["declutr", DOCUMENTS] == OTHER


def test_a_new_card_states_what_ran(built, tmp_path):
    art, _, _ = built
    pairs = dataset_path(str(art), "augment", "0" * 16)
    info = train_info(
        _run("simcse"),
        {"pairs": pairs, "init": dataset_path(str(art), "init", "i" * 16)},
        {"steps": STEPS},
        RobertaConfig(),
        str(tmp_path),
    )
    assert f"| recipe | batch 4, {RAN} from 30 sentences of 3 documents, lr" in render(info)


def _seeded(digests: dict[str, list[str]]) -> pd.DataFrame:
    """Two rows over seeds 1 and 2, each seed's model trained on the given documents."""
    rows = []
    for row, keys in digests.items():
        for seed, key in zip((1, 2), keys):
            rows += [
                {**r, TRAINED_ON: f"{seed}00 sentences of 9 documents", DOCUMENTS: key}
                for r in _scores(f"{row} (seed {seed})", "trained", 0.5 + seed / 100, "r")
            ]
    return pd.DataFrame(rows)


def test_rows_over_seeds_compare_every_seeds_documents():
    same = leaderboard(_seeded({"a": ["x" * 16, "y" * 16], "b": ["x" * 16, "y" * 16]}))
    assert same.set_index("model").at["a", DOCUMENTS] == f"{'x' * 16} + {'y' * 16}"
    assert "Training data differs" not in to_markdown(same, [], "t")
    differ = leaderboard(_seeded({"a": ["x" * 16, "y" * 16], "b": ["x" * 16, "z" * 16]}))
    note = to_markdown(differ, [], "t")
    assert "a on 100 sentences of 9 documents + 200 sentences of 9 documents (xxxxxxxx + yyyyyyyy)" in note
    assert "b on 100 sentences of 9 documents + 200 sentences of 9 documents (xxxxxxxx + zzzzzzzz)" in note


def test_a_row_over_seeds_says_each_seeds_selected_step():
    ran = "batch 4, 1000 steps, cls pooling"
    recipes = {seed: f"{ran}, selected at step {step} of 1000 by sts-dev" for seed, step in ((0, 1000), (1, 500))}
    scores = pd.DataFrame(
        [r for seed, recipe in recipes.items() for r in _scores(f"a (seed {seed})", "trained", 0.5, recipe)]
        + [r for seed in (0, 1) for r in _scores(f"b (seed {seed})", "trained", 0.5, ran)]
    )
    table = leaderboard(scores).set_index("model")
    assert table.at["a", "recipe"] == (
        f"{ran}; per seed: 0: selected at step 1000 of 1000 by sts-dev / 1: selected at step 500 of 1000 by sts-dev"
    )
    assert table.at["b", "recipe"] == ran, "seeds that ran the same recipe keep it as it is"


def test_each_trained_row_says_its_budget_and_the_notes_name_rows_that_differ_in_it(built):
    _, _, path = built
    table = _table(path)
    assert set(table.loc[["simcse", "tsdae", "declutr", "cert"], BUDGET]) == {f"{STEPS} steps of 4 pairs"}
    assert pd.isna(table.at["untrained", BUDGET])
    assert "Training budgets differ" not in Path(path, "leaderboard.md").read_text(), "every row ran the same"

    budgets = {"a": "1000 steps of 16 pairs", "b": "1000 steps of 16 pairs", "sup": "27 steps of 16 pairs"}
    rows = [{**r, BUDGET: b} for m, b in budgets.items() for r in _scores(m, "trained", 0.5, "r")]
    markdown = to_markdown(leaderboard(pd.DataFrame(rows + _scores("untrained", "untrained", 0.2, None))), [], "t")
    [note] = [n for n in markdown.split("\n\n") if n.startswith("Training budgets differ")]
    assert "a, b 1000 steps of 16 pairs; sup 27 steps of 16 pairs" in note
    assert "untrained" not in note and "| budget |" not in markdown
