"""The task kinds beside STS and transfer (pipeline.evaluate.kinds): retrieval and pair classification read from
their real layouts, scored as a plain loop over each metric's formula scores hand-built embeddings, and as
sentence-transformers' evaluators score a tiny model; the evaluate stage scores a directory of them alone; the
leaderboard shows their main metrics, a mean per kind, and ranks by them."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import average_precision_score, v_measure_score

from pipeline.config import Config
from pipeline.errors import InputError
from pipeline.evaluate import items as test_items
from pipeline.evaluate import kinds, pairclass, retrieval
from pipeline.evaluate import stage as evaluate
from pipeline.evaluate.config import EvaluateConfig
from pipeline.leaderboard.intervals import add_intervals
from pipeline.leaderboard.table import leaderboard, to_markdown
from pipeline.readers.sts import find_sts
from pipeline.stage import run_stage
from storage import read_table
from tests.conftest import WORDS
from tests.helpers import write_jsonl

# Data in the real layouts.


def write_beir(
    root: Path, passages: list[tuple[str, str, str]], queries: list[tuple[str, str]], qrels: list[tuple[str, str, int]]
) -> Path:
    """BEIR's layout: the corpus gzipped (as BEIR ships some), passages as (_id, title, text)."""
    (root / "qrels").mkdir(parents=True)
    write_jsonl(root / "corpus.jsonl.gz", [{"_id": i, "title": t, "text": x} for i, t, x in passages])
    write_jsonl(root / "queries.jsonl", [{"_id": i, "text": x} for i, x in queries])
    (root / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{c}\t{s}\n" for q, c, s in qrels)
    )
    return root


def sentences(rng: np.random.Generator, n: int) -> list[str]:
    return [" ".join(WORDS[j] for j in rng.integers(len(WORDS), size=int(rng.integers(3, 9)))) for _ in range(n)]


def retrieval_set(root: Path, seed: int = 0, n_passages: int = 150, n_queries: int = 12) -> Path:
    """Passages with and without titles, queries each with 1-4 relevant passages (grades 1 and 2), a grade-0 row
    (not relevant) and a query with no relevant passage (left out)."""
    rng = np.random.default_rng(seed)
    texts, titles = sentences(rng, n_passages), sentences(rng, n_passages)
    passages = [(f"d{i}", titles[i] if i % 3 else "", texts[i]) for i in range(n_passages)]
    relevant = [rng.choice(n_passages, size=int(rng.integers(1, 5)), replace=False) for _ in range(n_queries - 1)]
    # A query is its first relevant passage's text less a word, so a model can find it; the last has none.
    queries = [(f"q{i}", " ".join(texts[js[0]].split()[1:])) for i, js in enumerate(relevant)]
    queries.append((f"q{n_queries - 1}", sentences(rng, 1)[0]))
    qrels = [(f"q{i}", f"d{j}", int(rng.integers(1, 3))) for i, js in enumerate(relevant) for j in js]
    qrels += [(queries[0][0], f"d{n_passages - 1}", 0), (queries[-1][0], "d3", 0)]
    return write_beir(root, passages, queries, qrels)


def pairclass_set(path: Path, seed: int = 0, n: int = 60) -> Path:
    rng = np.random.default_rng(seed)
    a, b = sentences(rng, n), sentences(rng, n)
    labels = rng.integers(0, 2, size=n)
    # Some positives as near-copies, so the scores mean something; one pair twice (a tie of equal cosines).
    b = [x if y and i % 2 else s for i, (x, s, y) in enumerate(zip(a, b, labels))]
    rows = pd.DataFrame({"sentence1": a + [a[0]], "sentence2": b + [b[0]], "label": [*labels, 1 - labels[0]]})
    path.parent.mkdir(parents=True, exist_ok=True)
    rows.to_csv(
        path,
        sep="\t" if ".tsv" in path.name else ",",
        index=False,
        compression="gzip" if path.suffix == ".gz" else None,
    )
    return path


class Lookup:
    """An embedding by table: each text's vector is drawn once, so equal texts embed equally."""

    def __init__(self, dim: int = 6, seed: int = 0):
        self.rng, self.dim, self.vectors, self.calls = np.random.default_rng(seed), dim, {}, []

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls.append(len(texts))
        for t in texts:
            self.vectors.setdefault(t, self.rng.normal(size=self.dim))
        return np.array([self.vectors[t] for t in texts], dtype=np.float32)


def cosine(a, b) -> float:
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a)) / math.sqrt(sum(y * y for y in b))


# Retrieval.


def expected_retrieval(root: Path, vectors: dict[str, np.ndarray]) -> dict[str, float]:
    """The metrics by their definitions (InformationRetrievalEvaluator's), one query and one rank at a time."""
    with gzip.open(root / "corpus.jsonl.gz", "rt") as f:
        corpus = {r["_id"]: (r["title"] + " " + r["text"]).strip() for r in map(json.loads, f)}
    queries = {r["_id"]: r["text"] for r in map(json.loads, (root / "queries.jsonl").open())}
    relevant: dict[str, set] = {}
    for line in (root / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        q, c, s = line.split("\t")
        if int(s) > 0:
            relevant.setdefault(q, set()).add(c)
    totals = {"nDCG@10": 0.0, "MRR@10": 0.0, "Recall@100": 0.0, "MAP@100": 0.0}
    scored = [q for q in queries if q in relevant]
    for q in scored:
        sims = [(cosine(vectors[queries[q]], vectors[text]), cid) for cid, text in corpus.items()]
        ranked = [cid for _, cid in sorted(sims, key=lambda x: (-x[0], x[1]))]
        rel = relevant[q]
        dcg = sum(1 / math.log2(r + 2) for r in range(10) if ranked[r] in rel)
        idcg = sum(1 / math.log2(r + 2) for r in range(min(10, len(rel))))
        totals["nDCG@10"] += dcg / idcg
        totals["MRR@10"] += next((1 / (r + 1) for r in range(10) if ranked[r] in rel), 0.0)
        totals["Recall@100"] += sum(ranked[r] in rel for r in range(100)) / len(rel)
        hits, precisions = 0, 0.0
        for r in range(100):
            if ranked[r] in rel:
                hits += 1
                precisions += hits / (r + 1)
        totals["MAP@100"] += precisions / min(100, len(rel))
    return {k: v / len(scored) for k, v in totals.items()}


def test_retrieval_scores_by_the_metrics_definitions_over_chunks(tmp_path, monkeypatch):
    root = retrieval_set(tmp_path / "eval" / "mini-beir")
    (task,) = kinds.find_all(tmp_path / "eval")
    assert (task.kind, task.name) == ("retrieval", "mini-beir")
    embed = Lookup()
    monkeypatch.setattr(retrieval, "CHUNK", 40)  # 150 passages: four chunks, the last short
    monkeypatch.setattr(retrieval, "QUERIES", 5)
    rows = retrieval.score(task, embed, seed=0)
    assert embed.calls == [11, 40, 40, 40, 30]  # the queries with a relevant passage, then the corpus by chunk
    got = {r["metric"]: r["value"] for r in rows}
    want = expected_retrieval(root, embed.vectors)
    assert got == pytest.approx(want, abs=1e-6)
    assert 0 < got["nDCG@10"] < 1 and 0 < got["Recall@100"] < 1  # neither cut-off is trivial here
    assert {(r["protocol"], r["split"], r["subset"], r["n"]) for r in rows} == {("retrieval", "test", "all", 11)}


def test_retrieval_breaks_ties_by_passage_id_across_chunks(tmp_path, monkeypatch):
    """Twelve passages of one text (equal cosines) in two chunks: ranked by id, as over the whole corpus."""
    same = [(f"d{i:02d}", "", "kabar lodos") for i in range(11, -1, -1)]  # the file lists them in reverse
    write_beir(tmp_path / "ties", same, [("q", "mifen")], [("q", "d09", 1), ("q", "d10", 1)])
    (task,) = retrieval.find(tmp_path)
    monkeypatch.setattr(retrieval, "CHUNK", 5)
    got = {r["metric"]: r["value"] for r in retrieval.score(task, Lookup(), seed=0)}
    assert got["nDCG@10"] == pytest.approx((1 / math.log2(11)) / (1 + 1 / math.log2(3)))
    assert got["MRR@10"] == pytest.approx(1 / 10)


@pytest.mark.parametrize(
    "where, content, message",
    [
        ("queries.jsonl", '{"_id": "q0", "text": "a"}\n{"_id": "q1"}\n', "queries.jsonl:2: text is None"),
        ("queries.jsonl", '{"_id": "q0", "text": "a"}\nnot json\n', "queries.jsonl:2: not valid JSON"),
        ("qrels/test.tsv", "query-id\tcorpus-id\tscore\nq0\td0\thigh\n", "test.tsv:2: score 'high' is not a number"),
        ("qrels/test.tsv", "qid\tdid\tscore\nq0\td0\t1\n", "test.tsv:1: expected the header"),
    ],
)
def test_a_bad_retrieval_file_is_one_line_naming_file_and_line(tmp_path, where, content, message):
    root = write_beir(tmp_path / "t", [("d0", "", "kabar")], [("q0", "lodos")], [("q0", "d0", 1)])
    (root / where).write_text(content)
    with pytest.raises(InputError, match=message) as e:
        kinds.find_all(tmp_path)
    assert "\n" not in str(e.value)


def test_a_retrieval_folder_without_qrels_is_an_error(tmp_path):
    root = write_beir(tmp_path / "t", [("d0", "", "kabar")], [("q0", "lodos")], [("q0", "d0", 1)])
    (root / "qrels" / "test.tsv").unlink()
    with pytest.raises(InputError, match=r"t: a retrieval task \(BEIR's layout\) without qrels/test.tsv"):
        retrieval.find(tmp_path)


# Pair classification.


def expected_pairclass(scores: list[float], labels: list[int]) -> dict[str, float]:
    """AP as the area under the step precision-recall curve (sklearn's and the evaluator's definition), and the
    best accuracy and F1 over every threshold between distinct scores, one threshold at a time."""
    thresholds = sorted(set(scores), reverse=True)
    positives = sum(labels)
    ap, recall_before, best_acc, best_f1 = 0.0, 0.0, (len(labels) - positives) / len(labels), 0.0
    for t in thresholds:
        predicted = [s >= t for s in scores]
        tp = sum(p and y for p, y in zip(predicted, labels))
        precision, recall = tp / sum(predicted), tp / positives
        ap += (recall - recall_before) * precision
        recall_before = recall
        best_acc = max(best_acc, sum(p == bool(y) for p, y in zip(predicted, labels)) / len(labels))
        if tp:
            best_f1 = max(best_f1, 2 * precision * recall / (precision + recall))
    return {"AP": ap, "accuracy": best_acc, "F1": best_f1}


@pytest.mark.parametrize("name", ["dupes.pairclass.csv", "dupes.pairclass.tsv.gz"])
def test_pair_classification_scores_by_the_metrics_definitions(tmp_path, name):
    path = pairclass_set(tmp_path / "eval" / name)
    (task,) = kinds.find_all(tmp_path / "eval")
    assert (task.kind, task.name) == ("pairclass", "dupes")
    embed = Lookup(dim=3)
    rows = pairclass.score(task, embed, seed=0)
    table = pd.read_csv(path, sep="\t" if ".tsv" in name else ",")
    scores = [cosine(embed.vectors[a], embed.vectors[b]) for a, b in zip(table["sentence1"], table["sentence2"])]
    want = expected_pairclass(scores, table["label"].tolist())
    assert {r["metric"]: r["value"] for r in rows} == pytest.approx(want, abs=1e-6)
    assert {(r["protocol"], r["n"]) for r in rows} == {("pairclass", len(table))}


@pytest.mark.parametrize(
    "content, message",
    [
        ("sentence1,sentence2,label\na,b,1\nc,d,2\n", r"dupes.pairclass.csv:3: label is '2', not 0 or 1"),
        ("sentence1,sentence2\na,b\n", r"dupes.pairclass.csv:1: no column\(s\) label"),
        ("sentence1,sentence2,label\na,b,1\nc,d,1\n", r"dupes.pairclass.csv: needs pairs of both labels"),
    ],
)
def test_a_bad_pair_classification_file_is_one_line_naming_file_and_line(tmp_path, content, message):
    (tmp_path / "dupes.pairclass.csv").write_text(content)
    with pytest.raises(InputError, match=message):
        kinds.find_all(tmp_path)


# Against sentence-transformers' evaluators, on a tiny model of ours (its sentence-transformers/ export), which
# both sides load: ours through pipeline.model.exported.Encoder, as the evaluate stage does.


@pytest.fixture(scope="module")
def st_pair(st_and_encoder):
    st, ours = st_and_encoder
    return st, lambda texts: ours.encode(texts, batch_size=32)


def test_retrieval_equals_sentence_transformers_information_retrieval_evaluator(st_pair, tmp_path, monkeypatch):
    from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator
    from sentence_transformers.util import cos_sim

    st, embed = st_pair
    retrieval_set(tmp_path / "beir", seed=3, n_passages=300, n_queries=40)
    (task,) = retrieval.find(tmp_path)
    monkeypatch.setattr(retrieval, "CHUNK", 128)
    ours = {r["metric"]: r["value"] for r in retrieval.score(task, embed, seed=0)}
    d = task.data
    evaluator = InformationRetrievalEvaluator(
        dict(zip(d.query_ids, d.queries)),
        dict(zip(d.passage_ids, d.passages)),
        d.relevant,
        batch_size=32,
        score_functions={"cosine": cos_sim},
        name="t",
        mrr_at_k=[10],
        ndcg_at_k=[10],
        map_at_k=[100],
        precision_recall_at_k=[100],
        accuracy_at_k=[10],
        corpus_chunk_size=128,
    )
    theirs = evaluator(st)
    assert ours == pytest.approx(
        {
            "nDCG@10": theirs["t_cosine_ndcg@10"],
            "MRR@10": theirs["t_cosine_mrr@10"],
            "Recall@100": theirs["t_cosine_recall@100"],
            "MAP@100": theirs["t_cosine_map@100"],
        },
        abs=1e-4,
    )
    assert 0.02 < ours["nDCG@10"] < 0.98  # a ranking that can be got wrong


def test_pair_classification_equals_sentence_transformers_binary_classification_evaluator(st_pair, tmp_path):
    from sentence_transformers.sentence_transformer.evaluation import BinaryClassificationEvaluator

    st, embed = st_pair
    path = pairclass_set(tmp_path / "dupes.pairclass.csv", seed=4, n=200)
    (task,) = pairclass.find(tmp_path)
    ours = {r["metric"]: r["value"] for r in pairclass.score(task, embed, seed=0)}
    table = pd.read_csv(path)
    evaluator = BinaryClassificationEvaluator(
        table["sentence1"].tolist(),
        table["sentence2"].tolist(),
        table["label"].tolist(),
        name="t",
        batch_size=32,
        similarity_fn_names=["cosine"],
    )
    theirs = evaluator(st)
    assert ours == pytest.approx(
        {"AP": theirs["t_cosine_ap"], "accuracy": theirs["t_cosine_accuracy"], "F1": theirs["t_cosine_f1"]}, abs=1e-4
    )


# The evaluate stage and the leaderboard.


def test_the_stage_scores_a_directory_of_other_kinds_alone_and_fingerprints_their_files(evaluate_setup, tmp_path):
    data = tmp_path / "mine"
    retrieval_set(data / "mini-beir")
    pairclass_set(data / "dupes.pairclass.csv.gz")
    cfg = Config(evaluate=EvaluateConfig(data=str(data), batch_size=16))
    evaluate.check(cfg)  # no STS task there, and none needed
    assert [(t.kind, t.name) for t in kinds.find_all(data)] == [("retrieval", "mini-beir"), ("pairclass", "dupes")]
    config = evaluate.config(
        cfg, evaluate.Row("tiny", {"kind": "untrained"}, {"model": evaluate_setup["model"]}, {"objective": "test"})
    )
    out = run_stage(evaluate.STAGE, config, {"model": evaluate_setup["model"]}, str(tmp_path / "art"))
    scores = read_table(out).to_pandas()
    assert set(zip(scores["task"], scores["metric"])) == {
        ("mini-beir", m) for m in ("nDCG@10", "MRR@10", "Recall@100", "MAP@100")
    } | {("dupes", m) for m in ("AP", "accuracy", "F1")}
    assert scores["value"].between(0, 1).all() and (scores["dimension"] == 32).all()
    kept = test_items.read(out)  # each query's nDCG@10 and each pair's cosine, for the leaderboard's intervals
    assert set(zip(kept["task"], kept["protocol"])) == {("mini-beir", "retrieval"), ("dupes", "pairclass")}
    queries, pairs = kept[kept["task"] == "mini-beir"], kept[kept["task"] == "dupes"]
    (ndcg,) = scores.loc[scores["metric"] == "nDCG@10", "value"]
    assert len(queries) == 11 and queries["prediction"].mean() == pytest.approx(ndcg)
    (ap,) = scores.loc[scores["metric"] == "AP", "value"]
    assert pairs["gold"].isin([0, 1]).all() and pairs["prediction"].abs().le(1 + 1e-6).all()
    assert average_precision_score(pairs["gold"], pairs["prediction"]) == pytest.approx(ap)
    before = evaluate.data_fingerprint(str(data), {"transfer": True})
    with (data / "mini-beir" / "qrels" / "test.tsv").open("a") as f:
        f.write("q1\td7\t1\n")
    assert evaluate.data_fingerprint(str(data), {"transfer": True}) != before


def kind_scores() -> pd.DataFrame:
    rows = []
    for model, values in {"a": (0.5, 0.3, 0.9), "b": (0.4, 0.6, 0.8), "c": (0.7, None, 0.6)}.items():
        for task, value in zip(("scifact", "nfcorpus"), values[:2]):
            if value is not None:
                rows += [
                    {**r, "model": model} for r in kinds.rows("retrieval", task, {"nDCG@10": value, "MRR@10": 0.1}, 5)
                ]
        rows += [{**r, "model": model} for r in kinds.rows("pairclass", "dupes", {"AP": values[2], "F1": 0.2}, 9)]
    return pd.DataFrame(rows)


def test_the_leaderboard_shows_each_tasks_main_metric_and_a_mean_per_kind():
    table = leaderboard(kind_scores())
    scored = ["scifact nDCG@10", "nfcorpus nDCG@10", "avg retrieval", "dupes AP", "avg pairclass"]
    assert [c for c in table.columns if c != "model"] == scored
    by_model = table.set_index("model")
    assert by_model.loc["a", "avg retrieval"] == pytest.approx(40.0)
    assert by_model.loc["b", "avg retrieval"] == pytest.approx(50.0)
    assert pd.isna(by_model.loc["c", "avg retrieval"])  # never a mean of fewer tasks than the kind has here
    assert table["model"].tolist() == ["b", "a", "c"]  # by the first kind's average when nothing else is there
    assert leaderboard(kind_scores(), rank_by="dupes AP")["model"].tolist() == ["a", "b", "c"]
    assert "avg retrieval" in to_markdown(table, [], "t")


def test_rank_by_may_name_a_kinds_columns_in_the_config():
    assert EvaluateConfig(rank_by="avg retrieval").rank_by == "avg retrieval"
    assert EvaluateConfig(rank_by="scifact nDCG@10").rank_by == "scifact nDCG@10"
    with pytest.raises(ValueError, match="not a leaderboard column"):
        EvaluateConfig(rank_by="scifact nDCG@11")


def test_a_leaderboard_of_other_kinds_alone_says_nothing_of_sts_columns():
    text = to_markdown(leaderboard(kind_scores()), [], "t")
    assert "Other task kinds (scifact nDCG@10, nfcorpus nDCG@10, avg retrieval, dupes AP, avg pairclass)" in text
    assert "STS columns" not in text


def test_every_kind_is_found_beside_sts_pair_files_which_leave_the_kinds_files_alone(tmp_path):
    rng = np.random.default_rng(5)
    retrieval_set(tmp_path / "mini-beir")
    pairclass_set(tmp_path / "dupes.pairclass.tsv")
    write_jsonl(tmp_path / "topics.clustering.jsonl", [{"sentences": sentences(rng, 6), "labels": [0, 0, 1, 1, 2, 2]}])
    write_jsonl(
        tmp_path / "faq.reranking.jsonl.gz",
        [{"query": "kabar", "positive": ["kabar lodos"], "negative": ["mifen", "nuhom"]}],
    )
    write_jsonl(tmp_path / "mine.jsonl", [{"sentence1": "kabar", "sentence2": "lodos", "score": s} for s in (1, 2)])
    found = [(t.kind, t.name) for t in kinds.find_all(tmp_path)]
    assert found == [("retrieval", "mini-beir"), ("clustering", "topics"), ("pairclass", "dupes"), ("reranking", "faq")]
    assert [s.task for s in find_sts(tmp_path)[0]] == ["mine"]


def test_retrieval_columns_and_their_average_get_bootstrap_intervals_from_the_per_query_items():
    rng = np.random.default_rng(0)
    scores, items = kind_scores(), {}
    for m in ("a", "b", "c"):
        frames = []
        for task in ("scifact", "nfcorpus") if m != "c" else ("scifact",):  # c was not scored on nfcorpus
            values = rng.uniform(size=30)
            at = (scores["model"] == m) & (scores["task"] == task) & (scores["metric"] == "nDCG@10")
            scores.loc[at, "value"] = values.mean()  # the score as its items make it
            frames.append(
                pd.DataFrame(
                    {"task": task, "protocol": "retrieval", "stratum": "all", "prediction": values, "gold": 0.0}
                )
            )
        items[m] = pd.concat(frames)
    table = leaderboard(scores, items=items).set_index("model")
    for m in ("a", "b", "c"):
        values = items[m].loc[items[m]["task"] == "scifact", "prediction"]
        lo, hi = table.loc[m, "scifact nDCG@10 lo"], table.loc[m, "scifact nDCG@10 hi"]
        error = 100 * values.std() / np.sqrt(len(values))  # the mean's standard error: the interval is ~ +-2 of it
        assert lo < table.loc[m, "scifact nDCG@10"] < hi and 2.5 * error < hi - lo < 5.5 * error
    for m in ("a", "b"):
        assert table.loc[m, "avg retrieval lo"] < table.loc[m, "avg retrieval"] < table.loc[m, "avg retrieval hi"]
    assert pd.isna(table.loc["c", "avg retrieval lo"])
    assert "dupes AP lo" not in table.columns  # no model here kept the pairs' items


def test_pair_classification_and_clustering_intervals_are_sklearn_on_each_resampled_list():
    """Each resample's AP and V-measure are scikit-learn's on the resampled items written out as lists; a clustering
    set's runs share one draw of its sentences (they cluster the same sentences)."""
    rng, b = np.random.default_rng(3), 200
    labels = {"set 0": [0, 0, 0, 1, 1, 1, 2, 2, 2, 2], "set 1": [0, 1, 0, 1, 0, 1, 1]}
    runs = {s: [rng.integers(0, 3 if s == "set 0" else 2, len(g)) for _ in range(3)] for s, g in labels.items()}
    gold_pairs = [1, 0, 1, 1, 0, 0, 1, 0, 1, 0, 0, 1]
    cosines = np.round(rng.uniform(-1, 1, len(gold_pairs)), 1)  # ties: one threshold each
    items = pd.concat(
        [
            pd.DataFrame(
                {"task": "dupes", "protocol": "pairclass", "stratum": "all", "prediction": cosines, "gold": gold_pairs}
            )
        ]
        + [
            pd.DataFrame(
                {
                    "task": "topics",
                    "protocol": "clustering",
                    "stratum": f"{s} run {r}",
                    "prediction": a,
                    "gold": labels[s],
                }
            )
            for s in labels
            for r, a in enumerate(runs[s])
        ]
    )
    point = {
        "AP": average_precision_score(gold_pairs, cosines),
        "v_measure": np.mean([np.mean([v_measure_score(labels[s], a) for a in runs[s]]) for s in labels]),
    }
    scores = pd.DataFrame(
        [
            {**r, "model": "m"}
            for r in kinds.rows("pairclass", "dupes", {"AP": point["AP"]}, 12)
            + kinds.rows("clustering", "topics", {"v_measure": point["v_measure"]}, 17)
        ]
    )
    draws = {
        task: [rng.integers(0, n, size=(b, n)) for n in sizes]
        for task, sizes in {"dupes": [12], "topics": [10] * 3 + [7] * 3}.items()
    }

    def seam(task, sizes, n):
        yield draws[task]

    table = add_intervals(leaderboard(scores), {"m": items}, b=b, draw=seam)[0].set_index("model")
    ap = [average_precision_score(np.array(gold_pairs)[i], cosines[i]) for i in draws["dupes"][0]]
    first_run = {"set 0": draws["topics"][0], "set 1": draws["topics"][3]}
    vm = [
        np.mean(
            [
                np.mean([v_measure_score(np.array(labels[s])[first_run[s][k]], a[first_run[s][k]]) for a in runs[s]])
                for s in labels
            ]
        )
        for k in range(b)
    ]
    for column, values in {"dupes AP": ap, "topics v_measure": vm}.items():
        lo, hi = np.percentile(100 * np.array(values), [2.5, 97.5])
        assert table.loc["m", f"{column} lo"] == pytest.approx(lo, abs=0.0051)  # the table rounds to 2 decimals
        assert table.loc["m", f"{column} hi"] == pytest.approx(hi, abs=0.0051)
