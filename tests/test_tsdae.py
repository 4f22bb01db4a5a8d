"""TSDAE (Wang, Reimers & Gurevych, 2021) against its definition, on hand-built ids and tiny models made here:
the deletion noise, a decoder that sees the sentence embedding only and shares the encoder's embedding matrix,
the loss as a loop over the original tokens, and an export without the decoder that sentence-transformers loads.
(2 workers = 1: tests/test_distributed.py.)"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
import torch
from safetensors import safe_open
from transformers import BertConfig, BertForMaskedLM

from pipeline.config import Config
from pipeline.model.transformer import SpanEncoder, export
from pipeline.objectives.tsdae import delete
from pipeline.train import stage as train_stage
from pipeline.train.batching import collate, special_ids
from pipeline.train.config import TrainConfig
from pipeline.train.optim import make_optimizer
from pipeline.train.step import make_encoder, train_step
from tests.conftest import make_document
from tests.test_train_step import tiny_encoder

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_deletion_keeps_forty_percent_in_order_and_never_nothing():
    rng = np.random.default_rng(0)
    ids = list(range(20_000))
    kept = delete(ids, 0.6, rng)
    assert abs(len(kept) / len(ids) - 0.4) < 0.01  # 4 standard deviations of a Binomial(20000, 0.4) share
    assert kept == sorted(kept)  # a subsequence: the order of what is left is the sentence's
    assert all(delete([7], 0.6, rng) == [7] for _ in range(50))
    short = [delete([1, 2, 3], 0.99, rng) for _ in range(200)]
    assert all(len(s) >= 1 and set(s) <= {1, 2, 3} for s in short)
    assert {tuple(s) for s in short} >= {(1,), (2,), (3,)}  # the kept token is drawn, not always the first


def tsdae_cfg(**overrides) -> TrainConfig:
    return TrainConfig(**{"objective": "tsdae", "lr": 1e-3, "batch_size": 4, **overrides})


def bert_encoder(tokenizer, cfg: TrainConfig) -> SpanEncoder:
    torch.manual_seed(0)
    bert = BertForMaskedLM(
        BertConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=66,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            pad_token_id=tokenizer.pad_token_id,
        )
    )
    return make_encoder(bert, cfg)


def roberta_encoder(tokenizer, cfg: TrainConfig) -> SpanEncoder:
    return make_encoder(tiny_encoder(tokenizer).mlm_model, cfg)


FAMILIES = {"roberta": roberta_encoder, "bert": bert_encoder}


@pytest.mark.parametrize("family", FAMILIES)
def test_decoder_is_the_encoder_tied_weight_for_weight_with_new_cross_attention(tokenizer, family):
    """sentence-transformers' DenoisingAutoEncoderLoss(tie_encoder_decoder=True), the paper's setting: every
    weight the decoder's transformer shares by name with the encoder is the encoder's tensor."""
    model = FAMILIES[family](tokenizer, tsdae_cfg())
    decoder, encoder = model.decoder.model, model.mlm_model
    assert decoder.config.is_decoder and decoder.config.add_cross_attention
    assert not encoder.config.is_decoder and not encoder.config.add_cross_attention  # its export stays an encoder
    table = encoder.get_input_embeddings().weight
    assert decoder.get_input_embeddings().weight is table and decoder.get_output_embeddings().weight is table
    own = dict(decoder.base_model.named_parameters(remove_duplicate=False))
    shared = dict(encoder.base_model.named_parameters())
    assert shared and all(own[name] is p for name, p in shared.items())
    new = set(own) - set(shared)
    assert new and all(".crossattention." in name for name in new)
    head = dict(decoder.named_parameters(remove_duplicate=False))
    for name, p in encoder.named_parameters():  # the LM head: the encoder's values, a tensor of its own
        if not name.startswith(encoder.base_model_prefix + "."):
            torch.testing.assert_close(head[name], p)
            assert head[name] is not p or p is table
    # Still the same tensors after an update: the decoder's gradient trains the encoder's layers.
    optimizer, _ = make_optimizer(model, tsdae_cfg(), 1)
    layers = [p for name, p in shared.items() if ".layer.0." in name and name.endswith("dense.weight")]
    before = [p.detach().clone() for p in [table, *layers]]
    ids = torch.tensor([[0, 5, 6, 7, 2]])
    _, logits = model(ids, torch.ones_like(ids), targets=(ids, torch.ones_like(ids)))
    logits.sum().backward()
    optimizer.step()
    assert decoder.get_output_embeddings().weight is encoder.get_input_embeddings().weight
    assert all(dict(decoder.base_model.named_parameters(remove_duplicate=False))[n] is p for n, p in shared.items())
    assert all(not torch.equal(b, p.detach()) for b, p in zip(before, [table, *layers]))


def test_an_untied_decoder_is_a_copy_sharing_only_the_embedding_matrix(tokenizer):
    model = roberta_encoder(tokenizer, tsdae_cfg(tie_decoder=False))
    decoder, encoder = model.decoder.model, model.mlm_model
    own = dict(decoder.base_model.named_parameters(remove_duplicate=False))
    for name, p in encoder.base_model.named_parameters():
        torch.testing.assert_close(own[name], p)
        assert (own[name] is p) == name.endswith("word_embeddings.weight")
    assert decoder.get_output_embeddings().weight is encoder.get_input_embeddings().weight
    assert "denoising decoder (untied)" in TrainConfig(objective="tsdae", tie_decoder=False).recipe()


def test_only_tsdae_runs_carry_the_tie_in_their_fingerprint():
    """Untied was the only decoder before the setting: untied runs, and every other objective's, keep their
    datasets; a tied TSDAE run gets a new one."""
    cfg = Config(
        runs={
            "t": {"objective": "tsdae"},
            "u": {"objective": "tsdae", "tie_decoder": False},
            "d": {"objective": "declutr"},
        }
    )
    settings = {row: train_stage.config(cfg, row)["train"] for row in ("t", "u", "d")}
    assert settings["t"]["tie_decoder"] is True
    assert "tie_decoder" not in settings["u"] and "tie_decoder" not in settings["d"]


def test_only_tsdae_pairs_carry_the_word_noise_in_their_fingerprint():
    """Word deletion replaced piece deletion: TSDAE's pairs are rebuilt, every other objective's are kept."""
    from pipeline.augment import stage as augment

    cfg = Config()
    built = {o: augment.config(cfg, TrainConfig(objective=o)) for o in ("tsdae", "simcse", "declutr", "clear")}
    assert built["tsdae"]["version"] == "2"
    assert all("version" not in built[o] for o in ("simcse", "declutr", "clear"))


def test_decoder_sees_the_cls_state_only(tokenizer):
    """Changing every encoder output state but [CLS]'s leaves the decoder's logits as they were; changing
    [CLS]'s does not: the cross-attention's memory is the sentence embedding, a sequence of length 1."""
    model = roberta_encoder(tokenizer, tsdae_cfg())
    model.eval()
    ids = torch.tensor([[0, 11, 12, 13, 14, 2], [0, 21, 22, 2, 1, 1]])
    mask = (ids != 1).long()
    targets = (torch.tensor([[0, 31, 32, 33, 2], [0, 41, 2, 1, 1]]), torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]))
    change = {}

    def perturb(module, args, output):
        if change:
            output.last_hidden_state[:, change["from"] : change["to"]] += 5 * torch.randn_like(
                output.last_hidden_state[:, change["from"] : change["to"]]
            )
        return output

    model.mlm_model.base_model.register_forward_hook(perturb)
    with torch.no_grad():
        _, plain = model(ids, mask, targets=targets)
        change.update({"from": 1, "to": None})
        _, others = model(ids, mask, targets=targets)
        change.update({"from": 0, "to": 1})
        _, cls = model(ids, mask, targets=targets)
    torch.testing.assert_close(others, plain, rtol=0, atol=0)
    assert not torch.allclose(cls, plain, atol=1e-3)


def hand_pairs(tokenizer) -> pa.Table:
    """Sentences of different lengths, each with about 60% of its tokens deleted, by hand."""
    rng = np.random.default_rng(3)
    rows = []
    for n in (7, 19, 12, 30):
        ids = tokenizer(make_document(rng, 40), add_special_tokens=False)["input_ids"][:n]
        rows.append({"anchor_ids": ids[::3] + ids[1::5], "positive_ids": [ids]})
    return pa.Table.from_pylist(rows)


@pytest.mark.parametrize("family", FAMILIES)
def test_loss_is_the_mean_cross_entropy_over_the_original_tokens(tokenizer, family):
    cfg = tsdae_cfg()
    model = FAMILIES[family](tokenizer, cfg)
    special = special_ids(tokenizer)
    table = hand_pairs(tokenizer)
    expected, count = 0.0, 0
    with torch.no_grad():  # one sentence at a time, unpadded: [CLS] of the corrupted, teacher forcing on the original
        for row in table.to_pylist():
            source = torch.tensor([[special["bos"], *row["anchor_ids"], special["eos"]]])
            original = [special["bos"], *row["positive_ids"][0], special["eos"]]
            embedding = model.mlm_model.base_model(input_ids=source).last_hidden_state[:, 0]
            logits = model.decoder.model(
                input_ids=torch.tensor([original[:-1]]), encoder_hidden_states=embedding[:, None]
            ).logits[0]
            for t in range(1, len(original)):
                expected -= torch.log_softmax(logits[t - 1], -1)[original[t]].item()
                count += 1
    optimizer, scheduler = make_optimizer(model, cfg, 3)
    metrics = train_step(model, optimizer, scheduler, collate(table, special, 64, True), cfg, special, None)
    assert set(metrics) >= {"reconstruction_loss"} and "contrastive_loss" not in metrics
    assert metrics["reconstruction_loss"] == pytest.approx(expected / count, rel=1e-5)
    assert metrics["loss"] == pytest.approx(expected / count, rel=1e-5)


def test_tsdae_learns_at_a_constant_learning_rate(tokenizer):
    cfg = tsdae_cfg(lr=3e-3)
    model = roberta_encoder(tokenizer, cfg)
    special = special_ids(tokenizer)
    optimizer, scheduler = make_optimizer(model, cfg, 5)
    batch = collate(hand_pairs(tokenizer), special, 64, True)
    history = [train_step(model, optimizer, scheduler, batch, cfg, special, None) for _ in range(5)]
    assert history[-1]["loss"] < history[0]["loss"] - 0.5
    assert {h["lr"] for h in history} == {3e-3}


def test_export_holds_the_encoder_only_and_loads_in_sentence_transformers(tokenizer, tmp_path):
    from sentence_transformers import SentenceTransformer

    cfg = tsdae_cfg()
    model = roberta_encoder(tokenizer, cfg)
    special = special_ids(tokenizer)
    optimizer, scheduler = make_optimizer(model, cfg, 2)
    for _ in range(2):
        train_step(model, optimizer, scheduler, collate(hand_pairs(tokenizer), special, 64, True), cfg, special, None)
    # As the train stage does: the checkpoint's state into a freshly built encoder (with its decoder), then export.
    restored = make_encoder(tiny_encoder(tokenizer).mlm_model, cfg)
    restored.load_state_dict(model.state_dict())
    export(restored.mlm_model, tokenizer, str(tmp_path), cfg.pooling)
    with safe_open(str(tmp_path / "hf" / "model.safetensors"), "pt") as f:
        names = set(f.keys())
    assert not any("crossattention" in n or n.startswith("decoder") for n in names)
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert not config.get("is_decoder") and not config.get("add_cross_attention")
    st = SentenceTransformer(str(tmp_path / "sentence-transformers"), device="cpu")
    sentences = ["a b c d e", "the second sentence, a little longer than the first"]
    ids = tokenizer(sentences, padding=True, return_tensors="pt")
    model.eval()
    with torch.no_grad():
        cls = model.mlm_model.base_model(**ids).last_hidden_state[:, 0]
    torch.testing.assert_close(torch.as_tensor(st.encode(sentences)), cls, rtol=1e-4, atol=1e-5)


def test_tsdae_config_takes_the_papers_settings_and_refuses_the_others():
    cfg = TrainConfig(objective="tsdae")
    assert (cfg.loss, cfg.pooling, cfg.projection, cfg.mlm, cfg.schedule) == (
        "denoising",
        "cls",
        "none",
        False,
        "constant",
    )
    assert "denoising decoder" in cfg.recipe() and "tau" not in cfg.recipe()
    for bad in ({"mlm": True}, {"loss": "info-nce"}, {"memory_bank": 8}, {"grad_cache": 4}, {"momentum": 0.9}):
        with pytest.raises(ValueError, match="tsdae"):
            TrainConfig(objective="tsdae", **bad)
    with pytest.raises(ValueError, match="denoising"):
        TrainConfig(objective="simcse", loss="denoising")


def test_micro_batches_of_unequal_token_counts_take_the_whole_batchs_step(tokenizer):
    """grad_accumulation: the step's loss is the token mean over all its micro-batches, not a mean of means."""
    special, table = special_ids(tokenizer), hand_pairs(tokenizer)  # 7 and 19 tokens, then 12 and 30
    grads = []
    for k in (1, 2):
        cfg = tsdae_cfg(batch_size=4 // k, grad_accumulation=k)
        model = roberta_encoder(tokenizer, cfg)
        optimizer, scheduler = make_optimizer(model, cfg, 1)
        batches = [collate(table.slice(i * 4 // k, 4 // k), special, 64, True) for i in range(k)]
        loss = train_step(model, optimizer, scheduler, batches, cfg, special, None)["loss"]
        grads.append((loss, {n: p.grad for n, p in model.named_parameters() if p.grad is not None}))
    (whole, g1), (accumulated, g2) = grads
    assert accumulated == pytest.approx(whole, rel=1e-5) and g1.keys() == g2.keys()
    for name in g1:
        torch.testing.assert_close(g2[name], g1[name], rtol=1e-4, atol=1e-6, msg=name)
