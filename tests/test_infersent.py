"""InferSent (Conneau et al., 2017) as a baseline row: BiLSTM-max against a hand-written LSTM loop, the
classifier's [u, v, |u-v|, u*v] built by hand, the NLI readers on files in the real formats, a tiny training
run that learns, an export that encodes as the trained encoder does, and the row the flow scores."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

import flows.pipeline_flows as flow
from pipeline import registry
from pipeline.baselines.infersent import model as infersent
from pipeline.baselines.infersent.config import InferSentBaseline
from pipeline.config import Config
from pipeline.corpus import stage as corpus
from pipeline.corpus.config import CorpusConfig
from pipeline.errors import InputError
from pipeline.evaluate import stage as evaluate
from pipeline.readers import nli
from pipeline.stage import run_stage
from storage import read_manifest, read_table
from tests.conftest import WORDS, write_corpus, write_sts

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def lstm_by_hand(x: np.ndarray, w_ih, w_hh, b_ih, b_hh) -> np.ndarray:
    """One direction of an LSTM over x (time, dim), one timestep at a time; gates in PyTorch's i, f, g, o order."""
    hidden = w_hh.shape[1]
    h, c, states = np.zeros(hidden), np.zeros(hidden), []
    for x_t in x:
        z = w_ih @ x_t + b_ih + w_hh @ h + b_hh
        i, f, g, o = (
            sigmoid(z[:hidden]),
            sigmoid(z[hidden : 2 * hidden]),
            np.tanh(z[2 * hidden : 3 * hidden]),
            sigmoid(z[3 * hidden :]),
        )
        c = f * c + i * g
        h = o * np.tanh(c)
        states.append(h)
    return np.array(states)


def test_max_pooling_over_bilstm_states_equals_a_loop_over_the_timesteps_and_the_zero_padding():
    """InferSent's encoder (models.py, version 1) max-pools pad_packed_sequence's output: a sentence shorter than
    the batch's longest has zero states after its end, and they take part in the max."""
    torch.manual_seed(0)
    vectors = torch.randn(12, 5)
    encoder = infersent.BiLstmMax(vectors, hidden=6)
    sentences = [[1, 2, 3, 4, 5, 6, 7], [8, 9], [10], [11, 3, 2, 0]]
    lengths = torch.tensor([len(s) for s in sentences])
    ids = torch.full((4, 7), 11)  # padding with a real word: the LSTM never reads it, its states are zeros
    for row, s in enumerate(sentences):
        ids[row, : len(s)] = torch.tensor(s)
    got = encoder(ids, lengths).detach().numpy()
    p = {k: v.detach().double().numpy() for k, v in encoder.lstm.named_parameters()}
    expected = []
    for s in sentences:
        x = vectors[s].double().numpy()
        forward = lstm_by_hand(x, p["weight_ih_l0"], p["weight_hh_l0"], p["bias_ih_l0"], p["bias_hh_l0"])
        backward = lstm_by_hand(
            x[::-1],
            p["weight_ih_l0_reverse"],
            p["weight_hh_l0_reverse"],
            p["bias_ih_l0_reverse"],
            p["bias_hh_l0_reverse"],
        )[::-1]
        states = np.concatenate([forward, backward], axis=1)  # (time, 2 * hidden)
        padded = [0.0] * (7 - len(s))  # the zero states of the steps after its end
        expected.append([max([states[t, k] for t in range(len(s))] + padded) for k in range(states.shape[1])])
    expected = np.array(expected)
    assert (expected[0] < 0).any()  # the longest sentence has no padding: a negative maximum stays
    assert (expected[1:] >= 0).all()  # the shorter ones: the padding's zeros bound every maximum from below
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_the_classifier_sees_u_v_their_absolute_difference_and_product():
    torch.manual_seed(1)
    u, v = torch.randn(3, 4), torch.randn(3, 4)
    rows = [(u[r].tolist(), v[r].tolist()) for r in range(3)]
    by_hand = torch.tensor(
        [[*ur, *vr, *(abs(a - b) for a, b in zip(ur, vr)), *(a * b for a, b in zip(ur, vr))] for ur, vr in rows]
    )
    torch.testing.assert_close(infersent.features(u, v), by_hand)

    net = infersent.NliNet(infersent.BiLstmMax(torch.randn(6, 3), hidden=2), fc_dim=512)
    a, b = (torch.tensor([[1, 2, 3]]), torch.tensor([3])), (torch.tensor([[4, 5]]), torch.tensor([2]))
    ua, vb = net.encoder(*a)[0].tolist(), net.encoder(*b)[0].tolist()
    x = torch.tensor([ua + vb + [abs(p - q) for p, q in zip(ua, vb)] + [p * q for p, q in zip(ua, vb)]])
    torch.testing.assert_close(net(a, b), net.classifier(x))


def test_the_classifier_is_train_nli_defaults_three_linear_layers_with_nothing_between():
    """train_nli.py's defaults (nonlinear_fc 0, dpout_fc 0, fc_dim 512): Linear(4d, 512), Linear(512, 512),
    Linear(512, 3), so the logits are one affine map of the features, computed here from the layers' weights."""
    torch.manual_seed(2)
    net = infersent.NliNet(infersent.BiLstmMax(torch.randn(6, 3), hidden=2), fc_dim=512)
    layers = list(net.classifier)
    assert [(m.in_features, m.out_features) for m in layers] == [(16, 512), (512, 512), (512, 3)]
    assert all(type(m) is torch.nn.Linear for m in layers)
    w = [m.weight.detach().double().numpy() for m in layers]
    bias = [m.bias.detach().double().numpy() for m in layers]
    x = np.random.default_rng(0).standard_normal((5, 16))
    by_hand = x @ (w[2] @ w[1] @ w[0]).T + (w[2] @ (w[1] @ bias[0] + bias[1]) + bias[2])
    with torch.no_grad():
        got = net.classifier(torch.from_numpy(x).float()).double().numpy()
    np.testing.assert_allclose(got, by_hand, rtol=1e-4, atol=1e-5)


def test_the_defaults_are_train_nli_py_s():
    """InferSent's train_nli.py: n_epochs 20, batch_size 64, sgd lr 0.1, decay 0.99, lrshrink 5, minlr 1e-5,
    max_norm 5, fc_dim 512 (enc_lstm_dim 2048 is the one setting kept smaller here)."""
    want = {
        "epochs": 20,
        "batch_size": 64,
        "lr": 0.1,
        "decay": 0.99,
        "shrink": 5.0,
        "min_lr": 1e-5,
        "max_norm": 5.0,
        "fc_dim": 512,
    }
    for settings in (infersent.Settings(), InferSentBaseline()):
        assert {k: getattr(settings, k) for k in want} == want


SNLI_ROWS = [
    {
        "annotator_labels": ["neutral"],
        "captionID": "3416050480.jpg#4",
        "gold_label": "neutral",
        "pairID": "3416050480.jpg#4r1n",
        "sentence1": "A person on a horse jumps over a broken down airplane.",
        "sentence1_binary_parse": "( ( ( A person ) ...",
        "sentence1_parse": "(ROOT (S ...",
        "sentence2": "A person is training his horse for a competition.",
        "sentence2_binary_parse": "( ( A person ) ...",
        "sentence2_parse": "(ROOT (S ...",
    },
    {
        "annotator_labels": ["contradiction", "neutral", "entailment", "neutral", "contradiction"],
        "gold_label": "-",
        "sentence1": "Two women are embracing.",
        "sentence2": "The sisters are hugging.",
    },
    {
        "annotator_labels": ["entailment"],
        "genre": "government",
        "gold_label": "entailment",
        "pairID": "31193n",
        "promptID": "31193",
        "sentence1": "Conceptually cream skimming has two basic dimensions.",
        "sentence2": "Product and geography are what make cream skimming work. ",
    },
    {"gold_label": "contradiction", "sentence1": "A man inspects a uniform.", "sentence2": "The man is sleeping."},
]


def write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def test_snli_and_multinli_jsonl_drop_rows_without_a_gold_label(tmp_path):
    pairs = nli.read_jsonl(write_jsonl(tmp_path / "snli_1.0_train.jsonl", SNLI_ROWS))
    assert pairs.premise == [SNLI_ROWS[0]["sentence1"], SNLI_ROWS[2]["sentence1"], SNLI_ROWS[3]["sentence1"]]
    assert pairs.hypothesis == [SNLI_ROWS[0]["sentence2"], SNLI_ROWS[2]["sentence2"], SNLI_ROWS[3]["sentence2"]]
    assert [nli.LABELS[y] for y in pairs.labels] == ["neutral", "entailment", "contradiction"]
    assert pairs.dropped == 1


SICK_HEADER = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"


def write_sick(path, rows) -> str:
    path.write_text(
        SICK_HEADER + "".join(f"{i}\t{a}\t{b}\t{1 + i % 5}\t{label}\n" for i, (a, b, label) in enumerate(rows))
    )
    return str(path)


def test_sick_entailment_labels(tmp_path):
    rows = [
        ("A dog runs", "An animal runs", "ENTAILMENT"),
        ("A man sings", "Nobody sings", "CONTRADICTION"),
        ("A cat sleeps", "A cat is black", "NEUTRAL"),
    ]
    pairs = nli.read_nli(write_sick(tmp_path / "SICK_train.txt", rows))
    assert list(zip(pairs.premise, pairs.hypothesis)) == [(a, b) for a, b, _ in rows]
    assert [nli.LABELS[y] for y in pairs.labels] == ["entailment", "contradiction", "neutral"]


@pytest.mark.parametrize(
    "content,where",
    [
        (
            '{"gold_label": "neutral", "sentence1": "a", "sentence2": "b"}\n{"gold_label": "neutral", "sentence1": \n',
            ":2:",
        ),
        ('{"gold_label": "neutral", "sentence1": "a"}\n', ":1:"),
        ('\n{"gold_label": "maybe", "sentence1": "a", "sentence2": "b"}\n', ":2:"),
        (SICK_HEADER + "1\ta\tb\t3.0\tENTAILMENT\n2\ta\tb\t3.0\tPERHAPS\n", ":3:"),
        (SICK_HEADER + "1\ta\tb\n", ":2:"),
    ],
)
def test_a_bad_nli_file_is_one_line_naming_file_and_line(tmp_path, content, where):
    path = tmp_path / ("bad.jsonl" if content.startswith(("{", "\n")) else "SICK_bad.txt")
    path.write_text(content)
    with pytest.raises(InputError) as e:
        nli.read_nli(path)
    assert f"{path}{where}" in str(e.value) and "\n" not in str(e.value)


def test_nli_files_by_split_by_name(tmp_path):
    sick = tmp_path / "eval" / "sick2014"
    sick.mkdir(parents=True)
    for name in ("SICK_train.txt", "SICK_trial.txt", "SICK_test_annotated.txt"):
        write_sick(sick / name, [(f"a {name}", "b", "NEUTRAL")])  # no split a copy of another
    assert nli.nli_files([], str(tmp_path / "eval")) == {
        "train": [str(sick / "SICK_train.txt")],
        "dev": [str(sick / "SICK_trial.txt")],
    }
    assert nli.nli_files([], str(tmp_path / "nothing-here")) is None
    assert nli.nli_files([], None) is None
    snli = [write_jsonl(tmp_path / f"snli_1.0_{s}.jsonl", SNLI_ROWS) for s in ("train", "dev", "test")]
    mnli = write_jsonl(tmp_path / "multinli_1.0_dev_matched.jsonl", SNLI_ROWS)
    assert nli.nli_files(snli[:2] + [mnli], None) == {"train": snli[:1], "dev": [snli[1], mnli]}
    # A test split the evaluation does not score is training data like any other (scored ones: test_eval_content)
    assert nli.nli_files(snli, None) == {"train": [snli[0], snli[2]], "dev": snli[1:2]}
    with pytest.raises(InputError, match="no dev file"):
        nli.nli_files(snli[:1], None)
    with pytest.raises(InputError, match="not found"):
        nli.nli_files([str(tmp_path / "missing_train.jsonl")], None)


def made_up_nli(n: int, seed: int) -> list[tuple[str, str, str]]:
    """Entailment: the hypothesis is part of the premise; contradiction: that part negated; neutral: other words."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        premise = rng.sample(WORDS, 6)
        label = nli.LABELS[i % 3]
        hypothesis = {
            "entailment": premise[:3],
            "contradiction": ["nobody", *premise[:3]],
            "neutral": rng.sample(WORDS, 3),
        }[label]
        rows.append((" ".join(premise), " ".join(hypothesis), label.upper()))
    return rows


def write_vectors(path, words, dim=8, seed=0) -> str:
    rng = np.random.default_rng(seed)
    path.write_text("".join(f"{w} " + " ".join(f"{x:.5f}" for x in rng.standard_normal(dim)) + "\n" for w in words))
    return str(path)


SMALL = {"hidden": 16, "fc_dim": 32, "batch_size": 16, "epochs": 5, "lr": 1.0}  # lr 1: learns in a few epochs


def test_a_tiny_training_run_learns_and_its_export_encodes_as_the_trained_encoder(tmp_path):
    vectors = infersent.file_vectors(write_vectors(tmp_path / "v.txt", ["<s>", "</s>", "nobody", *WORDS]), None, set())
    vocab = infersent.Vocabulary(vectors.words, vectors.lowercase)
    data = [
        infersent.encode_pairs(nli.read_sick(write_sick(tmp_path / f"SICK_{split}.txt", made_up_nli(n, s))), vocab)[0]
        for split, n, s in (("train", 300, 0), ("trial", 90, 1))
    ]
    encoder, history = infersent.train(*data, vectors.matrix, infersent.Settings(**SMALL))
    best = max(history, key=lambda h: h["dev_accuracy"])
    assert best["train_accuracy"] > 0.5 and best["dev_accuracy"] > 0.6  # chance is 1/3
    infersent.export(encoder, vectors, str(tmp_path / "export"))
    loaded = infersent.InferSentEncoder(str(tmp_path / "export"))
    sentences = [a for a, _, _ in made_up_nli(20, 2)] + ["nobody", "unknown words only", ""]
    got = loaded.encode(sentences, batch_size=7)
    ids = [vocab.ids(s) for s in sentences]
    # As the reference's encode batches: longest first, so a sentence's padding (which the max-pool sees) is
    # that of its batch; a sentence with no known word is the zero vector.
    order = sorted((i for i, x in enumerate(ids) if x), key=lambda i: -len(ids[i]))
    direct = np.zeros((len(sentences), 32), dtype=np.float32)
    with torch.no_grad():
        for k in range(0, len(order), 7):
            rows = order[k : k + 7]
            direct[rows] = encoder(*infersent.batch([ids[i] for i in rows])).numpy()
    np.testing.assert_allclose(got, direct, rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        alone = {i: encoder(*infersent.batch([ids[i]]))[0].numpy() for i in order}
    assert any(not np.allclose(got[i], alone[i]) for i in order)  # padding in the max: batch-dependent vectors
    assert loaded.dim == 32 and loaded.parameters == sum(p.numel() for p in encoder.parameters())


def test_the_flow_scores_an_infersent_row_on_corpus_fasttext_vectors(tmp_path):
    art = str(tmp_path / "artifacts")
    data = write_sts(tmp_path / "eval")
    (data / "sick2014").mkdir()
    write_sick(data / "sick2014" / "SICK_train.txt", made_up_nli(90, 0))
    write_sick(data / "sick2014" / "SICK_trial.txt", made_up_nli(30, 1))
    write_sick(data / "sick2014" / "SICK_test_annotated.txt", made_up_nli(30, 2))  # a SICK folder is whole
    docs = run_stage(
        corpus.STAGE,
        corpus.config(Config(corpus=CorpusConfig(sources=[str(write_corpus(tmp_path / "docs"))]))),
        {},
        art,
    )
    cfg = Config(
        artifacts=art,
        evaluate={
            "data": str(data),
            "untrained": False,
            "transfer": False,
            "analysis": False,
            "fasttext": {"enabled": False, "dim": 8, "epoch": 1, "bucket": 1000},
            "baselines": {"random": False, "infersent": {**SMALL, "enabled": True, "epochs": 2}},
        },
    )
    # The stages run directly, not as the flow's Prefect tasks.
    direct = lambda stage, config, inputs, label: run_stage(stage, config, inputs, art)  # noqa: E731
    rows_stages = [s for s in registry.in_flow("evaluate") if s.name in ("baseline", "infersent")]
    done = {"decontaminate": docs}
    flow.build(cfg, rows_stages, done, run_one=direct)
    rows = evaluate.instances(cfg, done)
    assert list(rows) == ["evaluate/infersent"]
    row = rows["evaluate/infersent"]
    about, inputs = row.about, row.inputs
    assert (
        about["objective"] == "InferSent (NLI: SICK-E train)"
        and "BiLSTM-max 16x2, linear classifier 32" in about["recipe"]
    )
    manifest = read_manifest(inputs["model"])
    assert manifest["counts"]["train_pairs"] == 90 and len(manifest["epochs"]) <= 2
    assert manifest["counts"]["dropped_no_known_word"] == 0  # "</s>" is in every fastText vocabulary
    table = read_table(run_stage(evaluate.STAGE, evaluate.config(cfg, row), inputs, art)).to_pandas()
    assert set(table["task"]) == {"STS12", "STSB", "SICKR"}
    assert table.loc[table["task"] != "SICKR", "value"].notna().all()  # made-up SICK scores can give a constant
    assert (table["kind"] == "infersent").all() and (table["dimension"] == 32).all()
    assert (table["objective"] == about["objective"]).all() and (table["parameters"] > 0).all()
    sts_only = str(write_sts(tmp_path / "sts"))
    no_sick = cfg.model_copy(update={"evaluate": cfg.evaluate.model_copy(update={"data": sts_only})})
    assert flow.build(no_sick, rows_stages, {"decontaminate": docs}, run_one=direct) is False
    assert not registry.stage("infersent").instances(no_sick, {})  # no NLI data: no row
