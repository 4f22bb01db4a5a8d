"""Each objective trains what its paper trains, checked on a tiny encoder made in the test against
expectations computed here: SimCSE's step is cl_forward over its Linear+Tanh head on [CLS]; CLEAR's MLM
reads the original sentence and never the views; MLM never targets the deletion token; and each
objective's paper defaults apply unless a run sets its own."""

import copy
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch

from pipeline.config import Config, load_config
from pipeline.errors import ConfigError, InputError
from pipeline.model.transformer import SpanEncoder, build_model
from pipeline.train.batching import collate, special_ids, step_inputs
from pipeline.train.config import TrainConfig
from pipeline.train.losses import LOSSES, Loss
from pipeline.train.optim import make_optimizer
from pipeline.train.step import train_step
from tests.conftest import make_document
from tests.helpers import tiny_model_config
from tests.test_losses import cl_forward_loop
from tests.test_train_step import pairs, tiny_encoder

pytestmark = pytest.mark.usefixtures("one_torch_thread")
CONFIGS = Path(__file__).resolve().parent.parent / "configs"


@pytest.fixture(scope="module")
def del_tokenizer(tokenizer):
    """The test tokenizer with CLEAR's deletion token added, as the augment side adds it."""
    tok = copy.deepcopy(tokenizer)
    tok.add_tokens(["<del>"], special_tokens=True)
    return tok


def test_simcse_step_is_cl_forward_over_a_tanh_head_on_cls(tokenizer):
    cfg = TrainConfig(objective="simcse", lr=1e-3, batch_size=8)
    model = tiny_encoder(tokenizer, pooling=cfg.pooling, projection=cfg.projection)
    special = special_ids(tokenizer)
    batch = collate(pairs(tokenizer, positives=1), special, 64, True)
    dense = model.projection[0]

    def embed(ids, mask):  # SimCSE's MLPLayer over the [CLS] state: tanh(W h + b)
        h = model.mlm_model.base_model(input_ids=ids, attention_mask=mask).last_hidden_state[:, 0]
        return torch.tanh(h @ dense.weight.T + dense.bias)

    with torch.no_grad():
        expected = cl_forward_loop(embed(*batch["anchors"]).double(), embed(*batch["positives"]).double(), 0.05)
    optimizer, scheduler = make_optimizer(model, cfg, 10)
    metrics = train_step(model, optimizer, scheduler, batch, cfg, special, torch.Generator().manual_seed(0))
    assert metrics["contrastive_loss"] == pytest.approx(expected, rel=1e-5)
    assert "mlm_loss" not in metrics  # SimCSE has no MLM term


def test_a_loss_declared_once_is_a_train_setting_the_step_trains(tokenizer, monkeypatch):
    """A new loss is one declaration in pipeline.train.losses.LOSSES: the config accepts its name and the step
    calls its function (the card says its label: test_model_card); a name not declared is refused, listing the
    declared ones."""

    def first_pair_distance(anchors, positives, temperature, negatives=None):
        return (anchors[0] - positives[0]).pow(2).sum() / temperature

    monkeypatch.setitem(LOSSES, "toy", Loss("toy", first_pair_distance, "the toy's first-pair distance"))
    cfg = TrainConfig(objective="simcse", loss="toy", lr=1e-3, batch_size=8)
    model = tiny_encoder(tokenizer, pooling=cfg.pooling, projection=cfg.projection)
    special = special_ids(tokenizer)
    batch = collate(pairs(tokenizer, positives=1), special, 64, True)
    with torch.no_grad():  # tiny_encoder has no dropout: this forward is the step's
        z = [model(*batch[side])[0] for side in ("anchors", "positives")]
        expected = float(((z[0][0] - z[1][0]) ** 2).sum() / cfg.temperature)
    optimizer, scheduler = make_optimizer(model, cfg, 10)
    metrics = train_step(model, optimizer, scheduler, batch, cfg, special, torch.Generator().manual_seed(0))
    assert metrics["contrastive_loss"] == pytest.approx(expected, rel=1e-4)
    with pytest.raises(ValueError, match="Input should be 'nt-xent', .*'denoising' or 'toy'"):
        TrainConfig(objective="simcse", loss="toys")


@pytest.mark.parametrize("grad_cache", [None, 3])
def test_simcse_views_of_a_sentence_differ_only_by_their_own_dropout_masks(tokenizer, monkeypatch, grad_cache):
    """SimCSE's positive is the sentence itself, its noise the dropout masks of two forward passes; the
    paper's "fixed 0.1" ablation (one mask for both views, Table 2) collapses it. So each view must draw
    its own masks (with GradCache too, whose second pass replays the first's), and with dropout off the
    two views must be the same vector."""
    seen, info_nce = [], LOSSES["info-nce"].fn

    def recording(queries, keys, temperature, negatives=None):
        seen.append((queries.detach().clone(), keys.detach().clone()))
        return info_nce(queries, keys, temperature, negatives)

    monkeypatch.setitem(LOSSES, "info-nce", LOSSES["info-nce"]._replace(fn=recording))
    cfg = TrainConfig(objective="simcse", lr=1e-3, batch_size=8, grad_cache=grad_cache)
    special = special_ids(tokenizer)
    table = pairs(tokenizer, positives=1)
    batch = collate(
        pa.table({"anchor_ids": table["anchor_ids"], "positive_ids": [[a] for a in table["anchor_ids"].to_pylist()]}),
        special,
        64,
        True,
    )
    for dropout in (0.1, 0.0):
        seen.clear()
        torch.manual_seed(0)
        model = SpanEncoder(
            build_model(
                tiny_model_config(num_layers=2, dropout=dropout),
                tokenizer,
            ),
            cfg.pooling,
            cfg.projection,
        )
        model.train()
        optimizer, scheduler = make_optimizer(model, cfg, 10)
        train_step(model, optimizer, scheduler, batch, cfg, special, torch.Generator().manual_seed(0))
        queries, keys = seen[-1]  # GradCache's second pass: the embeddings the gradients flow from
        cosines = [float(torch.dot(q, k) / (q.norm() * k.norm())) for q, k in zip(queries, keys)]
        if dropout:
            assert max(cosines) < 1 - 1e-5, cosines
        else:
            assert min(cosines) > 1 - 1e-6, cosines


@pytest.mark.parametrize("objective", ["simcse", "declutr"])
def test_the_learning_rate_follows_the_objectives_paper(tokenizer, objective):
    """SimCSE trains under the HF Trainer's default schedule (linear from the peak to 0, no warmup);
    DeCLUTR under ULMFiT's slanted triangular one (Howard & Ruder eq. 3: cut = floor(T cut_frac), rising to
    the peak over the first cut steps, from and back down to peak / ratio)."""
    total, peak = 20, 1e-3
    cfg = TrainConfig(objective=objective, lr=peak)
    optimizer, scheduler = make_optimizer(tiny_encoder(tokenizer), cfg, total)
    seen = []
    for _ in range(total):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    if objective == "simcse":
        expected = [peak * (total - t) / total for t in range(total)]
    else:
        cut, ratio = math.floor(total * 0.1), 32.0
        ps = [t / cut if t < cut else 1 - (t - cut) / (cut * (1 / 0.1 - 1)) for t in range(total)]
        expected = [peak * (1 + p * (ratio - 1)) / ratio for p in ps]
    assert seen == pytest.approx(expected, rel=1e-9)
    assert cfg.schedule in TrainConfig(objective=objective, lr=peak).recipe()


def clear_pairs(tok, del_id: int, n: int = 6) -> pa.Table:
    """CLEAR-shaped rows: view 1 deletes every third word (the deletion token in its place), view 2
    reorders the sentence's halves; original_ids is the sentence itself."""
    rng = np.random.default_rng(2)
    rows = []
    for _ in range(n):
        original = tok(make_document(rng, 25), add_special_tokens=False)["input_ids"][:30]
        view1 = [del_id if i % 3 == 0 else t for i, t in enumerate(original)]
        view2 = original[15:] + original[:15]
        rows.append({"anchor_ids": view1, "positive_ids": [view2], "original_ids": original})
    return pa.Table.from_pylist(rows)


def test_clear_mlm_masks_the_original_sentence_and_never_the_views(del_tokenizer):
    special = special_ids(del_tokenizer)
    table = clear_pairs(del_tokenizer, special["del"])
    cfg = TrainConfig(objective="clear")
    generator = torch.Generator().manual_seed(0)
    n, masked = table.num_rows, 0
    for _ in range(20):
        x = step_inputs(collate(table, special, 64, True), cfg, special, generator)
        assert x["ids"].size(0) == 3 * n  # view 1, view 2, then the original sentence
        assert not x["positions"][: 2 * n].any()
        for i, row in enumerate(table.to_pylist()):
            for r, view in ((i, row["anchor_ids"]), (n + i, row["positive_ids"][0])):
                wrapped = [special["bos"], *view, special["eos"]]
                assert x["ids"][r, : len(wrapped)].tolist() == wrapped  # views enter unmasked
            wrapped = [special["bos"], *row["original_ids"], special["eos"]]
            r = 2 * n + i
            chosen = x["positions"][r].nonzero().flatten().tolist()
            assert all(1 <= t <= len(row["original_ids"]) for t in chosen)  # never <s>, </s> nor padding
            assert [int(x["original"][r, t]) for t in chosen] == [wrapped[t] for t in chosen]  # the labels
            kept = [t for t in range(len(wrapped)) if t not in chosen]
            assert [int(x["ids"][r, t]) for t in kept] == [wrapped[t] for t in kept]
            masked += len(chosen)
    assert masked / (20 * sum(len(o) for o in table.column("original_ids").to_pylist())) == pytest.approx(
        0.15, abs=0.03
    )


def test_clear_step_trains_both_terms_and_refuses_pairs_without_originals(del_tokenizer):
    special = special_ids(del_tokenizer)
    table = clear_pairs(del_tokenizer, special["del"])
    cfg = TrainConfig(objective="clear", lr=1e-3, batch_size=6)
    model = tiny_encoder(del_tokenizer, pooling=cfg.pooling, projection=cfg.projection)
    optimizer, scheduler = make_optimizer(model, cfg, 10)
    metrics = train_step(
        model, optimizer, scheduler, collate(table, special, 64, True), cfg, special, torch.Generator().manual_seed(0)
    )
    assert metrics["mlm_loss"] > 0 and metrics["contrastive_loss"] > 0
    with pytest.raises(InputError, match="original_ids"):
        step_inputs(collate(table.drop(["original_ids"]), special, 64, True), cfg, special, None)


def test_mlm_never_targets_the_deletion_token(del_tokenizer):
    special = special_ids(del_tokenizer)
    assert special["del"] == del_tokenizer.convert_tokens_to_ids("<del>") and special["del"] != special["mask"]
    rng = np.random.default_rng(3)
    rows = []
    for _ in range(16):  # anchors where 40% of the tokens are deletions, as in a del-word view
        ids = del_tokenizer(make_document(rng, 40), add_special_tokens=False)["input_ids"][:40]
        rows.append(
            {"anchor_ids": [special["del"] if rng.random() < 0.4 else t for t in ids], "positive_ids": [ids[:20]]}
        )
    batch = collate(pa.Table.from_pylist(rows), special, 64, True)
    cfg = TrainConfig()  # DeCLUTR: MLM on the anchors
    generator = torch.Generator().manual_seed(0)
    anchors, mask = batch["anchors"]
    is_del = anchors == special["del"]
    chosen_del, chosen, eligible = 0, 0, 0
    for _ in range(300):
        positions = step_inputs(batch, cfg, special, generator)["positions"][: anchors.size(0), : anchors.size(1)]
        chosen_del += int((positions & is_del).sum())
        chosen += int(positions.sum())
        eligible += int((mask.bool() & ~is_del).sum()) - 2 * anchors.size(0)  # less <s> and </s>
    assert chosen_del == 0
    assert chosen / eligible == pytest.approx(0.15, abs=0.01)  # the other tokens are masked at 15% still


def test_special_ids_has_no_deletion_token_without_one(tokenizer):
    assert special_ids(tokenizer)["del"] is None


PAPERS = {  # objective: (loss, head, pooling, mlm, tau), from the papers and their code
    "declutr": ("nt-xent", "none", "mean", True, 0.05),
    "clear": ("nt-xent", "mlp", "mean", True, 0.05),
    "simcse": ("info-nce", "tanh", "cls", False, 0.05),
    "cert": ("info-nce", "mlp", "cls", False, 0.07),
}


@pytest.mark.parametrize("objective", PAPERS)
def test_each_objective_defaults_to_its_paper(objective):
    cfg = TrainConfig(objective=objective)
    assert (cfg.loss, cfg.projection, cfg.pooling, cfg.mlm, cfg.temperature) == PAPERS[objective]
    loss, head, pooling = PAPERS[objective][:3]
    assert f"{loss} tau" in cfg.recipe() and f"{pooling} pooling" in cfg.recipe()
    assert ("no head" if head == "none" else f"{head} head") in cfg.recipe()


def test_a_runs_explicit_setting_wins_and_its_objective_supplies_the_rest():
    cfg = Config(
        train={"objective": "simcse", "temperature": 0.1},
        runs={
            "declutr": {"objective": "declutr"},
            "simcse": {},
            "mean": {"pooling": "mean"},
            "cert": {"objective": "cert", "loss": "nt-xent", "projection": "none"},
        },
    )
    runs = cfg.run_configs()
    # declutr's run inherits nothing simcse-specific from the train section, only what it set explicitly.
    assert (runs["declutr"].loss, runs["declutr"].pooling, runs["declutr"].projection, runs["declutr"].mlm) == (
        "nt-xent",
        "mean",
        "none",
        True,
    )
    assert {r.temperature for r in runs.values()} == {0.1}  # set in the train section: every run's
    assert (runs["simcse"].loss, runs["simcse"].projection, runs["simcse"].pooling) == ("info-nce", "tanh", "cls")
    assert runs["mean"].pooling == "mean" and runs["mean"].projection == "tanh"
    assert (runs["cert"].loss, runs["cert"].projection, runs["cert"].pooling) == ("nt-xent", "none", "cls")
    assert "nt-xent tau 0.1, no head, cls pooling" in runs["cert"].recipe()


def test_momentum_is_validated_and_named_in_the_recipe():
    cfg = TrainConfig(objective="cert", momentum=0.999, memory_bank=4096)
    assert "MoCo m 0.999" in cfg.recipe() and "MoCo queue 4096" in cfg.recipe()
    assert "XBM 8" in TrainConfig(memory_bank=8).recipe()
    for bad in (["train.momentum=1.0"], ["train.momentum=0.9", "train.contrastive=false"]):
        with pytest.raises(ConfigError, match="momentum"):
            load_config(None, bad)


def test_the_profiles_train_what_their_papers_do():
    simcse = load_config(CONFIGS / "simcse-unsup.yaml").run_configs()["simcse"]
    assert (simcse.loss, simcse.projection, simcse.pooling, simcse.mlm) == ("info-nce", "tanh", "cls", False)
    assert (
        simcse.eval_every == 125 and simcse.schedule == "linear"
    )  # SimCSE keeps its best STS-B dev checkpoint, evaluated every 125 steps
    cert = load_config(CONFIGS / "cert.yaml").run_configs()["cert"]
    assert (cert.momentum, cert.temperature, cert.mlm, cert.loss) == (0.999, 0.07, False, "moco")
    assert cert.memory_bank > 0
