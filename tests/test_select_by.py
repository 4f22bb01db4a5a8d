"""train.select_by without STS labels: documents held out of training by their doc_id's hash, the held-out
loss and geometry against loops over their definitions, the loop keeping the best-scoring step's weights on
its own clock, and the one-line config errors."""

from __future__ import annotations

import hashlib
import json
import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from pipeline.augment import stage as augment
from pipeline.augment.config import AugmentConfig
from pipeline.augment.heldout import read_heldout
from pipeline.config import Config, load_config
from pipeline.errors import ConfigError, InputError
from pipeline.evaluate import retrieval
from pipeline.model.exported import embed
from pipeline.stage import run_stage
from pipeline.train import loop, selection
from pipeline.train.batching import special_ids
from pipeline.train.card import render
from pipeline.train.config import TrainConfig
from pipeline.train.heldout import heldout_batches, heldout_scores
from pipeline.train.scorers import make_scorer, task_score
from storage import read_manifest, read_table
from tests.helpers import corpus_and_tokenizer
from tests.test_model_card import INFO
from tests.test_train_step import pairs, tiny_encoder

FRACTION = 0.3


def expected_heldout(doc_id: str) -> bool:
    return int(hashlib.sha256(doc_id.encode()).hexdigest()[:16], 16) / 2**64 < FRACTION


@pytest.fixture(scope="module")
def documents(tmp_path_factory):
    return corpus_and_tokenizer(tmp_path_factory.mktemp("heldout"), n_docs=12, n_words=80)


def test_heldout_documents_are_never_trained_on_and_the_same_whatever_the_seed(documents):
    docs, tok, art = documents
    held = {}
    for seed in (0, 1):
        config = augment.config(
            Config(augment=AugmentConfig(epochs=2, min_chars=10, heldout_fraction=FRACTION, seed=seed)),
            TrainConfig(objective="simcse"),
        )
        path = run_stage(augment.STAGE, config, {"documents": docs, "tokenizer": tok}, art)
        trained, heldout = read_table(path).to_pylist(), read_heldout(path).to_pylist()
        held[seed] = {r["doc_id"] for r in heldout}
        assert not held[seed] & {r["doc_id"] for r in trained}, "a held-out document's pair in the training shards"
        assert {r["epoch"] for r in heldout} == {0} and {r["epoch"] for r in trained} == {0, 1}
        everything = {r["doc_id"] for r in trained} | held[seed]
        assert held[seed] == {d for d in everything if expected_heldout(d)}
        assert read_manifest(path)["counts"]["heldout_pairs"] == len(heldout)
    assert held[0] == held[1] and 0 < len(held[0]) < len(everything), "the split should hold some documents out"
    # Without the setting the config (so the fingerprint) is what it was before it existed.
    assert "heldout_fraction" not in augment.config(Config(), TrainConfig(objective="simcse"))


def test_pairs_with_too_few_heldout_pairs_build_and_only_a_run_scored_on_them_fails_naming_them(documents):
    """Every objective's pairs hold the same documents out; one whose documents fall outside the held-out set
    (here: a fraction too small to hold any out) still builds, and reading its held-out pairs to score a run by
    them is the one-line error."""
    docs, tok, art = documents
    config = augment.config(
        Config(augment=AugmentConfig(epochs=1, min_chars=10, heldout_fraction=1e-9)), TrainConfig(objective="simcse")
    )
    path = run_stage(augment.STAGE, config, {"documents": docs, "tokenizer": tok}, art)
    assert read_manifest(path)["heldout"]["pairs"] == 0 and read_table(path).num_rows > 0
    with pytest.raises(
        InputError,
        match=rf"^train: {path} holds 0 held-out pair\(s\); the held-out loss needs "
        r"at least 2: raise augment.heldout_fraction$",
    ):
        read_heldout(path)


class Lookup(nn.Module):
    """An encoder whose [CLS] embedding of a row is a hand-built vector: the row's first token's."""

    def __init__(self, table: torch.Tensor, projection: nn.Module | None = None):
        super().__init__()
        self.mlm_model = nn.Module()
        self.mlm_model.base_model = self
        self.emb = nn.Embedding.from_pretrained(table)
        self.pooling, self.projection = "cls", projection

    def forward(self, input_ids, attention_mask):
        return SimpleNamespace(last_hidden_state=self.emb(input_ids))


def rows(ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    t = torch.tensor(ids).unsqueeze(1)
    return t, torch.ones_like(t)


def cos(u, v) -> float:
    return sum(a * b for a, b in zip(u, v)) / math.sqrt(sum(a * a for a in u) * sum(b * b for b in v))


def info_nce_loop(a: list, p: list, t: float) -> float:
    return sum(
        -math.log(math.exp(cos(a[i], p[i]) / t) / sum(math.exp(cos(a[i], q) / t) for q in p)) for i in range(len(a))
    ) / len(a)


def nt_xent_loop(a: list, p: list, t: float) -> float:
    z, n = a + p, len(a)
    return sum(
        -math.log(
            math.exp(cos(z[i], z[(i + n) % (2 * n)]) / t)
            / sum(math.exp(cos(z[i], z[k]) / t) for k in range(2 * n) if k != i)
        )
        for i in range(2 * n)
    ) / (2 * n)


def unit(u: list) -> list:
    norm = math.sqrt(sum(x * x for x in u))
    return [x / norm for x in u]


def test_heldout_loss_alignment_and_uniformity_equal_loops_over_their_definitions():
    g = torch.Generator().manual_seed(0)
    table = torch.randn(16, 5, generator=g, dtype=torch.float64).float()
    v = table.double().tolist()
    # Two batches of three pairs; anchors are rows 0-5, each with two positives (rows 6-15 and 0-1) averaged.
    anchors, positives = [[0, 1, 2], [3, 4, 5]], [[6, 7, 8, 9, 10, 11], [12, 13, 14, 15, 0, 1]]
    batches = [{"anchors": rows(a), "positives": rows(p), "num_positives": 2} for a, p in zip(anchors, positives)]
    mean = [[[(x + y) / 2 for x, y in zip(v[p[2 * i]], v[p[2 * i + 1]])] for i in range(3)] for p in positives]
    for loss, loop_ in (("info-nce", info_nce_loop), ("nt-xent", nt_xent_loop)):
        got = heldout_scores(Lookup(table), batches, loss, 0.05)
        expected = sum(loop_([v[i] for i in a], m, 0.05) for a, m in zip(anchors, mean)) / 2
        assert got["heldout_loss"] == pytest.approx(expected, rel=1e-5)
    # The head is the loss's, as in training; the geometry is the exported embedding's (no head).
    head = nn.Linear(5, 5)
    with_head = heldout_scores(Lookup(table, head), batches, "info-nce", 0.05)
    projected = head(table).detach().double().tolist()
    pmean = [
        [[(x + y) / 2 for x, y in zip(projected[p[2 * i]], projected[p[2 * i + 1]])] for i in range(3)]
        for p in positives
    ]
    assert with_head["heldout_loss"] == pytest.approx(
        sum(info_nce_loop([projected[i] for i in a], m, 0.05) for a, m in zip(anchors, pmean)) / 2, rel=1e-5
    )
    pairs_ = [(a[i], p[2 * i + j]) for a, p in zip(anchors, positives) for i in range(3) for j in range(2)]
    align = sum(sum((x - y) ** 2 for x, y in zip(unit(v[i]), unit(v[k]))) for i, k in pairs_) / len(pairs_)
    flat = [i for a in anchors for i in a]
    distinct = [(flat[i], flat[j]) for i in range(6) for j in range(i + 1, 6)]
    uniform = math.log(
        sum(math.exp(-2 * sum((x - y) ** 2 for x, y in zip(unit(v[i]), unit(v[k])))) for i, k in distinct)
        / len(distinct)
    )
    assert with_head["heldout_alignment"] == pytest.approx(align, rel=1e-5)
    assert with_head["heldout_uniformity"] == pytest.approx(uniform, rel=1e-5)


def test_heldout_batches_drop_a_short_last_batch_unless_it_is_the_only_one(tokenizer):
    special = special_ids(tokenizer)
    table = pairs(tokenizer, n=7)
    assert [b["anchors"][0].size(0) for b in heldout_batches(table, special, 64, 3)] == [3, 3]
    assert [b["anchors"][0].size(0) for b in heldout_batches(table, special, 64, 16)] == [7]


def test_the_loop_exports_the_lowest_heldout_loss_scored_on_its_own_clock(tokenizer, tmp_path):
    """eval_every 2, checkpoint_every 3: scored at 2, 4, 6, 8; checkpointed at 3, 6, 8; the best (step 4) is
    no checkpoint's step, and its weights ride in every checkpoint after it, a resumed run's too."""
    tiny_encoder(tokenizer).mlm_model.save_pretrained(tmp_path / "init")
    cfg = TrainConfig(
        batch_size=4,
        max_length=64,
        lr=3e-3,
        checkpoint_every=3,
        eval_every=2,
        torch_threads=1,
        select_by="heldout-loss",
    )
    config = loop.WorkerConfig(
        train=cfg,
        init=str(tmp_path / "init"),
        total_steps=8,
        special=special_ids(tokenizer),
        dev={"by": "heldout-loss"},
    )
    table = pairs(tokenizer, n=32)
    losses = {2: 0.9, 4: 0.5, 6: 0.7, 8: 0.6}
    weights = {}

    def run(steps: list[int], saved=None) -> list[dict]:
        """The loop's checkpoints; its scorer expects to be called at `steps`, and keeps each step's weights."""
        order, reports = iter(steps), []

        def scorer(model):
            def score():
                step = next(order)
                weights[step] = {k: v.detach().clone() for k, v in model.state_dict().items()}
                return {"heldout_loss": losses[step], "heldout_alignment": 0.0, "heldout_uniformity": 0.0}

            return score

        loop.run_loop(
            config,
            rank=0,
            world=1,
            saved=saved,
            shard=lambda n: (table.slice(i, n) for i in range(0, table.num_rows - n + 1, n)),
            prepare_model=lambda model, ddp: model,
            report=lambda metrics, d: reports.append(loop.load_state(d)),
            scorer=scorer,
        )
        assert next(order, None) is None, "a step went unscored"
        return reports

    reports = run([2, 4, 6, 8])
    assert [r["step"] for r in reports] == [3, 6, 8]
    scored = [m["step"] for m in reports[-1]["metrics"] if m["heldout_loss"] is not None]
    assert scored == [2, 4, 6, 8]
    best = reports[-1]["best"]
    assert best["step"] == 4 and best["score"] == 0.5
    for k, w in weights[4].items():
        torch.testing.assert_close(best["model"][k], w)
    assert any(not torch.equal(best["model"][k], reports[-1]["model"][k]) for k in weights[4]), (
        "the last weights should differ from the best for the test to mean much"
    )
    assert reports[0]["best"]["step"] == 2  # step 3's checkpoint carries step 2's weights, the best so far
    resumed = run([8], saved=reports[1])  # from step 6: scores step 8 only, and keeps step 4 as best
    assert resumed[-1]["best"]["step"] == 4


def one_line_error(match: str, call, *args) -> None:
    with pytest.raises(ConfigError, match=match) as e:
        call(*args)
    assert "\n" not in str(e.value)


def test_select_by_errors_are_one_line(tmp_path):
    one_line_error(
        r"heldout-loss .*augment\.heldout_fraction above 0",
        load_config,
        None,
        ["train.eval_every=10", "train.select_by=heldout-loss", "runs={r: {}}"],
    )
    one_line_error(r"select_by 'sts-dev' .*set eval_every", load_config, None, ["train.select_by=sts-dev"])
    one_line_error(
        r"contrastive: false",
        load_config,
        None,
        ["augment.heldout_fraction=0.1", "runs={m: {contrastive: false, eval_every: 5, select_by: heldout-loss}}"],
    )
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "mine.pairclass.jsonl").write_text(
        '{"sentence1": "a", "sentence2": "b", "label": 1}\n{"sentence1": "c", "sentence2": "d", "label": 0}\n'
    )
    train = TrainConfig(eval_every=5, select_by="theirs", dev_set=str(tmp_path / "dev"))
    one_line_error(
        r"select_by 'theirs': no task of that name in .*dev \(tasks there: mine\)",
        selection.stage_config,
        train,
        None,
        64,
    )
    found = selection.stage_config(train.model_copy(update={"select_by": "mine"}), None, 64)
    assert found["kind"] == "pairclass" and found["task"] == "mine"
    # The same file as evaluation data is its test split, whether found there or copied into dev_set.
    one_line_error(
        r"mine\.pairclass\.jsonl is the pairclass task's test split",
        selection.stage_config,
        train.model_copy(update={"select_by": "mine", "dev_set": None}),
        str(tmp_path / "dev"),
        64,
    )
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "other.pairclass.jsonl").write_bytes((tmp_path / "dev" / "mine.pairclass.jsonl").read_bytes())
    one_line_error(
        r"is a copy of a test file",
        selection.stage_config,
        train.model_copy(update={"select_by": "mine"}),
        str(tmp_path / "eval"),
        64,
    )


def test_a_retrieval_task_selects_on_its_dev_queries_by_its_own_scorer(tokenizer, tmp_path):
    """select_by a retrieval task in evaluate.data: the scorer reads qrels/dev.tsv, never test.tsv, and returns
    the kind's main metric (nDCG@10) of the model in eval mode."""
    task_dir = tmp_path / "eval" / "mine"
    (task_dir / "qrels").mkdir(parents=True)
    passages = ["kabar lobar mifen", "tosu rami feli", "pona kiva lumo", "sela dori maku"]
    (task_dir / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"p{i}", "text": t}) + "\n" for i, t in enumerate(passages))
    )
    (task_dir / "queries.jsonl").write_text('{"_id": "q0", "text": "kabar mifen"}\n{"_id": "q1", "text": "rami"}\n')
    (task_dir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\tp0\t1\nq1\tp1\t1\n")
    (task_dir / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\nq0\tp3\t1\nq1\tp2\t1\n")
    train = TrainConfig(eval_every=5, select_by="mine")
    dev = selection.load(
        train, selection.stage_config(train, str(tmp_path / "eval"), 64), "unused", special_ids(tokenizer)
    )
    model = tiny_encoder(tokenizer, pooling="mean")
    model.train()
    got = make_scorer(model, tokenizer, train, dev)()
    assert model.training, "training mode restored"
    model.eval()
    encode = lambda s: embed(model.mlm_model.base_model, tokenizer, s, "mean", 64)  # noqa: E731
    assert got == {"dev_score": task_score(retrieval.read(task_dir, "dev"), encode)}
    assert got["dev_score"] != task_score(retrieval.read(task_dir, "test"), encode)


def test_the_card_says_which_step_and_by_what():
    card = render({**INFO, "best_step": 600, "selected_by": selection.label("heldout-loss", 1.2341)})
    assert "| selected | step 600 by heldout-loss 1.234 |" in card
