"""The model card of a trained model's sentence-transformers/ directory: what it states, that sentence-transformers
and the Hub's card parser read it, and that the leaderboard stage writes the model's scores into it."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from transformers import AutoConfig

from pipeline.leaderboard import stage as ranking
from pipeline.leaderboard.cards import score_texts, update_cards
from pipeline.model.exported import Encoder
from pipeline.model.transformer import HF_DIR, ST_DIR
from pipeline.stage import run_stage
from pipeline.train.card import CARD, render, train_info, write_card
from pipeline.train.config import TrainConfig
from pipeline.train.losses import LOSSES, Loss
from storage import DatasetWriter, dataset_path, read_manifest
from tests.helpers import tiny_model

INFO = {
    "objective": "clear",
    "augmentation": "del-word+reorder",
    "contrastive": True,
    "loss": "nt-xent",
    "temperature": 0.05,
    "mlm": True,
    "mlm_probability": 0.15,
    "pooling": "mean",
    "recipe": "batch 4, 6 steps, lr 0.001, nt-xent tau 0.05",
    "base_model": None,
    "architecture": "RoBERTa from scratch: 1 layers, hidden size 32, 2 heads, feed-forward 64",
    "parameters": 12345,
    "pairs": {"fingerprint": "aaaa1111bbbb2222", "rows": 480},
    "sources": {"documents": {"fingerprint": "cccc3333dddd4444", "stage": "filter", "rows": 20}},
    "steps": 6,
    "final_loss": 1.23456,
    "best_step": 4,
    "best_dev_spearman": 0.61234,
}


def test_the_card_states_every_training_fact():
    card = render(INFO)
    for fact in (
        "CLEAR",
        "del-word+reorder",
        "NT-Xent",
        "temperature 0.05",
        "masked language modelling (15% of tokens",
        "none: from scratch",
        "RoBERTa from scratch: 1 layers, hidden size 32",
        "12,345",
        INFO["recipe"],
        "`aaaa1111bbbb2222`: 480 pairs",
        "filter documents `cccc3333dddd4444` (20 rows)",
        "| steps | 6 (final loss 1.2346) |",
        "0.6123 Spearman at step 4",
        "mean-pooled",
        "Not scored yet",
    ):
        assert fact in card, fact
    assert card.startswith("---\nlibrary_name: sentence-transformers\n")


def test_the_card_names_a_loss_by_its_declared_label(monkeypatch):
    """The loss row is the label the loss declares (pipeline.train.losses.LOSSES); a loss since removed, by its
    name."""
    monkeypatch.setitem(LOSSES, "toy", Loss("toy", lambda *tensors: None, "the toy's first-pair distance"))
    assert "| loss | the toy's first-pair distance, temperature 0.05 + masked" in render({**INFO, "loss": "toy"})
    assert "| loss | gone, temperature 0.05 + masked" in render({**INFO, "loss": "gone"})


def test_a_base_model_is_named_and_a_run_without_dev_evaluation_says_so():
    card = render(
        {
            **INFO,
            "base_model": "roberta-base",
            "architecture": "roberta-base (continued pretraining)",
            "best_step": None,
            "best_dev_spearman": None,
        }
    )
    assert "| base model | roberta-base |" in card and "base_model: roberta-base" in card
    assert "not evaluated during training" in card


def test_scores_are_listed_with_missing_ones_marked():
    card = render(INFO, score_texts({"avg STS (SimCSE 7)": float("nan"), "STSB cosine": 80.0, "uniformity": -2.1234}))
    assert "| STSB cosine | 80.00 |" in card and "| uniformity | -2.123 |" in card
    assert "| avg STS (SimCSE 7) | — |" in card and "Not scored yet" not in card


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> tuple[Path, str]:
    """Finished decontaminate, augment and init datasets and a train dataset holding a tiny exported model whose card
    train_info and write_card wrote as train.run does; returns the artifacts and the train dataset's path."""
    art = tmp_path_factory.mktemp("card")

    def dataset(stage, fp, config, inputs, rows=None, extra=None, build=None):
        schema = pa.Table.from_pylist(rows).schema if rows else None  # a dataset counts its rows given a schema
        with DatasetWriter(str(art), stage, fp, config=config, inputs=inputs, schema=schema) as out:
            if rows:
                out.write(rows)
            out.extra.update(extra or {})
            if build:
                build(out)
        return dataset_path(str(art), stage, fp)

    dataset("decontaminate", "f" * 16, {}, {}, rows=[{"text": f"doc {i}"} for i in range(20)])
    pairs = dataset(
        "augment",
        "a" * 16,
        {},
        {"documents": "f" * 16, "tokenizer": "t" * 16},
        rows=[{"anchor_ids": [1, 2]} for _ in range(48)],
    )
    model = {"base": None, "hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64}
    init = dataset("init", "i" * 16, model, {}, extra={"parameters": 999})
    cfg = TrainConfig(batch_size=4, max_steps=6)

    def train(out):
        tiny_model(Path(out.local_dir))
        out.extra.update({"steps": 6, "final_loss": 2.5, "best_step": 6, "best_dev_spearman": 0.5})
        out.extra["card"] = train_info(
            cfg,
            {"pairs": pairs, "init": init},
            out.extra,
            AutoConfig.from_pretrained(f"{out.local_dir}/{HF_DIR}"),
            f"{out.local_dir}/{ST_DIR}",
        )
        write_card(f"{out.local_dir}/{ST_DIR}", out.extra["card"])

    return art, dataset(
        "train", "m" * 16, {"train": cfg.model_dump()}, {"pairs": "a" * 16, "init": "i" * 16}, build=train
    )


def test_the_trained_model_card_traces_its_inputs_and_loads(artifacts):
    from huggingface_hub import ModelCard
    from sentence_transformers import SentenceTransformer

    _, model_dir = artifacts
    card = Path(model_dir, ST_DIR, CARD).read_text()
    # the exported model's parameters as the leaderboard counts them (not the init stage's 999, its MLM head's
    # too), and what its weights file holds besides: the pooler an AutoModel saves (hidden x hidden + hidden)
    embedding, hidden = Encoder(model_dir).parameters, 32
    for fact in (
        "DeCLUTR",
        "none: from scratch",
        "1 layers, hidden size 32, 2 heads, feed-forward 64",
        f"| parameters | {embedding:,} that embed, as the leaderboard counts them",
        f"the weights files hold {embedding + hidden * hidden + hidden:,}",
        "`aaaaaaaaaaaaaaaa`: 48 pairs",
        "decontaminate documents `ffffffffffffffff` (20 rows)",
        "| steps | 6",
        "0.5000 Spearman at step 6",
        RAN,
    ):
        assert fact in card, fact
    assert ModelCard.load(Path(model_dir, ST_DIR, CARD)).data.library_name == "sentence-transformers"
    model = SentenceTransformer(str(Path(model_dir, ST_DIR)), device="cpu")
    assert model.encode(["a b", "c"]).shape == (2, 32)
    assert read_manifest(model_dir)["card"]["pairs"] == {"fingerprint": "a" * 16, "rows": 48}


# The fixture's run as its recipe states it: the 6 steps it took, of batch 4, read 24 of its 48 pairs.
RAN = TrainConfig(batch_size=4, max_steps=6).recipe().replace(", 6 steps,", ", 6 steps on 24 of 48 pairs,")


def _scores(model: str, kind: str, stsb: float) -> list[dict]:
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
    }
    return [{**common, "protocol": "cosine", "value": stsb}, {**common, "protocol": "senteval", "value": stsb - 0.1}]


def test_a_continued_runs_card_names_the_run_it_continues_and_keeps_its_base(artifacts):
    art, parent = artifacts
    pairs = dataset_path(str(art), "augment", "a" * 16)
    cfg = TrainConfig(objective="simcse", batch_size=4, max_steps=3)
    info = train_info(
        cfg,
        {"pairs": pairs, "init": parent},
        {"steps": 3},
        AutoConfig.from_pretrained(f"{parent}/{HF_DIR}"),
        f"{parent}/{ST_DIR}",
    )
    card = render(info)
    assert "none: from scratch" in card and "1 layers, hidden size 32" in card
    assert f"| parameters | {Encoder(parent).parameters:,} that embed" in card
    assert f"train run `{'m' * 16}` ({RAN})" in card


def test_the_architecture_is_the_trained_models_own_whatever_the_init_config_says(artifacts, tmp_path):
    art, parent = artifacts
    with DatasetWriter(str(tmp_path), "init", "bare", config={}, inputs={}) as out:
        pass
    cfg = TrainConfig(batch_size=4, max_steps=3)
    info = train_info(
        cfg,
        {"pairs": dataset_path(str(art), "augment", "a" * 16), "init": out.path},
        {"steps": 3},
        AutoConfig.from_pretrained(f"{parent}/{HF_DIR}"),
        str(tmp_path),
    )
    assert info["base_model"] is None
    assert info["architecture"] == "Roberta from scratch: 1 layers, hidden size 32, 2 heads, feed-forward 64"


def _ranked(art: Path, config: dict) -> None:
    """The leaderboard stage with `config` over the trained model's scores (STS-B 80 by cosine, 70 by SentEval's
    regressor) and a random encoder's (20 and 10), no test items kept."""
    inputs = {}
    for name, kind, fp, model_input, stsb in (
        ("declutr", "trained", "s" * 16, {"model": "m" * 16}, 0.8),
        ("random", "random", "r" * 16, {}, 0.2),
    ):
        rows = _scores(name, kind, stsb)
        with DatasetWriter(
            str(art),
            "evaluate",
            fp,
            config={"model": name, "spec": {"kind": kind}},
            inputs=model_input,
            schema=pa.Table.from_pylist(rows).schema,
        ) as out:
            out.write(rows)
        inputs[f"scores-{name}"] = dataset_path(str(art), "evaluate", fp)
    run_stage(ranking.STAGE, config, inputs, str(art))


def test_the_leaderboard_writes_each_trained_models_scores_into_its_card(artifacts):
    art, model_dir = artifacts
    before = read_manifest(model_dir)
    _ranked(art, {"rank_by": None})
    card = Path(model_dir, ST_DIR, CARD).read_text()
    assert "# declutr: a contrastive sentence encoder" in card
    assert "| STSB cosine | 80.00 |" in card and "| STSB senteval | 70.00 |" in card
    assert "20.00" not in card, "another model's scores"
    assert "Not scored yet" not in card and "0.5000 Spearman at step 6" in card
    assert read_manifest(model_dir) == before, "the card's rewrite touched the dataset's manifest"
    assert not list(Path(model_dir, ST_DIR).glob(".*.tmp")), "a temporary file left beside the card"


def test_a_model_outside_the_table_keeps_its_card(artifacts, tmp_path):
    import pandas as pd

    _, model_dir = artifacts
    card = Path(model_dir, ST_DIR, CARD).read_text()
    assert update_cards({}, pd.DataFrame({"model": []})) == []
    assert Path(model_dir, ST_DIR, CARD).read_text() == card


def test_the_card_sets_the_reference_rows_scores_and_the_difference_beside_the_models(artifacts):
    art, model_dir = artifacts
    _ranked(art, {"rank_by": None, "compare_to": "random"})
    card = Path(model_dir, ST_DIR, CARD).read_text()
    assert "reference row, random," in card and "| column | score | random | difference [95% interval] |" in card
    # no test items kept: the scores' difference, without an interval
    assert "| STSB cosine | 80.00 | 20.00 | +60.00 |" in card and "| STSB senteval | 70.00 | 10.00 | +60.00 |" in card


def test_the_cards_difference_is_the_leaderboards_with_its_interval_and_mark(artifacts):
    import pandas as pd

    from pipeline.leaderboard.cards import TrainedRun

    _, model_dir = artifacts
    train = read_manifest(model_dir)
    table = pd.DataFrame(
        {
            "model": ["declutr", "untrained"],
            "parameters": [4321, 4321],
            "STSB senteval": [58.27, 59.32],
            "STSB senteval diff": [-1.05, None],
            "STSB senteval diff lo": [-2.1, None],
            "STSB senteval diff hi": [-0.02, None],
            "STSB senteval significant": pd.array([True, None], dtype="boolean"),
            "STSB cosine": [61.0, 60.5],
            "STSB cosine diff": [0.5, None],
            "STSB cosine diff lo": [-0.4, None],
            "STSB cosine diff hi": [1.4, None],
            "STSB cosine significant": pd.array([False, None], dtype="boolean"),
        }
    )
    run = TrainedRun(model_dir, train, None, False)
    assert update_cards({"declutr": run}, table, "untrained") == [model_dir]
    card = Path(model_dir, ST_DIR, CARD).read_text()
    assert "| STSB senteval | 58.27 | 59.32 | -1.05 [-2.10, -0.02] ▼ |" in card
    assert "| STSB cosine | 61.00 | 60.50 | +0.50 [-0.40, +1.40] |" in card
    # the leaderboard's parameter count replaces one the card's run said otherwise (a card written before)
    assert "| parameters | 4,321 |" in card
