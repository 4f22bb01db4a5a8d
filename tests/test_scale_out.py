"""The corpus, filter and decontaminate stages spread over processes and over a two-node Ray cluster on 127.0.0.1
write the same documents (same ids, same text, same order, the same dropped with the same reasons) as the
single-process run, under the same fingerprints, and the augment stage the same pairs for every objective; and what
the cluster's workers print reaches this driver's terminal without Ray's known noise."""

from __future__ import annotations

import json
import sys
import time

import pytest

from pipeline import objectives
from pipeline.augment import stage as augment
from pipeline.backtranslate.stage import SCHEMA as BACKTRANSLATED
from pipeline.config import Config
from pipeline.corpus import sentences
from pipeline.corpus import stage as corpus
from pipeline.corpus.config import CorpusConfig
from pipeline.corpus.segment import segment_id
from pipeline.corpus.segment import sentences as split_sentences
from pipeline.corpus.wikipedia import WikipediaDumpSource
from pipeline.decontaminate import stage as decontaminate
from pipeline.filter import stage as filter
from pipeline.filter.config import FilterConfig
from pipeline.objectives import prepare
from pipeline.parallel import ordered_map
from pipeline.ray_session import ray_init
from pipeline.stage import run_stage
from pipeline.tokenizer import stage as tokenizer
from pipeline.train.config import TrainConfig
from storage import DatasetWriter, dataset_parts, read_manifest, read_table
from storage.dropped import read_dropped
from tests.conftest import SHARED, ray_cluster, write_corpus
from tests.helpers import corpus_and_tokenizer
from tests.test_decontaminate import write_stsb
from tests.test_simcse_sup import NLI
from tests.test_wikipedia import write_dump

pytestmark = pytest.mark.ray

BACKENDS = {
    "serial": {"backend": "serial"},
    "processes": {"backend": "processes", "workers": 2},
    "ray": {"backend": "ray", "workers": 2},
}


@pytest.fixture(scope="module")
def cluster():
    import ray

    with ray_cluster(nodes=2, cpus=1) as c:
        ray_init(c["address"], None)
        yield c
        ray.shutdown()


def node_of(_: int) -> str:
    import ray

    time.sleep(0.3)  # long enough that one node cannot take every task
    return ray.get_runtime_context().get_node_id()


def test_ray_backend_spreads_work_over_both_nodes(cluster):
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray's workers cannot import tests/
    assert len(set(ordered_map(node_of, range(8), backend="ray", workers=2))) == 2


def speak() -> None:
    print(
        "[2026-11-26 01:32:49,371 E 30882 30919] core_worker.cc:2465: Actor with class name: "
        "'PreemptionWatcher' and ID: '0ca0b88cf3a376b53dd1bbde01000000' has constructor arguments in the object "
        "store and max_restarts > 0. If the arguments in the object store go out of scope or are lost, the actor "
        "restart will fail. See https://github.com/ray-project/ray/issues/53727 for more details.",
        file=sys.stderr,
        flush=True,
    )
    print("a worker's own line", file=sys.stderr, flush=True)


def test_rays_known_noise_stays_off_the_terminal_and_the_workers_own_output_reaches_it(cluster, capfd):
    import ray
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.get(ray.remote(speak).remote())
    err, deadline = "", time.monotonic() + 60
    while "a worker's own line" not in err and time.monotonic() < deadline:  # the driver prints them as they come
        time.sleep(0.2)
        err += capfd.readouterr().err
    assert "a worker's own line" in err
    assert "PreemptionWatcher" not in err and "core_worker.cc" not in err


def quoted(texts: list[str]) -> dict[int, str]:
    """{i: 20 words from texts[i]} for every third text of 30 words or more: evaluation sentences those hold."""
    return {i: " ".join(t.split()[10:30]) for i, t in enumerate(texts) if i % 3 == 0 and len(t.split()) >= 30}


def test_corpus_filter_and_decontaminate_write_the_same_documents_on_every_backend(
    cluster, release, paras, tmp_path, monkeypatch, lid_model
):
    owt, _ = release
    dump = write_dump(tmp_path / "enwiki-20240501-pages-articles-multistream.xml.bz2", paras, streams=2)
    monkeypatch.setattr(WikipediaDumpSource, "PAGES_PER_PART", 1)  # several parts even from a tiny dump
    monkeypatch.setattr(decontaminate, "BATCH", 16)  # several units, each worker matching more than one
    local = f"{SHARED}/corpus/sotu" if SHARED else str(write_corpus(tmp_path / "local", n_docs=30))
    sources = CorpusConfig(sources=[str(owt), str(dump), local])
    filter_config = FilterConfig(min_tokens=50, language="en", near_dedup=True, langid_model=lid_model).model_dump()

    results = {}
    for name, runtime in BACKENDS.items():
        art = str(tmp_path / name)  # the runtime is not in the fingerprint: separate artifacts force real runs
        docs = run_stage(corpus.STAGE, corpus.config(Config(corpus=sources, parallel=runtime)), {}, art)
        tok = (
            results["tok"]
            if name != "serial"
            else run_stage(
                tokenizer.STAGE,
                {"base": None, "vocab_size": 500, "min_frequency": 2, "max_length": 64},
                {"corpus": docs},
                art,
            )
        )
        results.setdefault("tok", tok)
        kept = run_stage(filter.STAGE, {**filter_config, "runtime": runtime}, {"corpus": docs, "tokenizer": tok}, art)
        if name == "serial":  # evaluation sentences that a third of the kept documents quote
            sentences = quoted(read_table(kept).column("text").to_pylist())
            rows = [(s, "A short one.", k % 5) for k, s in enumerate(sentences.values())]  # scores that differ
            evaluation = write_stsb(tmp_path / "eval", rows)
        cfg = Config(evaluate={"data": evaluation}, parallel=runtime)
        clean = run_stage(decontaminate.STAGE, decontaminate.config(cfg), {"documents": kept}, art)
        results[name] = [
            *(f(path) for path in (docs, kept, clean) for f in (read_table, lambda p: read_manifest(p)["counts"])),
            read_dropped(kept),
            read_dropped(clean),
            [dataset_parts(path)[2] for path in (docs, kept, clean)],
        ]

    serial_docs, _, serial_kept, _, serial_clean, _, _, contaminated, _ = results["serial"]
    assert serial_docs.num_rows > 30 and len(set(serial_docs.column("source").to_pylist())) > 3
    assert 0 < serial_kept.num_rows < serial_docs.num_rows
    ids = serial_kept.column("doc_id").to_pylist()
    assert set(contaminated.column("doc_id").to_pylist()) >= {ids[i] for i in sentences}
    assert serial_clean.num_rows == serial_kept.num_rows - contaminated.num_rows > 0
    for name in ("processes", "ray"):
        for what, got, expected in zip(
            ["corpus", "corpus counts", "filter", "filter counts", "decontaminate", "decontaminate counts"]
            + ["filter drops", "decontaminate drops", "fingerprints"],
            results[name],
            results["serial"],
        ):
            assert got == expected, (name, what)


# Each objective's pairs over two epochs (what one draws in an epoch follows what it drew before); DeCLUTR's spans
# short enough for 300-word documents; a capped SimCSE draws its sentences from a reservoir.
PAIRS = {
    "declutr": {"min_length": 4, "max_length": 24},
    "simcse": {},
    "simcse capped": {"max_sentences": 50},
    "tsdae": {},
    "clear": {},
    "cert": {},
    "simcse-sup": {},
}


def backtranslations(art: str, documents: str) -> str:
    """A backtranslate dataset of the first 10 sentences of 6 documents through three pivots, as CERT reads it:
    two differ from each other, the third (zh) is empty for two sentences in three."""
    rows = []
    for doc in read_table(documents, columns=["doc_id", "text"]).to_pylist()[:6]:
        for i, text in enumerate(split_sentences(doc["text"])[:10]):
            translated = {"de": text.lower(), "fr": " ".join(reversed(text.split())), "zh": "" if i % 3 else text}
            rows += [
                {
                    **dict(doc_id=doc["doc_id"], segment_id=segment_id(doc["doc_id"], i), start=0, end=len(text)),
                    **dict(text=text, bt_text=bt, pivot_lang=pivot, backend="test", model="test"),
                }
                for pivot, bt in translated.items()
            ]
    with DatasetWriter(art, "backtranslate", "b" * 16, config={}, inputs={}, schema=BACKTRANSLATED) as out:
        out.write(rows)
    return out.path


def test_augment_writes_the_same_pairs_for_every_objective_on_every_backend(cluster, tmp_path, monkeypatch):
    docs, tok, art = corpus_and_tokenizer(tmp_path, n_docs=12, n_words=300)
    # Several units of work from a dozen documents, so each worker takes more than one.
    monkeypatch.setattr(sentences, "UNIT_CHARS", 3000)
    monkeypatch.setattr(prepare, "UNIT_CHARS", 3000)
    nli = tmp_path / "snli_1.0_train.jsonl"
    nli.write_text("".join(json.dumps({"sentence1": p, "sentence2": h, "gold_label": g}) + "\n" for p, h, g in NLI))
    done = {"decontaminate": docs, "tokenizer": tok, "backtranslate": backtranslations(art, docs)}
    results = {}
    for name, runtime in BACKENDS.items():
        for label, settings in PAIRS.items():
            cfg = Config(
                augment={"epochs": 2, **settings, "simcse_sup": {"nli": [str(nli)], "epochs": 2}}, parallel=runtime
            )
            run = TrainConfig(objective=label.split()[0])
            config = augment.config(cfg, run)
            # The runtime is not in the fingerprint: separate artifacts force real runs.
            path = run_stage(augment.STAGE, config, augment.inputs(cfg, done, run), str(tmp_path / name))
            manifest = {k: v for k, v in read_manifest(path).items() if k not in ("config", "created", "seconds")}
            results[name, label] = read_table(path), manifest

    assert {label.split()[0] for label in PAIRS} == set(objectives.names())
    for label in PAIRS:
        pairs, manifest = results["serial", label]
        assert pairs.num_rows > 0 and set(pairs.column("epoch").to_pylist()) == {0, 1}, label
        for name in ("processes", "ray"):
            # The same rows (ids, token ids, texts, in order) in byte-identical shards, the same counts and
            # draws, under the same fingerprint.
            assert results[name, label][0] == pairs, (name, label)
            assert results[name, label][1] == manifest, (name, label)
    assert results["serial", "simcse capped"][0].num_rows == 2 * 50 < results["serial", "simcse"][0].num_rows
    assert results["serial", "simcse"][1]["counts"]["short_sentence"] > 0  # counted in the units, summed here
