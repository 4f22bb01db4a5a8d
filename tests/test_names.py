"""Names and settings that went wrong only late, or silently (issue 41): run, task and model names are path components
(MTEB's result files are <results_dir>/<model>/...), those a file gives too (issue 47); no run is named as another's
repeat; seeds are integers, not booleans; decontaminate.n has no upper bound; evaluate.compare_to and train.select_by
name a row and a task before any model is scored or trained. Each error is one line naming the key."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys

import numpy as np
import pytest

from pipeline.config import load_config
from pipeline.config_base import unusable_name
from pipeline.decontaminate import stage as decontaminate
from pipeline.decontaminate.ngrams import P, window_hashes
from pipeline.errors import ConfigError, InputError
from pipeline.evaluate import given, kinds
from pipeline.evaluate import stage as evaluate
from pipeline.evaluate.mteb_results import model_dir
from pipeline.filter.stage import SCHEMA
from pipeline.preflight import configured
from pipeline.repeats import split_seeded
from pipeline.stage import run_stage
from pipeline.train import selection
from pipeline.train.config import TrainConfig
from storage import DatasetWriter, dataset_parts, dataset_path, read_manifest, read_table
from tests.conftest import ROOT
from tests.test_cli_errors import PROBE
from tests.test_decontaminate import write_stsb
from tests.test_repeats import config as repeats_config
from tests.test_repeats import plan
from tests.test_task_kinds import write_beir


def one_line(match: str, call, *args, error=ConfigError, **kwargs) -> str:
    with pytest.raises(error, match=match) as e:
        call(*args, **kwargs)
    assert "\n" not in str(e.value), str(e.value)
    return str(e.value)


# --- names as path components -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["..", ".", "a/b", "a\\b", "a\nb", "a\x00b", "a\x7fb", ""])
def test_a_run_name_that_is_no_path_component_is_refused_at_load(name):
    message = one_line(r"runs: .* is no usable name: ", load_config, None, [f"runs={json.dumps({name: {}})}"])
    assert repr(name) in message


def test_baseline_model_and_task_names_are_path_components_too(tmp_path):
    one_line(
        r"evaluate\.baselines\.models\[0\]\.name: '\.\.' is no usable name",
        load_config,
        None,
        [f"evaluate.baselines.models=[{{name: '..', path: {tmp_path}}}]"],
    )
    one_line(
        r"evaluate\.data: 'a\\\\b' is no usable task name",
        load_config,
        None,
        [f'evaluate.data={{"a\\\\b": {tmp_path}/x.csv}}'],
    )
    assert unusable_name("STS12") is None and unusable_name("a (seed 1)") is None


PAIRS = "sentence1,sentence2,score\na,b,1\nc,d,2\n"
PAIRCLASS = "sentence1,sentence2,label\na,b,1\nc,d,0\n"


@pytest.mark.parametrize(
    "entry, content, name",
    [
        ("a\nb.csv", PAIRS, "a\nb"),
        ("a\nb.pairclass.csv", PAIRCLASS, "a\nb"),
        ("x\ty.clustering.csv", "text,label\na,1\nb,1\nc,2\n", "x\ty"),
        ("x\\y.reranking.jsonl", '{"query": "q", "positive": ["a"], "negative": ["b"]}\n', "x\\y"),
        ("bei\x7fr", None, "bei\x7fr"),
    ],
)
def test_a_task_named_by_its_file_is_checked_as_a_task_named_in_the_config(tmp_path, entry, content, name):
    """`a<newline>b.pairclass.jsonl` was read as the task 'a\\nb', which split the Markdown leaderboard's header in two
    and named an MTEB file `a<newline>b.json`: a name that a file gives is checked by the config's own check."""
    if content is None:  # a BEIR folder
        write_beir(tmp_path / entry, [("d0", "", "kabar"), ("d1", "", "lodos")], [("q0", "kabar")], [("q0", "d0", 1)])
    else:
        (tmp_path / entry).write_text(content)
    one_line(
        rf"^{re.escape(str(tmp_path))}: {re.escape(repr(entry))} names the task {re.escape(repr(name))}, which is no "
        rf"usable name: {re.escape(unusable_name(name))}$",
        kinds.search,
        tmp_path,
        {},
        error=InputError,
    )
    (tmp_path / entry).rename(tmp_path / entry.replace(name, "fine"))  # the same file, named otherwise, is read
    assert [t.name for found in kinds.search(tmp_path, {}) for t in found.tasks] == ["fine"]


def test_model_dir_never_leaves_the_results_dir():
    assert model_dir("org/name") == "org__name" and model_dir("my run (seed 1)") == "my_run_(seed_1)"
    for name in ("..", ".", "a\\b", "x\ny"):
        one_line(r"MTEB results of model .*: ", model_dir, name, error=InputError)


def test_a_model_directory_whose_name_is_no_path_component_is_refused_before_any_work(tmp_path):
    odd = tmp_path / "bad\tname"
    odd.mkdir()
    one_line(
        r"--model: the directory name 'bad\\tname' names its row, and is no usable name",
        configured,
        first="evaluate",
        models=[str(odd)],
        error=InputError,
    )


def test_two_directories_of_one_name_are_two_rows_named_by_their_parents(tmp_path, caplog):
    for parent in ("a", "b"):
        (tmp_path / parent / "encoder").mkdir(parents=True)
    models = [str(tmp_path / "a" / "encoder"), str(tmp_path / "b" / "encoder")]
    with caplog.at_level(logging.WARNING, logger="cpipe"):
        rows = given.rows(models)
    assert rows == {"a-encoder": models[0], "b-encoder": models[1]}
    assert "2 models are named 'encoder'; their rows are 'a-encoder' (" in caplog.text
    one_line(
        r"--model: 'encoder' is given twice", configured, first="evaluate", models=models[:1] * 2, error=InputError
    )


def test_a_runs_exported_folder_is_the_run(tmp_path):
    """`cpipe evaluate --model <train dataset>/sentence-transformers` (the path the docs give) or its hf/ is the run's
    row, not a row named 'sentence-transformers' beside it."""
    with DatasetWriter(str(tmp_path), "train", "f" * 16, config={"train": {"objective": "declutr"}}, inputs={}) as out:
        out.write([{"step": 1}])
    run = out.path
    for folder in ("sentence-transformers", "hf"):
        (tmp_path / "train" / ("f" * 16) / folder).mkdir(exist_ok=True)
        assert given.rows([f"{run}/{folder}"]) == {"f" * 16: run}  # never scored: named by its dataset, as before
    elsewhere = tmp_path / "mine" / "sentence-transformers"  # no train dataset around it: a directory like any
    elsewhere.mkdir(parents=True)
    assert given.rows([str(elsewhere)]) == {"sentence-transformers": str(elsewhere)}


# --- a run named as another's repeat, two rows of one name -----------------------------------------------------


def test_a_run_named_as_a_repeat_is_refused():
    message = one_line(
        r"runs: 'a \(seed 1\)' is named as a repeat is .* seed 1 of 'a'",
        load_config,
        None,
        ['runs={a: {}, "a (seed 1)": {seed: 3}}', "seeds=[0, 1]"],
    )
    assert message.startswith("config error: ")
    one_line(r"'lonely \(seed 2\)' is named as a repeat", load_config, None, ['runs={"lonely (seed 2)": {}}'])
    one_line(
        r"evaluate\.baselines\.models\[0\]\.name: 'b \(seed 0\)' is named as a repeat",
        load_config,
        None,
        ["evaluate.baselines.models=[{name: 'b (seed 0)', path: /tmp}]"],
    )


def test_a_run_named_as_another_rows_readout_is_refused():
    """ "<row> [cls]" is the leaderboard's own row: the reference read by [CLS] (pipeline.evaluate.readouts)."""
    one_line(
        r"runs: 'untrained \[cls\]' is named as the leaderboard names a row read another way",
        load_config,
        None,
        ['runs={"untrained [cls]": {}}'],
    )
    one_line(r"'b \[mean\] \(seed 0\)' is named as a repeat", load_config, None, ['runs={"b [mean] (seed 0)": {}}'])
    assert list(load_config(None, ['runs={"run [v2] again": {}}']).runs) == ["run [v2] again"]


@pytest.mark.parametrize(
    "overrides, match",
    [
        (["runs={random: {}}"], r"evaluate\.baselines\.random: the row 'random' is also runs\.random's"),
        (["runs={untrained: {}}"], r"evaluate\.untrained: the row 'untrained' is also runs\.untrained's"),
        (
            ["evaluate.baselines.models=[{name: a, path: /tmp}, {name: a, path: /usr}]"],
            r"evaluate\.baselines\.models\[1\]\.name: the row 'a' is also evaluate\.baselines\.models\[0\]\.name's",
        ),
        (
            [
                "runs={a: {}, untrained+whitening: {}}",
                "evaluate.baselines.postprocess=[{model: untrained, kind: whitening}]",
            ],
            r"evaluate\.baselines\.postprocess\[0\]: the row 'untrained\+whitening' is also runs\.untrained\+whitening's",
        ),
    ],
)
def test_two_rows_of_one_name_are_refused(overrides, match):
    one_line(match, load_config, None, overrides)


def test_a_run_may_share_a_disabled_baselines_name():
    assert "random" in load_config(None, ["runs={random: {}}", "evaluate.baselines.random=false"]).rows()


def test_the_configs_rows_are_the_evaluate_stages(tmp_path):
    """Config.rows, which the checks before any work read, names the rows pipeline_rows builds."""
    cfg = repeats_config(
        tmp_path,
        "runs: {a: {}, b: {seed: 3}}\nevaluate:\n  baselines: {postprocess: [{model: "
        "untrained, kind: whitening}, {model: b, kind: flow}]}\n",
        "repeats=2",
        f"artifacts={tmp_path / 'art'}",
    )
    done = plan(cfg, cfg.artifacts)
    for key in [k for k in done if k.startswith("train/")]:
        _, name, fp = dataset_parts(done[key])
        with DatasetWriter(cfg.artifacts, name, fp, config={}, inputs={}, schema=None):
            pass
    built = {split_seeded(k.split("/", 1)[1])[0] for k in evaluate.instances(cfg, done)}
    assert (
        built == set(cfg.rows()) == {"a", "b", "untrained", "fasttext-bow", "random", "untrained+whitening", "b+flow"}
    )
    based = load_config(None, ["model.base=sentence-transformers/all-MiniLM-L6-v2"])
    assert based.initial_name() == evaluate.initial_row(based)[0] == "all-MiniLM-L6-v2"


def test_the_baselines_made_of_files_are_rows_of_both_too(tmp_path):
    """The word vectors', a model directory's and USE's rows, and a post-processed one: Config.rows names them, the
    evaluate stage builds them (each kind of EvaluateConfig.baseline_rows has its builder), under the same names."""
    vectors, model, use_dir = tmp_path / "glove.6B.vec", tmp_path / "mini", tmp_path / "use4"
    vectors.write_text("river 0.1 0.2\n")
    model.mkdir()
    use_dir.mkdir()
    cfg = load_config(
        None,
        [
            "evaluate.untrained=false",
            "evaluate.fasttext.enabled=false",
            f"evaluate.baselines.vectors=[{vectors}]",
            f"evaluate.baselines.models=[{{name: mini, path: {model}}}]",
            f"evaluate.baselines.use.path={use_dir}",
            "evaluate.baselines.postprocess=[{model: mini, kind: whitening}]",
        ],
    )
    done = {"decontaminate": dataset_path(str(tmp_path), "decontaminate", "d" * 16)}
    built = {k.split("/", 1)[1] for k in evaluate.instances(cfg, done)}
    assert built == {"random", "vectors-glove.6B", "mini", "use", "mini+whitening"}
    assert set(cfg.rows()) == {"declutr", *built}  # the run's row, which no train dataset built here


# --- seeds are integers ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, match",
    [
        (["seeds=[true]"], r"seeds\.0: Input should be a valid integer \(got True\)"),
        (["seeds=null", "repeats=true"], r"repeats: Input should be a valid integer \(got True\)"),
        (["runs={a: {seed: true}}"], r"runs\.a\.seed: Input should be a valid integer \(got True\)"),
    ],
)
def test_a_boolean_is_no_seed(overrides, match):
    one_line(match, load_config, None, overrides)


# --- decontaminate.n ------------------------------------------------------------------------------------------------


def test_window_hashes_of_any_length_are_the_polynomial():
    ids = np.arange(1, 300, dtype=np.uint64)
    windows = window_hashes(ids, [64, 65, 100, 129])
    for length in (64, 65, 100, 129):
        for i in (0, 7, len(ids) - length):
            assert int(windows[length][i]) == sum(int(ids[i + j]) * pow(P, j, 2**64) for j in range(length)) % 2**64


def test_decontaminate_n_100_drops_the_document_holding_a_100_word_sentence(tmp_path):
    words = [f"w{i}" for i in range(120)]
    long = " ".join(words)
    docs = {
        "clean": "nothing from the evaluation here " * 30,
        "pasted": "before " + long.upper() + " after",
        "partial": " ".join(words[:99]),
    }  # 99 of its words: no 100-gram
    art = tmp_path / "art"
    with DatasetWriter(str(art), "filter", "f" * 16, config={}, inputs={}, schema=SCHEMA) as out:
        out.write(
            [
                {
                    "doc_id": k,
                    "source": "hand",
                    "title_or_url": k,
                    "text": v,
                    "n_tokens": 0,
                    "lang": None,
                    "lang_score": None,
                }
                for k, v in docs.items()
            ]
        )
    eval_data = write_stsb(tmp_path / "eval", [(long, "short", 1.0), ("a b c", "d e f", 2.0)])
    cfg = load_config(None, ["decontaminate.n=100", f"evaluate.data={eval_data}"])
    built = run_stage(
        decontaminate.STAGE,
        decontaminate.config(cfg),
        {"documents": dataset_path(str(art), "filter", "f" * 16)},
        str(art),
    )
    assert sorted(read_table(built).column("doc_id").to_pylist()) == ["clean", "partial"]
    assert read_manifest(built)["contaminated_by_task"] == {"STSB": 1}


# --- evaluate.compare_to and train.select_by before any work ---------------------------------------------------


def test_compare_to_names_a_row_of_a_whole_run_before_any_work(tmp_path, tiny_corpus):
    options = dict(corpus=str(tiny_corpus), artifacts=str(tmp_path / "a"))
    message = one_line(
        r"^evaluate\.compare_to: no row named 'nosuchrow' on this run's leaderboard \(rows: ",
        configured,
        **options,
        overrides=["evaluate.compare_to=nosuchrow", "runs={mine: {}}"],
    )
    assert "mine, untrained, fasttext-bow, random" in message
    assert configured(**options, overrides=["evaluate.compare_to=mine", "runs={mine: {}}"])
    assert configured(**options, overrides=["evaluate.compare_to=nosuchrow"], until="evaluate")  # no leaderboard


def test_compare_to_names_one_of_cpipe_evaluates_models(tmp_path):
    models = [str(tmp_path / "mine"), "org/theirs"]
    one_line(
        r"no row named 'untrained' .*\(rows: mine, org/theirs\)",
        configured,
        first="evaluate",
        models=models,
        overrides=["evaluate.compare_to=untrained"],
    )
    assert configured(first="evaluate", models=models, overrides=["evaluate.compare_to=org/theirs"])
    # The evaluate flow alone may be given models or not: its rows are known only when it starts.
    assert configured(first="evaluate", overrides=["evaluate.compare_to=anything"])


def _dev_dir(root):
    """A pairclass task p1 and a retrieval task r1 with test qrels only."""
    (root / "r1" / "qrels").mkdir(parents=True)
    (root / "r1" / "corpus.jsonl").write_text('{"_id": "p0", "text": "a passage"}\n')
    (root / "r1" / "queries.jsonl").write_text('{"_id": "q0", "text": "a query"}\n')
    (root / "r1" / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\tp0\t1\n")
    (root / "p1.pairclass.jsonl").write_text(
        '{"sentence1": "a", "sentence2": "b", "label": 1}\n{"sentence1": "c", "sentence2": "d", "label": 0}\n'
    )
    return str(root)


def test_select_by_names_the_missing_task_not_another_tasks_missing_dev_split(tmp_path):
    dev = _dev_dir(tmp_path / "dev")
    train = TrainConfig(eval_every=5, select_by="p9", dev_set=dev)
    one_line(
        r"^train\.select_by 'p9': no task of that name in .*dev \(tasks there: r1, p1\)",
        selection.stage_config,
        train,
        None,
        64,
    )
    found = selection.stage_config(
        train.model_copy(update={"select_by": "p1"}), None, 64
    )  # r1's dev split is not p1's business
    assert (found["task"], found["kind"]) == ("p1", "pairclass")
    one_line(
        r"r1: a retrieval task \(BEIR's layout\) without qrels/dev\.tsv",
        selection.stage_config,
        train.model_copy(update={"select_by": "r1"}),
        None,
        64,
        error=InputError,
    )


# --- the command line: one line, exit 2, before torch, Prefect or Ray -----------------------------------------


@pytest.mark.parametrize(
    "override, message",
    [
        ("seeds=[true]", r"cpipe: error: config error: .*: seeds\.0: Input should be a valid integer \(got True\)"),
        ('runs={"..": {}}', r"cpipe: error: config error: .*: runs: '\.\.' is no usable name"),
        ('runs={a: {}, "a (seed 1)": {seed: 3}}', r"cpipe: error: config error: .*'a \(seed 1\)' is named as a repeat"),
        ("evaluate.compare_to=nosuchrow", r"cpipe: error: evaluate\.compare_to: no row named 'nosuchrow'"),
    ],
)
@pytest.mark.slow
def test_the_cli_answers_in_one_line_before_any_heavy_import(tmp_path, tiny_corpus, override, message):
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            PROBE,
            "run",
            "--corpus",
            str(tiny_corpus),
            "--artifacts",
            str(tmp_path / "a"),
            "--set",
            override,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert re.match(message, proc.stderr), proc.stderr
    assert proc.stdout.strip() == "[]", f"imported before the error: {proc.stdout}"


@pytest.mark.slow
def test_cpipe_evaluate_checks_compare_to_against_its_models_before_any_heavy_import(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            PROBE,
            "evaluate",
            "--model",
            str(tmp_path / "mine"),
            "--artifacts",
            str(tmp_path / "a"),
            "--set",
            "evaluate.compare_to=untrained",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (
        "cpipe: error: evaluate.compare_to: no row named 'untrained' on this run's leaderboard (rows: mine)\n"
    ), proc.stderr
    assert proc.stdout.strip() == "[]", f"imported before the error: {proc.stdout}"
