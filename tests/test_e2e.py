"""The whole pipeline through the real CLI: Prefect's embedded server, a local Ray instance, real files."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pandas as pd
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from pipeline import registry
from pipeline.augment.heldout import read_heldout
from pipeline.model.transformer import SpanEncoder, load_mlm
from pipeline.tokenizer.loading import load_tokenizer
from pipeline.train.batching import collate, special_ids
from storage import dataset_path, list_datasets, read_manifest, read_table
from tests.conftest import CPIPE, cpipe, flow_env, http_server, signal_every_process
from tests.test_select_by import nt_xent_loop

pytestmark = pytest.mark.e2e


def stage_log(output: str) -> dict[str, str]:
    """{'filter': 'built', 'train-declutr': 'reused', ...} from the flow's log."""
    return dict((m.group(1), m.group(2)) for m in re.finditer(r" - ([\w-]+): (built|reused) ", output))


FULL_RUNS = (  # The declutr run selected by its loss on documents held out of training, scored every 2 steps.
    "{declutr: {eval_every: 2, select_by: heldout-loss}, mlm-only: {contrastive: false}, "
    # A run continuing the MLM-only one; a learning rate this small leaves it its parent's weights.
    "continued: {init_from: mlm-only, lr: 1.0e-9}, "
    "cert: {objective: cert}, simcse: {objective: simcse, pooling: cls, projection: mlp}, "
    "clear: {objective: clear, augmentation: del-word+reorder, projection: linear, memory_bank: 8}}"
)


@pytest.fixture(scope="module")
def full_run(tmp_path_factory, tiny_config, tiny_corpus, tiny_sts):
    """`cpipe run` of the whole pipeline on the tiny corpus: a run of each objective (CERT's back-translations
    through two tiny translation models, German and Chinese pivots), an MLM-only run and one continuing it.
    Returns its arguments, its artifacts directory and its output. Every check of it is in this module, so that
    it runs once however the suite is spread over pytest-xdist's workers (`--dist loadfile`)."""
    from tests.translation_models import build_fsmt, build_marian, parallel_sentences

    root = tmp_path_factory.mktemp("full-run")
    en, de = parallel_sentences(200)
    for pivot, build in (("de", build_fsmt), ("zh", build_marian)):
        build(root / "mt" / pivot / "forward", en, de, langs=("en", pivot))
        build(root / "mt" / pivot / "backward", de, en, langs=(pivot, "en"), seed=1)
    artifacts = root / "artifacts"
    args = [
        "run",
        "--config",
        str(tiny_config),
        "--corpus",
        str(tiny_corpus),
        "--eval-data",
        str(tiny_sts),
        "--artifacts",
        str(artifacts),
        "--set",
        f"runs={FULL_RUNS}",
        "--set",
        f"backtranslate.forward_model={root}/mt/{{pivot}}/forward",
        "--set",
        f"backtranslate.backward_model={root}/mt/{{pivot}}/backward",
        "--set",
        "backtranslate.num_beams=1",
        "--set",
        "backtranslate.max_new_tokens=8",
        "--set",
        "backtranslate.max_sentences=40",
        "--set",
        "augment.max_sentences=40",
        "--set",
        "augment.min_chars=10",
        "--set",
        "augment.heldout_fraction=0.25",
    ]
    result = cpipe(*args, timeout=900)  # pytest's own limit: six training runs, on a loaded machine
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return args, artifacts, result.stdout + result.stderr


def test_full_pipeline_writes_a_leaderboard_with_every_row(full_run):
    _, artifacts, output = full_run
    table = pd.read_csv(artifacts / "leaderboard.csv")
    # "untrained [cls]": the reference read as simcse, cert and clear read their encoders, for their differences.
    assert set(table["model"]) == {
        "declutr",
        "mlm-only",
        "continued",
        "cert",
        "simcse",
        "clear",
        "untrained",
        "untrained [cls]",
        "fasttext-bow",
        "random",
    }
    for column in ("STS12 senteval", "STS12 simcse", "STSB cosine"):
        assert table[column].between(-100, 100).all(), column
    rows = table.set_index("model")
    assert rows.loc["declutr", "objective"] == "declutr" and rows.loc["declutr", "dimension"] == 32
    assert rows.loc["declutr", "parameters"] > 0 and rows.loc["random", "parameters"] == 0
    assert "batch 4" in rows.loc["declutr", "recipe"] and rows["corpus"].notna().sum() == 7  # runs + fastText
    assert rows["uniformity"].notna().all()  # the STS-B analysis, for every row
    assert (artifacts / "leaderboard.png").read_bytes()[:4] == b"\x89PNG"
    assert set(pd.read_csv(artifacts / "leaderboard-all.csv")["model"]) == set(table["model"])
    markdown = (artifacts / "leaderboard.md").read_text()
    assert "| declutr |" in markdown and "Absent from the evaluation data: STS13" in markdown
    assert set(stage_log(output).values()) == {"built"}
    # Its output as a log file keeps it (issue 48 item 6): no tqdm bar redrawn with carriage returns, no line of the
    # whole leaderboard's width (a line a row, ranked, instead), no blank line, no complaint from Prefect's log
    # shipping after the run's temporary server stopped.
    lines = output.replace(str(artifacts.parent), "<run>").splitlines()  # the length of the log's own words
    assert "\r" not in output and "Error logging to API" not in output
    assert max(map(len, lines)) <= 300, max(lines, key=len)
    assert all(line.strip() for line in lines), [i for i, line in enumerate(lines) if not line.strip()]
    assert "leaderboard, by " in output


def test_stage_datasets_follow_the_contract(full_run):
    _, artifacts, _ = full_run
    stages = {d["stage"] for d in list_datasets(str(artifacts))}
    # Every stage but InferSent (off by default).
    assert stages == set(registry.NAMES) - {"infersent"}
    train = [d for d in list_datasets(str(artifacts)) if d["stage"] == "train"]
    for d in train:
        manifest = read_manifest(d["path"])
        assert manifest["steps"] == 6
        metrics = pd.read_parquet(Path(d["path"]) / "metrics.parquet")
        assert list(metrics["step"]) == list(range(1, 7)) and metrics["loss"].notna().all()
        assert (Path(d["path"]) / "hf" / "config.json").exists()
        assert (Path(d["path"]) / "sentence-transformers" / "modules.json").exists()
        curves = EventAccumulator(str(Path(d["path"]) / "tensorboard"))
        curves.Reload()
        assert [e.step for e in curves.Scalars("loss/total")] == list(range(1, 7))
        assert {"optim/lr", "optim/grad_norm", "data/wait_seconds"} <= set(curves.Tags()["scalars"])
        card = (Path(d["path"]) / "sentence-transformers" / "README.md").read_text()
        assert "| steps | 6 " in card and "| STSB cosine |" in card, "no model card, or no leaderboard scores in it"
    assert not list(artifacts.glob("*/.tmp-*")), "temporary directories left behind"


def test_a_continuing_run_starts_from_its_parents_exported_weights(full_run):
    from safetensors.torch import load_file

    _, artifacts, output = full_run
    path = {
        label: re.search(rf" - {label}: built (\S+)", output).group(1)
        for label in ("init", "train-mlm-only", "train-continued")
    }
    assert read_manifest(path["train-continued"])["inputs"]["init"] == Path(path["train-mlm-only"]).name
    assert output.index("train-mlm-only: built") < output.index("train-continued: built")
    weights = {label: load_file(f"{p}/hf/model.safetensors") for label, p in path.items()}
    names = sorted(weights["init"])
    moved = max((weights["train-mlm-only"][n] - weights["init"][n]).abs().max().item() for n in names)
    kept = max((weights["train-continued"][n] - weights["train-mlm-only"][n]).abs().max().item() for n in names)
    assert moved > 1e-4 and kept < 1e-6, (moved, kept)  # the parent's weights, not the init stage's
    recipe = pd.read_csv(artifacts / "leaderboard.csv").set_index("model").loc["continued", "recipe"]
    assert recipe.endswith(", from mlm-only")


def test_exported_model_loads_in_sentence_transformers_without_our_code(full_run):
    _, artifacts, _ = full_run
    path = next(d["path"] for d in list_datasets(str(artifacts)) if d["stage"] == "train")
    script = (
        "import sys; from sentence_transformers import SentenceTransformer; "
        "m = SentenceTransformer(sys.argv[1], device='cpu'); print(m.encode(['a b', 'c']).shape)"
    )
    out = subprocess.run(
        [os.sys.executable, "-c", script, f"{path}/sentence-transformers"],
        capture_output=True,
        text=True,
        cwd="/",
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("(2, 32)")


def test_a_run_selected_by_heldout_loss_exports_its_lowest_scoring_step(full_run):
    """The exported weights' held-out loss, by a loop over NT-Xent on the held-out pairs, is the manifest's best
    score, the lowest of the steps scored; the leaderboard row says which step and by what."""
    _, artifacts, output = full_run
    path = re.search(r" - train-declutr: built (\S+)", output).group(1)
    manifest = read_manifest(path)
    scored = pd.read_parquet(f"{path}/metrics.parquet").dropna(subset=["heldout_loss"])
    assert list(scored["step"]) == [2, 4, 6] and scored["heldout_uniformity"].notna().all()
    assert scored["heldout_loss"].nunique() == 3, "the scores should differ for the test to mean much"
    best = scored.loc[scored["heldout_loss"].idxmin()]
    assert manifest["best_step"] == best["step"] and manifest["best_score"] == pytest.approx(best["heldout_loss"])

    heldout = read_heldout(dataset_path(str(artifacts), "augment", manifest["inputs"]["pairs"]))
    encoder = SpanEncoder(load_mlm(f"{path}/hf"), "mean", None).eval()
    special = special_ids(load_tokenizer(f"{path}/hf"))
    losses = []
    for start in range(0, heldout.num_rows - 3, 4):  # batch_size 4, a short last batch dropped
        batch = collate(heldout.slice(start, 4), special, 34, True)
        with torch.no_grad():
            anchors = encoder(*batch["anchors"])[0].double().tolist()
            positives = encoder(*batch["positives"])[0].double().view(4, 2, -1).mean(1).tolist()
        losses.append(nt_xent_loop(anchors, positives, 0.05))
    assert sum(losses) / len(losses) == pytest.approx(manifest["best_score"], rel=1e-4)
    recipe = pd.read_csv(artifacts / "leaderboard.csv").set_index("model").loc["declutr", "recipe"]
    assert recipe.endswith(f"selected at step {manifest['best_step']} of 6 by heldout-loss {best['heldout_loss']:.3f}")


def test_a_cert_run_builds_back_translations_and_pairs_through_the_cli(full_run):
    """A CERT run beside a DeCLUTR one."""
    _, artifacts, _ = full_run
    built = {d["stage"]: d["path"] for d in list_datasets(str(artifacts))}
    assert read_manifest(built["backtranslate"])["rows"] == 40 * 2  # every sentence through both default pivots
    pairs = {
        read_table(d["path"]).column("objective")[0].as_py(): d["path"]
        for d in list_datasets(str(artifacts))
        if d["stage"] == "augment"
    }
    assert {"cert", "declutr"} <= set(pairs)
    assert all(a != b for a, b in read_table(pairs["cert"]).column("sources").to_pylist())


def test_one_run_per_objective_trains_and_ranks_on_one_leaderboard(full_run):
    """A run of each objective. Its cumulative table: later runs into its directory (second_run's and the others
    below) publish leaderboard.csv with their own rows only."""
    _, artifacts, _ = full_run
    board = pd.read_csv(artifacts / "leaderboard-all.csv")
    models = board["model"].str.split(" @").str[0]  # a rebuilt row's versions are "<row> @<fingerprint>"
    assert {"declutr", "cert", "simcse", "clear", "untrained"} <= set(models)
    assert board.loc[models != "fasttext-bow", "STSB cosine"].notna().all()
    pairs = {
        read_table(d["path"]).column("objective")[0].as_py()
        for d in list_datasets(str(artifacts))
        if d["stage"] == "augment"
    }
    assert pairs == {"declutr", "cert", "simcse", "clear"}


@pytest.fixture(scope="module")
def second_run(full_run):
    """The full run's command again, with other runtime settings: its output."""
    args, _, _ = full_run
    result = cpipe(*args, "--set", "train.log_every=5", "--set", "train.checkpoint_every=3")  # runtime settings
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout + result.stderr


@pytest.fixture(scope="module")
def elsewhere(full_run, tmp_path_factory):
    """The full run's command twice more into another artifacts directory, until the filter stage: their
    directory and outputs."""
    args, artifacts, _ = full_run
    other = tmp_path_factory.mktemp("elsewhere")
    args = [str(other) if a == str(artifacts) else a for a in args]
    outputs = []
    for _ in range(2):
        result = cpipe(*args, "--until", "filter")
        assert result.returncode == 0, result.stderr[-3000:]
        outputs.append(result.stdout + result.stderr)
    return other, outputs


def test_second_run_reuses_every_stage_whatever_its_logging(second_run):
    log = stage_log(second_run)
    assert log and set(log.values()) == {"reused"}, log
    assert {
        "corpus",
        "filter",
        "augment-declutr",
        "train-declutr",
        "train-mlm-only",
        "train-continued",
        "evaluate-untrained",
    } <= set(log)


def test_after_the_run_cpipe_plan_with_its_arguments_says_every_stage_will_be_reused(full_run):
    args, artifacts, _ = full_run
    result = cpipe("plan", "--json", *args[1:])
    assert result.returncode == 0, result.stderr[-3000:]
    steps = json.loads(result.stdout)
    assert {s["action"] for s in steps} == {"reused"}, [s for s in steps if s["action"] != "reused"]
    assert {
        "backtranslate",
        "augment/cert",
        "train/continued",
        "evaluate/declutr",
        "evaluate/untrained",
        "leaderboard",
    } <= {s["label"] for s in steps}
    assert {s["path"] for s in steps} <= {d["path"] for d in list_datasets(str(artifacts))}


def test_changing_min_tokens_rebuilds_filter_and_everything_after_only(full_run):
    """With an MLflow server that answers the pre-flight and fails every report after it (503, as a server going
    down does): each report is one warning, and the evaluation and leaderboard after training are built."""
    args, _, _ = full_run
    hits = []

    class Failing(BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            self.send_response(503)
            self.end_headers()

        do_POST = do_GET

        def log_message(self, *args):
            pass

    with http_server(Failing) as srv:
        tracking = f"tracking.mlflow.uri=http://127.0.0.1:{srv.server_port}"
        # One run of the full run's six is enough to follow the change from the filter stage to the leaderboard.
        result = cpipe(*args, "--set", "filter.min_tokens=150", "--set", "runs={declutr: {}}", "--set", tracking)
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    log = stage_log(output)
    assert log["corpus"] == log["tokenizer"] == log["init"] == log["evaluate-untrained"] == "reused"
    assert log["filter"] == log["augment-declutr"] == log["train-declutr"] == log["leaderboard"] == "built"
    assert re.findall(r"MLflow: (.+) not reported: tracking\.mlflow\.uri http", output) == [
        "the trained models",
        "the leaderboard",
    ], output[-3000:]
    assert output.index("the trained models not reported") < output.index("evaluate-declutr: built")
    assert hits and all(h.startswith("/api/") for h in hits[1:]) and "Traceback" not in output


def test_reuse_stays_within_its_artifacts_directory(full_run, second_run, elsewhere):
    """Prefect's cache is shared by every run on the machine; a hit must not hand back another directory's dataset."""
    _, a, _ = full_run
    b, outputs = elsewhere
    # the second run of a leaves a cache record naming a's dataset; the same corpus stage into b builds its own
    assert re.search(rf"corpus: reused {a}/corpus/", second_run)
    assert re.search(rf"corpus: built {b}/corpus/", outputs[0])
    assert re.search(rf"corpus: reused {b}/corpus/", outputs[1])


def test_until_stops_after_the_stage(elsewhere):
    b, _ = elsewhere
    assert {d["stage"] for d in list_datasets(str(b))} == {"corpus", "tokenizer", "filter"}


def test_kill_during_training_then_the_same_command_finishes(tmp_path, tiny_config, tiny_corpus, tiny_sts):
    # A relative --artifacts, as `make run` passes: Ray workers run elsewhere and must still find it.
    args = [
        CPIPE,
        "run",
        "--config",
        str(tiny_config),
        "--corpus",
        str(tiny_corpus),
        "--eval-data",
        str(tiny_sts),
        "--artifacts",
        "artifacts",
        "--until",
        "train",
        "--set",
        "runs={declutr: {}}",
        "--set",
        "train.max_steps=30",
        "--set",
        "augment.epochs=8",
        "--set",
        "train.checkpoint_every=3",
    ]
    artifacts = tmp_path / "artifacts"
    proc = subprocess.Popen(
        args, cwd=tmp_path, env=flow_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.time() + 300
        while not list(artifacts.glob("_ray/train-*/checkpoint_*")):
            assert proc.poll() is None, "the run ended before it could be killed"
            assert time.time() < deadline, "no checkpoint appeared"
            time.sleep(0.2)
    finally:  # every process of the run at once, as the OOM killer or a cgroup's SIGKILL ends it: nothing cleans up
        signal_every_process(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not list(artifacts.glob("train/*/_SUCCESS")), "killed before training finished, yet marked finished"
    result = subprocess.run(args, cwd=tmp_path, env=flow_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    [train] = [d for d in list_datasets(str(artifacts)) if d["stage"] == "train"]
    metrics = pd.read_parquet(Path(train["path"]) / "metrics.parquet")
    assert list(metrics["step"]) == list(range(1, 31)), "steps repeated or skipped across the restart"
    assert read_manifest(train["path"])["steps"] == 30


@pytest.mark.parametrize("case", ["empty_corpus", "unknown_key", "no_task", "too_short"])
def test_bad_input_is_one_line_without_traceback(case, tmp_path, tiny_config, tiny_corpus, tiny_sts):
    corpus, eval_data, extra = str(tiny_corpus), str(tiny_sts), []
    if case == "empty_corpus":
        (tmp_path / "empty").mkdir()
        corpus, expected = str(tmp_path / "empty"), "no documents under"
    elif case == "unknown_key":
        extra, expected = ["--set", "filter.min_tokenz=3"], "unknown key 'filter.min_tokenz'"
    elif case == "no_task":
        (tmp_path / "eval").mkdir()
        eval_data, expected = str(tmp_path / "eval"), "no known STS task"
    else:
        extra, expected = ["--set", "filter.min_tokens=100000"], "no document has at least 100000 tokens: saw 16"
    result = cpipe(
        "run",
        "--config",
        str(tiny_config),
        "--corpus",
        corpus,
        "--eval-data",
        eval_data,
        "--artifacts",
        str(tmp_path / "artifacts"),
        *extra,
    )
    assert result.returncode == 2
    [error] = [line for line in result.stderr.splitlines() if line.startswith("cpipe: error: ")]
    assert expected in error, result.stderr[-2000:]
    assert "Traceback" not in result.stdout + result.stderr


def test_inspect_lists_datasets_and_shows_one(full_run):
    _, artifacts, _ = full_run
    listing = cpipe("inspect", str(artifacts))
    assert listing.returncode == 0 and "filter" in listing.stdout and "augment" in listing.stdout
    augment = next(d["path"] for d in list_datasets(str(artifacts)) if d["stage"] == "augment")
    shown = cpipe("inspect", augment, "--rows", "2")
    assert shown.returncode == 0
    header, *first = shown.stdout.splitlines()[-3:]  # piped: the rows tab-separated under their header
    assert "anchor_ids" in header.split("\t") and len(first) == 2
    assert f"rows: {read_manifest(augment)['rows']}" in shown.stdout
    missing = cpipe("inspect", str(artifacts / "nowhere"))
    assert missing.returncode == 2 and "not a directory" in missing.stderr


def test_cpipe_evaluate_scores_a_model_directory_into_the_cumulative_leaderboard(
    full_run, tmp_path, tiny_config, tiny_sts
):
    """A sentence-transformers directory this run did not train (a copy of one of its exports, renamed), scored
    alone: its row is named by its directory; a missing directory fails in one line before any work."""
    _, trained, _ = full_run
    export = next(d["path"] for d in list_datasets(str(trained)) if d["stage"] == "train")
    model = tmp_path / "my-encoder"
    shutil.copytree(f"{export}/sentence-transformers", model)
    artifacts = tmp_path / "artifacts"
    args = [
        "evaluate",
        "--model",
        str(model),
        "--eval-data",
        str(tiny_sts),
        "--artifacts",
        str(artifacts),
        "--config",
        str(tiny_config),
    ]
    missing = cpipe(*args, "--model", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    [error] = [line for line in missing.stderr.splitlines() if line.startswith("cpipe: error: ")]
    assert str(tmp_path / "nowhere") in error and not artifacts.exists()
    result = cpipe(*args)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    table = pd.read_csv(artifacts / "leaderboard-all.csv").set_index("model")
    assert list(table.index) == ["my-encoder"] and pd.notna(table.loc["my-encoder", "STSB cosine"])
    assert table.loc["my-encoder", "objective"] == "pretrained"
    assert "| my-encoder |" in result.stdout  # the cumulative table, printed
    assert {d["stage"] for d in list_datasets(str(artifacts))} == {"evaluate", "leaderboard"}
