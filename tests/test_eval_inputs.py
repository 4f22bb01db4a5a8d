"""Evaluation inputs and model references as a new user gets them wrong (issue 25, items 4, 6, 7 and 12): a bad file
in an evaluation directory, a partial SentEval folder, a test split renamed to pass as the dev set, a `|` in a task's
name, a model directory without weights, a hub name offline. Each stops at once in one line naming the file (or the
model and its URL); the hub is mocked, nothing else."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from huggingface_hub import errors as hub_errors

from pipeline import locate
from pipeline.config import Config, load_config
from pipeline.corpus.sources import LocalSource
from pipeline.corpus.wikipedia import WikipediaParquetSource
from pipeline.corpus.wikitext import WikiTextParquetSource
from pipeline.errors import ConfigError, InputError
from pipeline.evaluate import clustering, pairclass
from pipeline.evaluate import stage as evaluate
from pipeline.evaluate.config import EvaluateConfig
from pipeline.leaderboard.table import leaderboard, to_markdown
from pipeline.model import embed_file
from pipeline.readers.sts import StsDataError, find_sts
from pipeline.readers.transfer import TransferDataError, find_transfer
from pipeline.train import devset
from tests.conftest import SHARED, make_document, write_sts
from tests.helpers import tiny_model
from tests.test_import_graph import graph

GOOD = [
    ("a man is playing a guitar .", "a man plays a guitar .", 4.8),
    ("a dog runs .", "a cat sleeps .", 0.4),
    ("the sky is blue .", "the sky is grey .", 2.5),
]


def write_jsonl(path: Path, pairs=GOOD) -> Path:
    path.write_text("".join(json.dumps({"sentence1": a, "sentence2": b, "score": s}) + "\n" for a, b, s in pairs))
    return path


# --- item 4 and 12: every file that looks like a task parses, or the run stops naming it ---

BAD_FILES = {
    # A malformed first line before 199 good pairs: the file used to drop out whole, unnoticed.
    "broken.jsonl": '{"sentence1": "a", \n'
    + "".join(json.dumps({"sentence1": f"s{i}", "sentence2": f"t{i}", "score": i % 5}) + "\n" for i in range(199)),
    "misspelt.csv": "sentence1,sentence2,scroe\na,b,1\nc,d,2\n",
    "empty.jsonl": "",
    "empty.tsv": "",
}
WHERE = {
    "broken.jsonl": ":1: ",
    "misspelt.csv": ":1: no column(s) score in the header",
    "empty.jsonl": ": 0 pair(s)",
    "empty.tsv": ":1: no column(s) sentence1, sentence2, score",
}


@pytest.mark.parametrize("name", BAD_FILES)
def test_a_bad_pair_file_in_a_directory_stops_the_run_as_it_does_passed_alone(tmp_path, name):
    data = tmp_path / "eval"
    data.mkdir()
    write_jsonl(data / "good.jsonl")
    bad = data / name
    bad.write_text(BAD_FILES[name])
    with pytest.raises(StsDataError) as alone:
        find_sts(bad)
    with pytest.raises(StsDataError) as in_dir:
        find_sts(data)
    assert str(in_dir.value) == str(alone.value)  # one reader, one message
    assert str(in_dir.value).startswith(f"{bad}{WHERE[name]}") and "\n" not in str(in_dir.value)
    # ... and before any work: the evaluate stage's pre-flight check reads the directory so
    with pytest.raises(StsDataError, match=name.replace(".", r"\.")):
        evaluate.check(Config(evaluate=EvaluateConfig(data=str(data), transfer=False)))


# --- issue 47 item 12: a Parquet file pyarrow cannot read is one line naming it, for every reader of users' Parquet ---

SENTENCES = [f"sentence {i} of the pairs" for i in range(6)]
PARQUET_READERS = {
    "sts.parquet": (
        {"sentence1": SENTENCES, "sentence2": SENTENCES[::-1], "score": [0.5, 1.0, 2.0, 3.0, 4.0, 4.5]},
        find_sts,
    ),
    "pairs.pairclass.parquet": (
        {"sentence1": SENTENCES, "sentence2": SENTENCES[::-1], "label": [0, 1] * 3},
        lambda path: pairclass.read("pairs", path),
    ),
    "topics.clustering.parquet": ({"text": SENTENCES, "label": ["a", "b"] * 3}, clustering.read),
    "corpus.parquet": ({"text": SENTENCES}, lambda path: [part.read() for part in LocalSource(str(path)).parts()]),
    "wikitext-103.parquet": ({"text": SENTENCES}, lambda path: list(WikiTextParquetSource(str(path)).parts())),
    "wikipedia.parquet": (
        {"id": ["1"] * 6, "url": ["u"] * 6, "title": ["t"] * 6, "text": SENTENCES},
        lambda path: [part.read() for part in WikipediaParquetSource(str(path)).parts()],
    ),
    "to-embed.parquet": ({"text": SENTENCES}, lambda path: list(embed_file.READERS[".parquet"](str(path), "text"))),
}


def garbage(path: Path) -> None:
    path.write_bytes(b"PAR1 these bytes were never Parquet " * 20)


def cut_short(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


@pytest.mark.parametrize("damage", [garbage, cut_short])
@pytest.mark.parametrize("name", PARQUET_READERS)
def test_a_parquet_file_that_cannot_be_read_is_one_line_naming_it(tmp_path, name, damage):
    columns, read = PARQUET_READERS[name]
    path = tmp_path / name
    pq.write_table(pa.table(columns), path)
    read(path)  # read whole, it is a file of that kind
    damage(path)
    with pytest.raises(InputError) as caught:
        read(path)
    assert str(caught.value).startswith(f"{path}: not a readable Parquet file (") and "\n" not in str(caught.value)


def test_a_file_alone_with_a_missing_column_is_named_not_no_known_task(tmp_path):
    (tmp_path / "mine.csv").write_text("sentence1,sentence2\na,b\n")
    with pytest.raises(StsDataError, match=rf"^{tmp_path}/mine\.csv:1: no column\(s\) score") as err:
        find_sts(tmp_path)
    assert "no known STS task" not in str(err.value)


def test_senteval_tables_beside_pair_files_are_their_tasks_not_pair_files(tmp_path):
    write_jsonl(tmp_path / "mine.jsonl")
    (tmp_path / "msr-para-test.tsv").write_text("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\ta\tb\n")
    subsets, _ = find_sts(tmp_path)
    assert [s.task for s in subsets] == ["mine"]


@pytest.mark.parametrize(
    "present, missing", [("rt-polarity.neg", "rt-polarity.pos"), ("rt-polarity.pos", "rt-polarity.neg")]
)
def test_a_partial_mr_folder_names_the_missing_file(tmp_path, present, missing):
    mr = tmp_path / "MR"
    mr.mkdir()
    (mr / present).write_text("a fine film\nanother one\n", encoding="latin-1")
    with pytest.raises(TransferDataError, match=rf"^MR in {mr}: missing {mr}/{missing}"):
        find_transfer(tmp_path)


def test_a_partial_sick_folder_names_the_missing_test_file(tmp_path):
    sick = tmp_path / "sick2014"
    sick.mkdir()
    (sick / "SICK_train.txt").write_text("pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n")
    with pytest.raises(
        StsDataError,
        match=rf"^{sick}: a partial SICK folder \(SICK_train\.txt\): "
        r"missing SICK_test_annotated\.txt",
    ):
        find_sts(tmp_path)


@pytest.mark.parametrize(
    "emptied",
    [
        "STS12-en-test/STS.input.MSRvid.txt",
        "STS12-en-test/STS.gs.MSRvid.txt",
        "STSBenchmark/sts-dev.csv",
        "MR/rt-polarity.pos",
    ],
)
def test_an_empty_file_of_a_senteval_task_is_named_not_scored_as_no_pairs(tmp_path, emptied):
    write_sts(tmp_path)
    (tmp_path / "MR").mkdir()
    for name in ("rt-polarity.neg", "rt-polarity.pos"):
        (tmp_path / "MR" / name).write_text("a fine film\nanother one\n", encoding="latin-1")
    (tmp_path / emptied).write_text("")
    find = find_transfer if emptied.startswith("MR") else find_sts
    with pytest.raises(InputError, match=rf"^{tmp_path / emptied}: empty file$"):
        find(tmp_path)


def stsb_lines(pairs) -> str:
    return "".join(f"main-captions\tMSRvid\t2012test\t{i:04d}\t{s}\t{a}\t{b}\n" for i, (a, b, s) in enumerate(pairs))


def ten_pairs(seed: int) -> list[tuple[str, str, float]]:
    rng = np.random.default_rng(seed)
    return [(make_document(rng, 6), make_document(rng, 6), float(i % 5)) for i in range(10)]


@pytest.mark.parametrize("shared, refused", [(10, True), (5, True), (4, False), (0, False)])
def test_a_dev_set_sharing_half_its_pairs_with_a_test_file_is_refused(tmp_path, shared, refused):
    test, other = ten_pairs(1), ten_pairs(2)
    eval_data = tmp_path / "eval" / "STSBenchmark"
    eval_data.mkdir(parents=True)
    (eval_data / "sts-test.csv").write_text(stsb_lines(test))
    # Copied pairs may come with their sentences swapped and their spacing changed: still the test's pairs.
    copied = [(b, "  ".join(a.split()), s) for a, b, s in test[:shared]]
    dev = tmp_path / "my-dev.csv"  # a name that says nothing of a test split
    dev.write_text(stsb_lines(copied + other[shared:]))
    if refused:
        with pytest.raises(
            ConfigError,
            match=rf"dev set {dev}: {shared * 10}% of its 10 pairs are in the test "
            r"split STSB sts-test",
        ):
            devset.find_dev(str(dev), str(tmp_path / "eval"))
    else:
        assert devset.find_dev(str(dev), str(tmp_path / "eval")) == dev


@pytest.mark.skipif(not SHARED, reason="CPIPE_SHARED_DATA is not set (path to the team's shared data directory)")
def test_the_real_stsb_dev_is_no_copy_of_a_test_file():
    """STS-B's dev shares pairs with STS12's test files (both from SemEval's data), far below the limit."""
    data = Path(SHARED) / "eval" / "senteval"
    assert devset.find_dev(None, str(data)) == data / "STSBenchmark" / "sts-dev.csv"


def test_a_pipe_in_an_sts_file_name_leaves_the_markdown_columns_whole():
    rows = [
        {
            "model": "m",
            "task": "a|b",
            "subset": "all",
            "split": "test",
            "metric": "spearman",
            "protocol": "cosine",
            "value": 0.5,
            "n": 6,
        }
    ]
    markdown = to_markdown(leaderboard(pd.DataFrame(rows)), [], "t")
    header, rule, row = markdown.splitlines()[2:5]
    assert r"a\|b cosine" in header
    cells = [line.replace(r"\|", "").count("|") for line in (header, rule, row)]
    assert cells[0] == cells[1] == cells[2]


# --- items 6 and 7: model references ---


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return tiny_model(tmp_path_factory.mktemp("model"))


def test_a_directory_that_is_not_a_model_says_why_in_one_line(tmp_path, model_dir):
    assert locate.why_not_a_model(str(model_dir)) is None
    assert locate.why_not_a_model(str(model_dir / "hf")) is None
    assert locate.why_not_a_model(str(tmp_path / "nothing")) == f"{tmp_path}/nothing: no such directory"
    (tmp_path / "file").write_text("x")
    assert locate.why_not_a_model(str(tmp_path / "file")).startswith(f"{tmp_path}/file: not a directory")
    bare = tmp_path / "bare"
    bare.mkdir()
    assert locate.why_not_a_model(str(bare)) == f"{bare}: not a model directory (no config.json in {bare})"
    (bare / "config.json").write_text("{")
    assert locate.why_not_a_model(str(bare)).startswith(f"{bare}/config.json: not readable JSON")
    shutil.copy(model_dir / "hf" / "config.json", bare / "config.json")
    assert locate.why_not_a_model(str(bare)).startswith(f"{bare}: no weights file in {bare} (one of model.safetensors")


def test_the_light_check_imports_no_torch_transformers_prefect_or_ray():
    """Importable by a pre-flight that runs before the heavy libraries load (imports at any depth, ours followed)."""
    edges, imports = graph()
    seen, todo = set(), ["pipeline.locate"]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(edges[name])
    heavy = {i.split(".")[0] for name in seen for i in imports[name]} & {"torch", "transformers", "prefect", "ray"}
    assert not heavy, heavy


@pytest.fixture
def hub(monkeypatch, tmp_path, model_dir):
    """The hub, mocked: snapshot_download copies the tiny model into HF_HOME's cache, as the hub would, or raises
    what the hub raises offline. Records the calls."""
    import huggingface_hub

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    state = {"calls": [], "offline": False, "source": model_dir}

    def snapshot_download(repo_id, **kwargs):
        state["calls"].append((repo_id, kwargs))
        if state["offline"]:
            raise hub_errors.LocalEntryNotFoundError("Got: ConnectError: [Errno -2] Name or service not known\n...")
        snapshot = Path(os.environ["HF_HOME"]) / "hub" / f"models--{repo_id.replace('/', '--')}" / "snapshots" / "0"
        if not snapshot.exists():
            shutil.copytree(state["source"], snapshot)
        return str(snapshot)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    return state


def test_a_hub_model_embeds_as_its_directory_does(hub, model_dir, tmp_path):
    from pipeline.model.exported import Encoder

    sentences = [make_document(np.random.default_rng(i), 3 + 4 * i) for i in range(6)]
    from_hub = Encoder("org/tiny", max_length=32, device="cpu").encode(sentences, batch_size=4)
    direct = Encoder(str(model_dir), max_length=32, device="cpu").encode(sentences, batch_size=4)
    np.testing.assert_array_equal(from_hub, direct)
    [(repo, kwargs)] = hub["calls"]
    assert repo == "org/tiny" and "cache_dir" not in kwargs  # the hub's own cache: HF_HOME's
    assert str(tmp_path / "hf-home") in locate.resolve("org/tiny")


def test_a_hub_name_offline_is_one_line_naming_the_model_and_its_url(hub):
    from pipeline.model.exported import Encoder

    hub["offline"] = True
    with pytest.raises(InputError) as err:
        Encoder("org/tiny")
    message = str(err.value)
    assert message.startswith("org/tiny: ") and "https://huggingface.co/org/tiny" in message and "\n" not in message
    assert "cannot be reached" in message


def test_a_hub_model_without_weights_is_one_line(hub, tmp_path, model_dir):
    hub["source"] = tmp_path / "no-weights"
    hub["source"].mkdir()
    shutil.copy(model_dir / "hf" / "config.json", hub["source"] / "config.json")
    with pytest.raises(InputError, match=r"^org/weightless \(https://huggingface\.co/org/weightless\): .*no weights"):
        locate.resolve("org/weightless")


def test_cpipe_evaluate_refuses_a_bad_model_before_any_work(hub, tmp_path, tiny_sts, capsys):
    from flows.cli import main

    hub["offline"] = True
    args = ["--eval-data", str(tiny_sts), "--artifacts", str(tmp_path / "art")]
    assert main(["evaluate", "--model", "org/tiny", *args]) == 2
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1
        and err.startswith("cpipe: error: --model org/tiny: ")
        and "https://huggingface.co/org/tiny" in err
    )
    (tmp_path / "empty").mkdir()
    assert main(["evaluate", "--model", str(tmp_path / "empty"), *args]) == 2
    err = capsys.readouterr().err
    assert (
        err == f"cpipe: error: --model {tmp_path}/empty: not a model directory (no config.json in {tmp_path}/empty)\n"
    )
    assert not (tmp_path / "art").exists()


@pytest.mark.parametrize(
    "base, says",
    [
        ("/no/such/dir", "model.base: /no/such/dir: no such directory"),
        ("{weightless}", "model.base: {weightless}: no weights file in {weightless}"),
        (
            "org/tiny",
            "model.base: org/tiny: no such local directory, and it cannot be downloaded from "
            "https://huggingface.co/org/tiny: the hub cannot be reached",
        ),
    ],
)
def test_model_base_is_checked_before_any_work(hub, tmp_path, tiny_config, tiny_corpus, model_dir, capsys, base, says):
    from flows.cli import main

    hub["offline"] = True
    weightless = tmp_path / "weightless"
    weightless.mkdir()
    shutil.copy(model_dir / "hf" / "config.json", weightless / "config.json")
    base, says = base.format(weightless=weightless), says.format(weightless=weightless)
    assert (
        main(
            [
                "run",
                "--config",
                str(tiny_config),
                "--corpus",
                str(tiny_corpus),
                "--artifacts",
                str(tmp_path / "art"),
                "--until",
                "tokenizer",
                "--set",
                f"model.base={base}",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith(f"cpipe: error: {says}") and err.count("\n") == 1
    assert not list((tmp_path / "art").glob("*/*"))  # no stage started


def test_model_base_check_is_the_tokenizer_and_init_stages_pre_flight(model_dir):
    from pipeline.init import stage as init
    from pipeline.tokenizer import stage as tokenizer

    for stage in (tokenizer.STAGE, init.STAGE):
        stage.check(load_config(None, [f"model.base={model_dir}"]))
        with pytest.raises(ConfigError, match="^model.base: /no/such: no such directory$"):
            stage.check(load_config(None, ["model.base=/no/such"]))
