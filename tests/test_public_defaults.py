"""`make run` with no arguments: the default profile's public corpus (WikiText-103 as Salesforce/wikitext's Parquet
files) and STS evaluation data (MTEB's STS pair files), served here from 127.0.0.1 in their real layouts; STS pair
files in every format, scored and shown on the leaderboard; and the one-line error offline."""

from __future__ import annotations

import gzip
import json
import socket
import urllib.parse
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.config import DEFAULT_PROFILE, load_config
from pipeline.corpus import stage as corpus
from pipeline.errors import ConfigError, InputError
from pipeline.evaluate.sts import score_sts
from pipeline.leaderboard.table import leaderboard, to_markdown
from pipeline.readers.sts import StsDataError, find_sts
from pipeline.stage import run_stage
from storage import read_table
from tests import reference

HUB = "https://huggingface.co"
# WikiText's Parquet rows: one line of the .raw release each, ending in "\n"; blank lines are "".
WIKITEXT_ROWS = [
    "",
    " = Alpha = \n",
    "",
    " Alpha opens , with a comma . \n",
    " = = Early life = = \n",
    " Alpha 's second line . \n",
    "",
    " = Beta = \n",
    "",
    " Beta is short . \n",
    " = Gamma = \n",
    " Gamma 's only line . \n",
]
# What those rows are as articles: title, then the body's lines stripped, sub-headings kept as text.
WIKITEXT_ARTICLES = {
    "Alpha": "Alpha opens , with a comma .\n= = Early life = =\nAlpha 's second line .",
    "Beta": "Beta is short .",
    "Gamma": "Gamma 's only line .",
}
PAIRS = [  # (sentence1, sentence2, score): commas, quotes and apostrophes as the public files have them
    ("A man is playing a guitar.", "A man plays the guitar.", 4.8),
    ("A woman, smiling, slices an onion.", "A woman is cutting an onion.", 4.2),
    ('He said "no" twice.', "She agreed at once.", 0.6),
    ("Kids play in the park.", "Children are playing outside.", 3.9),
    ("The stock market fell today.", "A cat sleeps on the sofa.", 0.0),
    ("It's raining in London.", "Rain falls on London's streets.", 3.4),
]


def write_wikitext(path: Path) -> Path:
    # Two rows a row group, so articles run across row groups as they do in the real files.
    pq.write_table(pa.table({"text": WIKITEXT_ROWS}), path, row_group_size=2)
    return path


def write_pairs(path: Path, rows=PAIRS) -> Path:
    frame = pd.DataFrame(rows, columns=["sentence1", "sentence2", "score"])
    name = path.name.removesuffix(".gz")
    if name.endswith(".csv"):
        frame.to_csv(path, index=False)
    elif name.endswith(".tsv"):
        frame.to_csv(path, sep="\t", index=False)
    elif name.endswith(".jsonl"):
        text = "".join(json.dumps(r) + "\n" for r in frame.to_dict("records"))
        path.write_bytes(gzip.compress(text.encode()) if path.suffix == ".gz" else text.encode())
    else:
        frame.to_parquet(path, index=False)
    return path


def letters(sentence: str) -> list[float]:
    """A toy embedding: letter counts, a-z."""
    s = sentence.lower()
    return [float(s.count(c)) for c in "abcdefghijklmnopqrstuvwxyz"]


def encode(sentences: list[str]) -> np.ndarray:
    return np.asarray([letters(s) for s in sentences], dtype=np.float32)


def local_urls(urls: list[str], base: str) -> list[str]:
    return [base + urllib.parse.urlsplit(u).path for u in urls]


def test_the_default_profile_names_public_urls_and_the_options_replace_them(tmp_path):
    cfg = load_config(DEFAULT_PROFILE)
    assert [u.rsplit("/", 1)[-1] for u in cfg.corpus.sources] == [
        "validation-00000-of-00001.parquet",
        "test-00000-of-00001.parquet",
    ]
    assert all(
        u.startswith(f"{HUB}/datasets/Salesforce/wikitext/resolve/") and "/wikitext-103-raw-v1/" in u
        for u in cfg.corpus.sources
    )
    # MTEB's SICK-R (all 9,927 SICK pairs) is named for what it is, not for SentEval's SICK-R test split.
    datasets = {"sickr-mteb": "sickr-sts"}
    assert sorted(cfg.evaluate.data) == sorted(
        [*(f"{t}-sts" for t in ("sts12", "sts13", "sts14", "sts15", "sts16", "stsbenchmark")), "sickr-mteb"]
    )
    for task, url in cfg.evaluate.data.items():
        dataset = datasets.get(task, task)
        assert url.startswith(f"{HUB}/datasets/mteb/{dataset}/resolve/") and url.endswith("/test.jsonl.gz")
    mine = load_config(None, **{"corpus.sources": [str(tmp_path)], "evaluate.data": str(tmp_path)})
    assert mine.corpus.sources == [str(tmp_path)] and mine.evaluate.data == str(tmp_path)


def test_the_default_profile_downloads_its_data_once_and_reads_it(file_server, tmp_path):  # noqa: F811
    from flows.pipeline_flows import resolve

    default = load_config(DEFAULT_PROFILE)
    base = f"http://127.0.0.1:{file_server.server_port}"
    wikitext = write_wikitext(tmp_path / "wikitext.parquet").read_bytes()
    pairs = gzip.compress(write_pairs(tmp_path / "pairs.jsonl").read_bytes())
    file_server.files = {urllib.parse.urlsplit(u).path: wikitext for u in default.corpus.sources}
    file_server.files |= {urllib.parse.urlsplit(u).path: pairs for u in default.evaluate.data.values()}
    sources = local_urls(default.corpus.sources, base)
    eval_data = dict(zip(default.evaluate.data, local_urls(list(default.evaluate.data.values()), base)))
    downloads = tmp_path / "downloads"
    overrides = [
        f"corpus.sources={json.dumps(sources)}",
        f"evaluate.data={json.dumps(eval_data)}",
        f"corpus.download_dir={downloads}",
    ]

    for _ in range(2):
        cfg = resolve(artifacts=str(tmp_path / "artifacts"), overrides=overrides)
    requested = {path for path, _ in file_server.requests}
    assert requested == {urllib.parse.urlsplit(u).path for u in default.evaluate.data.values()}
    # Each file asked for twice (the first answer is cut and resumed), and not again by the second resolve.
    assert len(file_server.requests) == 2 * len(requested)
    subsets, _ = find_sts(cfg.evaluate.data)
    assert sorted(s.task for s in subsets) == sorted(default.evaluate.data)
    assert all(s.sent1 == [p[0] for p in PAIRS] and s.gold.tolist() == [p[2] for p in PAIRS] for s in subsets)

    path = run_stage(corpus.STAGE, corpus.config(cfg), {}, str(tmp_path / "artifacts"))
    table = read_table(path)
    docs = list(zip(table.column("title_or_url").to_pylist(), table.column("text").to_pylist()))
    assert docs == 2 * list(WIKITEXT_ARTICLES.items())  # the validation file, then the test file
    assert len(set(table.column("doc_id").to_pylist())) == len(docs)


@pytest.mark.parametrize("name", ["pairs.csv", "pairs.tsv", "pairs.jsonl", "pairs.jsonl.gz", "pairs.parquet"])
def test_an_sts_pair_file_is_scored_as_its_own_task_by_cosine_spearman(tmp_path, name):
    data = tmp_path / "eval"
    data.mkdir()
    write_pairs(data / name)
    for given in (data, data / name):  # the directory, or the file itself
        subsets, _ = find_sts(given)
        assert [(s.task, s.split) for s in subsets] == [("pairs", "test")]
        rows = score_sts(encode, subsets)
        expected = reference.spearman(
            [reference.cosine(letters(a), letters(b)) for a, b, _ in PAIRS], [g for _, _, g in PAIRS]
        )
        [row] = [r for r in rows if r["metric"] == "spearman"]
        assert (row["task"], row["subset"], row["split"], row["protocol"], row["n"]) == (
            "pairs",
            "all",
            "test",
            "cosine",
            len(PAIRS),
        )
        assert row["value"] == pytest.approx(expected, abs=1e-9)


def test_pair_files_sit_beside_senteval_tasks_and_other_tables_are_left_alone(tmp_path, tiny_sts):
    data = tmp_path / "eval"
    (data / "senteval").mkdir(parents=True)
    for task in ("STS12-en-test", "STSBenchmark"):
        (data / "senteval" / task).symlink_to(Path(tiny_sts) / task)
    write_pairs(data / "mine.csv")
    (data / "msr-para-test.tsv").write_text("Quality\t#1 String\t#2 String\n1\ta\tb\n")  # MRPC's: not STS pairs
    subsets, absent = find_sts(data)
    assert {s.task for s in subsets} == {"STS12", "STSB", "mine"}
    assert "STS12" not in absent


@pytest.mark.parametrize(
    "name, content, where",
    [
        ("bad.csv", "sentence1,sentence2,score\na,b,1\nc,d,high\n", ":3: score 'high' is not a number"),
        ("bad.tsv", "sentence1\tsentence2\tscore\na\tb\t1\nc\n", ":3: 1 field, but the header names 3"),
        (
            "bad.jsonl",
            '{"sentence1": "a", "sentence2": "b", "score": 1}\n{"sentence1": "c", "score": 2}\n',
            ":2: sentence2 is None, not a sentence",
        ),
        ("bad.parquet", None, ": row 2: score None is not a number"),
    ],
)
def test_a_malformed_row_names_the_file_and_row(tmp_path, name, content, where):
    path = tmp_path / name
    if content is None:
        pq.write_table(pa.table({"sentence1": ["a", "c"], "sentence2": ["b", "d"], "score": [1.0, None]}), path)
    else:
        path.write_text(content)
    with pytest.raises(StsDataError, match="^" + str(path).replace(".", r"\.") + where.replace(".", r"\.")):
        find_sts(path)


def test_a_pair_file_may_not_pass_for_a_senteval_task(tmp_path):
    write_pairs(tmp_path / "STSB.csv")
    with pytest.raises(StsDataError, match="STSB.csv: an STS pair file may not be named STSB"):
        find_sts(tmp_path)
    with pytest.raises(ConfigError, match="'STSB': a task name must be a file name, not a SentEval task's name"):
        load_config(None, **{"evaluate.data": {"STSB": "https://example.org/test.jsonl.gz"}})


def test_pair_tasks_are_leaderboard_columns_with_their_average(tmp_path):
    rows = []
    for model, values in (("a", (0.5, 0.7)), ("b", (0.6, 0.8))):
        for task, value in zip(("sts12-sts", "stsbenchmark-sts"), values):
            rows.append(
                {
                    "model": model,
                    "task": task,
                    "subset": "all",
                    "split": "test",
                    "metric": "spearman",
                    "protocol": "cosine",
                    "value": value,
                    "n": 6,
                }
            )
    table = leaderboard(pd.DataFrame(rows))
    assert table["model"].tolist() == ["b", "a"]  # ranked by the pair files' average
    assert table.set_index("model").loc[
        "a", ["sts12-sts cosine", "stsbenchmark-sts cosine", "avg STS pair files"]
    ].tolist() == [50.0, 70.0, 60.0]
    assert "STS pair files (sts12-sts cosine, stsbenchmark-sts cosine)" in to_markdown(table, [], "t")
    assert load_config(None, ["evaluate.rank_by=sts12-sts cosine"]).evaluate.rank_by == "sts12-sts cosine"


@pytest.fixture
def offline(monkeypatch):
    def no_network(*args, **kwargs):
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)


def test_offline_the_run_fails_in_one_line_naming_the_url_and_the_way_out(offline, tmp_path, capsys):
    from flows.cli import main

    default = load_config(DEFAULT_PROFILE)
    code = main(["run", "--artifacts", str(tmp_path / "artifacts"), "--set", f"corpus.download_dir={tmp_path}"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"cpipe: error: {next(iter(default.evaluate.data.values()))}: cannot reach huggingface.co")
    assert "pass local copies: make run CORPUS=PATH EVAL_DATA=DIR" in err

    cfg = default.model_copy(update={"corpus": default.corpus.model_copy(update={"download_dir": str(tmp_path)})})
    with pytest.raises(
        InputError,
        match=rf"^{default.corpus.sources[0]}: cannot reach huggingface\.co .*"
        r"pass local copies: make run CORPUS=PATH EVAL_DATA=DIR",
    ):
        run_stage(corpus.STAGE, corpus.config(cfg), {}, str(tmp_path / "artifacts"))
