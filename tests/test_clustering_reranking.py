"""Clustering and reranking on the user's own files (pipeline.evaluate.clustering, pipeline.evaluate.reranking):
their layouts and errors, the metrics against loops over their formulas, and the scores against
sentence-transformers' RerankingEvaluator and scikit-learn's seeded k-means and v_measure_score."""

from __future__ import annotations

import gzip
import math
import random
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sentence_transformers.sentence_transformer.evaluation import RerankingEvaluator
from sklearn.cluster import MiniBatchKMeans
from sklearn.metrics import v_measure_score

from pipeline.errors import InputError
from pipeline.evaluate import clustering, reranking
from tests.conftest import WORDS
from tests.helpers import write_jsonl


def angle_embed(texts: list[str]) -> np.ndarray:
    """Each text "<degrees>" as the unit vector at that angle; the query "q" at 0 degrees. Cosine similarity to the
    query then falls as the angle grows, so a candidate's rank is its angle's."""
    return np.array(
        [
            [1.0, 0.0] if t == "q" else [math.cos(math.radians(float(t))), math.sin(math.radians(float(t)))]
            for t in texts
        ]
    )


# --- reranking ---------------------------------------------------------------------------------------------------


def loop_ap(ranked_relevance: list[int]) -> float:
    hits, total = 0, 0.0
    for rank, relevant in enumerate(ranked_relevance, start=1):
        if relevant:
            hits += 1
            total += hits / rank
    return total / hits


def loop_rr(ranked_relevance: list[int], k: int = 10) -> float:
    for rank, relevant in enumerate(ranked_relevance[:k], start=1):
        if relevant:
            return 1 / rank
    return 0.0


def test_reranking_map_and_mrr_equal_loops_over_hand_built_rankings(tmp_path):
    # Rankings by angle: relevance in rank order, written out by hand.
    rankings = [
        [1, 0, 0],  # AP 1, RR 1
        [0, 1, 0, 1],  # AP (1/2 + 2/4)/2, RR 1/2
        [0] * 10 + [1, 0],  # first positive at rank 11: RR 0 (MRR@10), AP 1/11
        [0, 0, 1, 1, 0, 1, 0],  # AP (1/3 + 2/4 + 3/6)/3, RR 1/3
    ]
    records = []
    for relevance in rankings:
        angles = [str(5 * (i + 1)) for i in range(len(relevance))]
        records.append(
            {
                "query": "q",
                "positive": [a for a, r in zip(angles, relevance) if r][::-1],
                "negative": [a for a, r in zip(angles, relevance) if not r],
            }
        )
    records.append({"query": "q", "positive": ["5"], "negative": []})  # nothing to rank: left out
    (task,) = reranking.find(write_jsonl(tmp_path / "mine.reranking.jsonl", records).parent)

    rows = {r["metric"]: r for r in reranking.score(task, angle_embed, seed=0)}
    assert rows["map"]["value"] == pytest.approx(np.mean([loop_ap(r) for r in rankings]), abs=1e-12)
    assert rows["mrr_at_10"]["value"] == pytest.approx(np.mean([loop_rr(r) for r in rankings]), abs=1e-12)
    assert rows["map"]["value"] == pytest.approx((1 + 0.5 + 1 / 11 + (1 / 3 + 1 / 2 + 1 / 2) / 3) / 4)
    assert {r["n"] for r in rows.values()} == {4}
    assert {(r["task"], r["subset"], r["split"], r["protocol"]) for r in rows.values()} == {
        ("mine", "all", "test", "reranking")
    }


def test_reranking_files_by_name_gzip_and_single_strings(tmp_path):
    write_jsonl(tmp_path / "a.reranking.jsonl.gz", [{"query": "q", "positive": "10", "negative": ["5", "20"]}])
    write_jsonl(tmp_path / "b.jsonl", [{"sentence1": "x", "sentence2": "y", "score": 1}])  # an STS pair file
    (task,) = reranking.find(tmp_path)
    assert task.name == "a" and task.data[0].positive == ["10"]
    rows = {r["metric"]: r["value"] for r in reranking.score(task, angle_embed, seed=0)}
    assert rows == {"map": pytest.approx(0.5), "mrr_at_10": pytest.approx(0.5)}
    assert reranking.find(tmp_path / "b.jsonl") == []


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"query": "q", "positive": ["a"], "negative": [3]}', ":2: negative is [3], not a list of texts"),
        ('{"query": 5, "positive": ["a"], "negative": ["b"]}', ":2: query is 5"),
        ("[1, 2]", ":2: expected an object"),
    ],
)
def test_a_bad_reranking_row_is_one_line_naming_file_and_line(tmp_path, line, message):
    path = tmp_path / "t.reranking.jsonl"
    path.write_text('{"query": "q", "positive": ["a"], "negative": ["b"]}\n' + line + "\n")
    with pytest.raises(InputError) as err:
        reranking.find(tmp_path)
    assert f"{path}{message}" in str(err.value) and "\n" not in str(err.value)


def test_reranking_without_a_query_to_rank_is_an_error(tmp_path):
    write_jsonl(tmp_path / "t.reranking.jsonl", [{"query": "q", "positive": ["a"], "negative": []}])
    with pytest.raises(InputError, match="no query with both a positive and a negative"):
        reranking.find(tmp_path)


# --- clustering --------------------------------------------------------------------------------------------------


def entropy(counts) -> float:
    total = sum(counts)
    return -sum(c / total * math.log(c / total) for c in counts if c)


def conditional_entropy(a: list, b: list) -> float:
    """H(A | B) = -sum p(a, b) log p(a, b) / p(b)."""
    joint, marginal, n = Counter(zip(a, b)), Counter(b), len(a)
    return -sum(c / n * math.log(c / marginal[y]) for (_, y), c in joint.items())


def entropy_v_measure(labels: list, clusters: list) -> float:
    homogeneity = 1 - conditional_entropy(labels, clusters) / entropy(Counter(labels).values())
    completeness = 1 - conditional_entropy(clusters, labels) / entropy(Counter(clusters).values())
    return 2 * homogeneity * completeness / (homogeneity + completeness)


@pytest.mark.parametrize(
    "labels, clusters",
    [
        (["a", "a", "b", "b", "c", "c"], [0, 0, 1, 1, 1, 2]),
        (["x", "y", "x", "y", "x", "y", "z"], [2, 2, 0, 0, 1, 1, 1]),
    ],
)
def test_v_measure_equals_its_entropy_formula(labels, clusters):
    expected = entropy_v_measure(labels, clusters)
    assert 0 < expected < 1
    assert clustering.v_measure(labels, np.array(clusters)) == pytest.approx(expected, abs=1e-12)


def blob_set(rng: np.random.Generator, n_labels: int, per_label: int, spread: float):
    """Sentences "<label>-<i>" whose embeddings sit around one centre per label; a wide spread mixes them."""
    centres = rng.normal(size=(n_labels, 8))
    vectors, sentences, labels = {}, [], []
    for label in range(n_labels):
        for i in range(per_label):
            sentence = f"{label}-{i}-{rng.integers(1 << 30)}"
            vectors[sentence] = centres[label] + spread * rng.normal(size=8)
            sentences.append(sentence)
            labels.append(f"topic{label}")
    return sentences, labels, vectors


def reference_v_measure(embeddings: np.ndarray, labels: list, seed: int) -> float:
    """What MTEB's k-means settings give over seeds seed..seed+9, by scikit-learn alone."""
    k = len(set(labels))
    return float(
        np.mean(
            [
                v_measure_score(
                    labels,
                    MiniBatchKMeans(n_clusters=k, batch_size=512, n_init=1, random_state=seed + run).fit_predict(
                        embeddings
                    ),
                )
                for run in range(10)
            ]
        )
    )


def test_clustering_sets_average_seeded_kmeans_v_measure(tmp_path):
    rng = np.random.default_rng(0)
    (s1, l1, v1), (s2, l2, v2) = blob_set(rng, 3, 20, 0.9), blob_set(rng, 4, 15, 1.2)
    vectors = {**v1, **v2}
    write_jsonl(
        tmp_path / "topics.clustering.jsonl", [{"sentences": s1, "labels": l1}, {"sentences": s2, "labels": l2}]
    )
    (task,) = clustering.find(tmp_path)
    (row,) = clustering.score(task, lambda texts: np.array([vectors[t] for t in texts]), seed=3)

    first = reference_v_measure(np.array([v1[s] for s in s1]), l1, 3)
    second = reference_v_measure(np.array([v2[s] for s in s2]), l2, 3)
    assert 0.3 < first < 1 and 0.3 < second < 1  # neither trivially perfect nor noise
    # The task is the mean over its sets.
    assert row["value"] == pytest.approx((first + second) / 2, abs=1e-4)
    assert row == {
        "task": "topics",
        "subset": "all",
        "split": "test",
        "metric": "v_measure",
        "protocol": "clustering",
        "value": row["value"],
        "n": 60 + 60,
    }


@pytest.mark.parametrize("name", ["news.clustering.csv.gz", "news.clustering.parquet"])
def test_clustering_tables_are_one_set(tmp_path, name):
    rng = np.random.default_rng(1)
    sentences, labels, vectors = blob_set(rng, 3, 10, 1.0)
    path = tmp_path / name
    if name.endswith(".parquet"):
        pq.write_table(pa.table({"text": sentences, "label": [int(lab[5:]) for lab in labels]}), path)
    else:
        rows = "".join(f'"{s}",{lab}\n' for s, lab in zip(sentences, labels))
        path.write_bytes(gzip.compress(f"text,label\n{rows}".encode()))
    (task,) = clustering.find(tmp_path)
    assert task.name == "news" and len(task.data) == 1 and len(set(task.data[0][1])) == 3
    (row,) = clustering.score(task, lambda texts: np.array([vectors[t] for t in texts]), seed=0)
    embeddings = np.array([vectors[s] for s in sentences])
    assert row["value"] == pytest.approx(reference_v_measure(embeddings, labels, 0), abs=1e-4)


@pytest.mark.parametrize(
    "name, content, message",
    [
        (
            "t.clustering.jsonl",
            '{"sentences": ["a", "b", "c"], "labels": [1, 1, 2]}\n{"sentences": ["a", "b"], "labels": [1]}\n',
            ":2: 2 sentences but 1 labels",
        ),
        ("t.clustering.jsonl", '{"sentences": ["a", 3], "labels": [1, 2]}\n', ":1: sentence 3 is not a string"),
        ("t.clustering.jsonl", '{"sentences": ["a"], "labels": [[1, 2]]}\n', ":1: label [1, 2] is not"),
        ("t.clustering.jsonl", '{"texts": ["a"]}\n', ':1: expected lists "sentences" and "labels"'),
        ("t.clustering.csv", "text,topic\na,1\n", ":1: no column(s) label"),
    ],
)
def test_a_bad_clustering_row_is_one_line_naming_file_and_line(tmp_path, name, content, message):
    (tmp_path / name).write_text(content)
    with pytest.raises(InputError) as err:
        clustering.find(tmp_path)
    assert f"{tmp_path / name}{message}" in str(err.value) and "\n" not in str(err.value)


def test_two_files_of_one_clustering_task_are_an_error(tmp_path):
    (tmp_path / "t.clustering.jsonl").write_text('{"sentences": ["a", "b", "c"], "labels": [1, 1, 2]}\n')
    (tmp_path / "t.clustering.csv").write_text("text,label\na,1\nb,1\nc,2\n")
    with pytest.raises(InputError, match="both name the clustering task t"):
        clustering.find(tmp_path)
    assert clustering.find(tmp_path / "t.clustering.csv")[0].data == [(["a", "b", "c"], ["1", "1", "2"])]


def test_a_kind_in_a_format_it_does_not_read_is_an_error(tmp_path):
    (tmp_path / "t.reranking.csv").write_text("query,positive,negative\nq,a,b\n")
    with pytest.raises(InputError, match=r"t.reranking.csv: a reranking file is named <task>.reranking.jsonl"):
        reranking.find(tmp_path)


def test_no_files_of_a_kind_is_no_task(tmp_path):
    (tmp_path / "sts.jsonl").write_text('{"sentence1": "a", "sentence2": "b", "score": 1}\n')
    assert clustering.find(tmp_path) == [] and reranking.find(tmp_path) == []


# --- against the references, on a real (tiny) model ---------------------------------------------------------------


@pytest.fixture(scope="module")
def models(st_and_encoder):
    st, ours = st_and_encoder
    return st, lambda texts: ours.encode(texts, batch_size=64)


def sentence(rng: random.Random, words: list[str]) -> str:
    return " ".join(rng.choice(words) for _ in range(rng.randint(3, 8)))


def test_reranking_equals_sentence_transformers_reranking_evaluator(models, tmp_path):
    st, embed = models
    rng = random.Random(5)
    samples = []
    for _ in range(30):
        query = sentence(rng, WORDS)
        # Positives share the query's words; negatives are drawn from all words.
        samples.append(
            {
                "query": query,
                "positive": [sentence(rng, query.split()) for _ in range(rng.randint(1, 3))],
                "negative": [sentence(rng, WORDS) for _ in range(rng.randint(1, 14))],
            }
        )
    samples.append({"query": sentence(rng, WORDS), "positive": [], "negative": ["kabar"]})
    (task,) = reranking.find(write_jsonl(tmp_path / "own.reranking.jsonl", samples).parent)
    rows = {r["metric"]: r["value"] for r in reranking.score(task, embed, seed=0)}

    evaluator = RerankingEvaluator(samples, at_k=10, batch_size=64, write_csv=False)
    theirs = evaluator(st)
    print(f"reranking: ours {rows}, RerankingEvaluator {theirs}")
    assert 0.05 < rows["mrr_at_10"] < 0.999  # a ranking that is neither perfect nor all misses
    assert rows["map"] == pytest.approx(theirs["map"], abs=1e-4)
    assert rows["mrr_at_10"] == pytest.approx(theirs["mrr@10"], abs=1e-4)


def test_clustering_equals_sklearn_on_the_models_embeddings(models, tmp_path):
    st, embed = models
    rng = random.Random(6)
    topics = [WORDS[i : i + 16] for i in range(0, 32, 8)]  # four topics, each sharing half its words with the next
    sentences, labels = [], []
    for label, words in enumerate(topics):
        for _ in range(15):
            sentences.append(sentence(rng, words))
            labels.append(str(label))
    write_jsonl(tmp_path / "own.clustering.jsonl", [{"sentences": sentences, "labels": labels}])
    (task,) = clustering.find(tmp_path)
    (row,) = clustering.score(task, embed, seed=42)

    theirs = reference_v_measure(st.encode(sentences, batch_size=64), labels, 42)
    print(f"clustering: ours {row['value']}, sklearn {theirs}")
    assert 0.05 < theirs < 0.999
    assert row["value"] == pytest.approx(theirs, abs=1e-4)
