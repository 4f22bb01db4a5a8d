"""Resources: what Ray must hold for a run's training, and a batch its workers split evenly, refused before any
work with one line saying what to set (a local Ray) or a warning (a cluster, which may grow); and a long
document's memory, bounded by tokenising it a piece at a time."""

from __future__ import annotations

import hashlib
import logging

import numpy as np
import pyarrow as pa
import pytest
import torch

from pipeline.config import load_config
from pipeline.errors import ConfigError, InputError
from pipeline.filter.docstats import count_tokens, text_key
from pipeline.filter.neardup import NearDuplicates, minhash, shingle_hashes
from pipeline.objectives.prepare import whole_arrays
from pipeline.plan import plan
from pipeline.preflight import configured
from pipeline.stage import run_stage
from pipeline.tokenizer import loading
from pipeline.train import stage as train
from pipeline.train.config import TrainConfig
from pipeline.train.resources import check_before_ray, check_resources, cpu_shortfall, gpu_shortfall
from storage import DatasetWriter
from tests.conftest import make_document

MORE = "give Ray more CPUs (ray.num_cpus)"


def settings(**kw) -> TrainConfig:
    return TrainConfig(**kw)


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["train.batch_size=8", "train.num_workers=3"], "train"),
        (["train.batch_size=8", "runs.declutr.num_workers=3"], "runs.declutr"),
    ],
)
def test_a_batch_the_workers_cannot_split_evenly_is_a_config_error(overrides, key):
    """8 on 3 workers trained on 6 pairs a step (8 // 3 each) while the recipe said 8."""
    with pytest.raises(ConfigError) as e:
        load_config(None, overrides)
    message = str(e.value)
    assert "\n" not in message
    assert f"{key}: batch_size 8 is not a multiple of num_workers 3" in message
    assert "6 a step" in message and "set batch_size to 6 or 9, or num_workers to 2 or 4" in message


def test_the_nearest_valid_values_stay_valid():
    with pytest.raises(ConfigError, match="set batch_size to 4, or num_workers to 2$"):
        load_config(None, ["train.batch_size=2", "train.num_workers=4"])
    with pytest.raises(ConfigError, match="set batch_size to 10 or 15, or num_workers to 4 or 6$"):
        load_config(None, ["train.batch_size=12", "train.num_workers=5"])
    assert load_config(None, ["train.batch_size=12", "train.num_workers=4"]).train.num_workers == 4


@pytest.mark.parametrize(
    "workers, per_worker, cpus, expected",
    [
        (1, 1, 1, None),  # a worker reads its own pairs: no CPU more
        (2, 1, 2, None),
        (2, 2, 4, None),
        (3, 1, 2, f"train.num_workers=3 needs 3 CPUs (3 workers); Ray has 2: set train.num_workers<=2, or {MORE}"),
        (
            1,
            2,
            1,
            f"train.num_workers=1 needs 2 CPUs (1 worker x 2 CPUs); Ray has 1: set train.cpus_per_worker<=1, or {MORE}",
        ),
        (
            2,
            3,
            5,
            f"train.num_workers=2 needs 6 CPUs (2 workers x 3 CPUs); Ray has 5: "
            f"set train.num_workers<=1 or train.cpus_per_worker<=2, or {MORE}",
        ),
        (
            4,
            2,
            4,
            f"train.num_workers=4 needs 8 CPUs (4 workers x 2 CPUs); Ray has 4: "
            f"set train.num_workers<=2 or train.cpus_per_worker<=1, or {MORE}",
        ),
    ],
)
def test_the_workers_cpus_must_fit(workers, per_worker, cpus, expected):
    train = settings(batch_size=12, num_workers=workers, cpus_per_worker=per_worker)
    assert cpu_shortfall(train, cpus, MORE) == expected


def test_gpu_workers_need_a_gpu_each():
    assert gpu_shortfall(settings(num_workers=2), 0) is None  # CPU training
    assert gpu_shortfall(settings(num_workers=2, use_gpu=True), 2) is None
    assert (
        gpu_shortfall(settings(num_workers=2, use_gpu=True), 1)
        == "train.num_workers=2 with train.use_gpu needs 2 GPUs; Ray has 1: set train.num_workers<=1"
    )
    assert gpu_shortfall(settings(use_gpu=True), 0).endswith("Ray has 0: set train.use_gpu=false")


def test_a_local_ray_refuses_and_a_cluster_warns_once(caplog):
    train = settings(num_workers=3, batch_size=12)
    with pytest.raises(InputError, match=r"^train.num_workers=3 needs 3 CPUs .* Ray has 2: .*\(ray.num_cpus\)$"):
        check_resources(train, {"CPU": 2.0, "memory": 1e9}, local=True)
    check_resources(settings(), {"CPU": 2.0}, local=True)  # fits: nothing said
    with caplog.at_level(logging.WARNING, logger="cpipe"):
        for _ in range(2):  # an autoscaler may add nodes: the run goes on, said once
            check_resources(train, {"CPU": 2.0}, local=False)
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "Ray has 2: set train.num_workers<=2, or add nodes to the cluster" in warnings[0]


def test_preflight_checks_every_run_against_the_local_ray_it_will_start(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # which would mean a cluster
    cfg = load_config(None, ["ray.num_cpus=2", "runs.contrastive-only.num_workers=4"])
    runs = cfg.run_configs()
    with pytest.raises(InputError, match=r"^runs.contrastive-only: train.num_workers=4 needs 4 CPUs"):
        check_before_ray(runs, cfg.ray.num_cpus, cpu_count=64, gpu_count=0)
    check_before_ray(runs, None, cpu_count=4, gpu_count=0)  # without ray.num_cpus, Ray takes the machine's CPUs
    with pytest.raises(InputError, match="runs.contrastive-only: train.num_workers=4 needs 4 CPUs"):
        train.check(cfg)  # the stage's pre-flight: no Ray started, none asked for


def test_the_plan_refuses_gpu_workers_on_a_machine_without_gpus_before_any_stage(
    monkeypatch, tmp_path, tiny_corpus, tiny_sts
):
    """The simcse profiles set train.use_gpu: on a laptop that is refused by the pre-flight (cpipe plan, and a
    run's checks before its first stage), not once the data stages have run."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)  # whatever machine the suite runs on
    given = dict(corpus=str(tiny_corpus), eval_data=str(tiny_sts), artifacts=str(tmp_path))
    cfg = configured(**given, overrides=["train.use_gpu=true"])
    with pytest.raises(InputError, match=r"^runs.declutr: train.num_workers=1 with train.use_gpu needs 1 GPUs; "):
        plan(cfg)
    assert not any(tmp_path.iterdir())  # nothing built
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert plan(configured(**given, overrides=["train.use_gpu=true"]))


def test_preflight_leaves_a_cluster_to_the_stage(monkeypatch):
    cfg = load_config(None, ["ray.num_cpus=2", "train.num_workers=4"])
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    train.check(cfg)  # its nodes are seen once connected


@pytest.mark.ray
def test_the_train_stage_refuses_workers_a_local_ray_cannot_hold(local_ray, tmp_path):
    """Four workers on the fixture's 2 CPUs: refused before any worker starts, and nothing that looks finished
    is left."""
    schema = pa.schema([("anchor_ids", pa.list_(pa.int32())), ("positive_ids", pa.list_(pa.list_(pa.int32())))])
    with DatasetWriter(str(tmp_path), "augment", "pairs", config={}, inputs={}, schema=schema) as out:
        out.write([{"anchor_ids": [5, 6], "positive_ids": [[7, 8]]}] * 8)
    inputs = {"pairs": f"{tmp_path}/augment/pairs", "init": f"{tmp_path}/init/none"}  # never read
    config = {"train": TrainConfig(batch_size=4, num_workers=4).model_dump()}
    with pytest.raises(
        InputError,
        match=r"^train.num_workers=4 needs 4 CPUs \(4 workers\); "
        r"Ray has 2: set train.num_workers<=2",
    ):
        run_stage(train.STAGE, config, inputs, str(tmp_path))
    assert not list(tmp_path.glob("train/*/_SUCCESS"))


# A long document: tokenised and whitespace-collapsed a bounded piece at a time, to the whole document's result.


class Recording:
    """A tokenizer backend that records the texts of every encode call."""

    def __init__(self, backend):
        self.backend, self.calls = backend, []

    def no_truncation(self):
        self.backend.no_truncation()

    def no_padding(self):
        self.backend.no_padding()

    def encode_batch(self, texts, add_special_tokens):
        self.calls.append(list(texts))
        return self.backend.encode_batch(texts, add_special_tokens=add_special_tokens)


@pytest.fixture
def small_pieces(monkeypatch):
    monkeypatch.setattr(loading, "PIECE_CHARS", 300)
    return 300


def long_document(seed: int = 0) -> str:
    """Made-up sentences, with runs of spaces, tabs and newlines between the words."""
    rng = np.random.default_rng(seed)
    gaps = [" ", " ", " ", "  ", "   ", "\t", " \n ", "\n"]
    return "  " + "".join(w + gaps[int(rng.integers(len(gaps)))] for w in make_document(rng, 2000).split(" "))


def test_pieces_are_cut_before_a_words_space_or_at_the_limit():
    assert loading.pieces("aa bb  cc dd", 5) == [(0, 2), (2, 6), (6, 9), (9, 12)]  # " bb " | " cc": the run's last
    assert loading.pieces("abcdefgh ij", 4) == [(0, 4), (4, 8), (8, 11)]  # no space to cut before
    assert loading.pieces("", 4) == [(0, 0)]


def test_whitespace_is_collapsed_piece_by_piece_to_the_whole_documents(small_pieces):
    for text in [
        long_document(1),
        f"{long_document(1)} {'x' * 700} {long_document(2)}",  # a word cut in three
        "x" * 1000,
        " " * 1000 + "a" + " " * 1000,
        "a" + "\n" * 700 + "b",
        "",
    ]:
        assert loading.collapse_whitespace(text) == " ".join(text.split())
    text = long_document(2)
    assert text_key(text) == hashlib.sha1(" ".join(text.lower().split()).encode()).digest()


def test_a_long_document_is_tokenised_in_bounded_pieces_to_its_whole_ids(tokenizer, small_pieces):
    """Every call sees at most about PIECE_CHARS characters, and the ids are the whole document's, so the
    filter's count and DeCLUTR's spans are unchanged."""
    backend = tokenizer.backend_tokenizer
    texts = [long_document(0), "a short one.", long_document(3)]
    whole = [backend.encode(t, add_special_tokens=False).ids for t in texts]
    recording = Recording(backend)
    assert loading.encode_whole(recording, texts) == whole
    assert len(recording.calls) > 10 and all(sum(map(len, call)) < 2 * small_pieces for call in recording.calls)
    assert count_tokens(Recording(backend), texts) == [len(ids) for ids in whole]
    arrays = whole_arrays(Recording(backend), texts)
    assert [a.dtype for a in arrays] == [np.int32] * 3 and [a.tolist() for a in arrays] == whole


def test_a_long_documents_minhash_signature_is_its_whole_shingles(small_pieces):
    """Near-duplicate shingles are hashed a block of words at a time, across the blocks' seams."""
    nd = NearDuplicates()
    for text in [f"{long_document(4)} {'x' * 700} {long_document(5)}", "Two words" + " " * 900, "x" * 1000]:
        words = text.lower().split()
        shingles = [" ".join(words[i : i + 5]) for i in range(len(words) - 4)] or [" ".join(words)]
        hashes = np.array(
            [int.from_bytes(hashlib.blake2b(s.encode(), digest_size=8).digest(), "little") for s in shingles],
            dtype=np.uint64,
        )
        assert nd.signature(text).tolist() == minhash(hashes, nd.a, nd.b).tolist()
        assert all(len(block) <= small_pieces for block in shingle_hashes(text, 5))  # a piece's words' shingles
