"""`cpipe push`: a model's sentence-transformers directory and its Hub card uploaded through huggingface_hub, here to
a local stand-in of the Hub's HTTP API (the endpoints create_repo and upload_folder call), or to a closed local port
(no network), never the network; `--dry-run OUT` writes what would be uploaded."""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pandas as pd
import pytest
import yaml
from transformers import AutoConfig

from flows.cli import main
from pipeline.config import Config
from pipeline.evaluate import stage as evaluate
from pipeline.evaluate.config import EvaluateConfig
from pipeline.evaluate.stage import Row
from pipeline.leaderboard import stage as ranking
from pipeline.locate import HF_DIR, ST_DIR
from pipeline.model.exported import Encoder
from pipeline.model.hf_files import Weights
from pipeline.model.hub_card import evaluation_sets, hub_card, source_name
from pipeline.stage import run_stage
from pipeline.train.card import train_info, write_card
from pipeline.train.config import TrainConfig
from storage import DatasetWriter, dataset_path
from tests.conftest import ROOT
from tests.helpers import tiny_model

TOKEN = "hf_standin0123456789abcdefSECRET"


class _Hub(BaseHTTPRequestHandler):
    """Answers create_repo, preupload (every file "regular": its bytes travel inside the commit), commit and YAML
    validation; records each request, and each committed file's bytes."""

    def _reply(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        hub = self.server.hub
        hub["requests"].append((self.command, self.path, self.headers.get("Authorization")))
        path = self.path.split("?")[0]
        if path == "/api/repos/create":
            hub["created"] = json.loads(body)
            if hub["created"]["name"] == "forbidden":  # as the Hub says it, naming what it was sent
                return self._reply(403, {"error": f"{self.headers.get('Authorization')} may not create this repo"})
            return self._reply(200, {"url": f"{hub['url']}/{hub['created']['organization']}/{hub['created']['name']}"})
        if path == "/api/validate-yaml":
            return self._reply(200, {})
        if "/preupload/" in path:
            files = json.loads(body)["files"]
            return self._reply(
                200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]}
            )
        if "/commit/" in path:
            for line in body.splitlines():
                item = json.loads(line)
                if item["key"] == "file":
                    hub["files"][item["value"]["path"]] = base64.b64decode(item["value"]["content"])
            return self._reply(
                200,
                {
                    "commitUrl": f"{hub['url']}/{path.split('/')[3]}/{path.split('/')[4]}/commit/" + "a" * 40,
                    "commitOid": "a" * 40,
                },
            )
        self._reply(404, {"error": f"not stood in for: {path}"})

    def do_GET(self) -> None:
        self.server.hub["requests"].append((self.command, self.path, self.headers.get("Authorization")))
        self._reply(404, {"error": "not stood in for"})

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def hub():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    server.hub = {"requests": [], "files": {}, "url": f"http://127.0.0.1:{server.server_address[1]}"}
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.hub
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def scored(tmp_path_factory, tiny_sts):
    """A tiny sentence-transformers model and the evaluate stage's scores of it (as `cpipe evaluate --model`)."""
    root = tmp_path_factory.mktemp("push")
    st = str(tiny_model(root / "model") / ST_DIR)
    cfg = Config(evaluate=EvaluateConfig(data=str(tiny_sts), batch_size=16))
    row = evaluate.model_row("mine", st)
    art = str(root / "artifacts")
    run_stage(evaluate.STAGE, evaluate.config(cfg, row), row.inputs, art)
    return {"model": st, "artifacts": art, "card": (Path(st) / "README.md").read_bytes()}


def _push(hub: dict, *args: str, token: str | None = TOKEN, home: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_ENDPOINT=hub["url"], HF_HOME=str(home), HF_HUB_DISABLE_TELEMETRY="1", NO_PROXY="127.0.0.1")
    if token:
        env["HF_TOKEN"] = token
    return subprocess.run(
        [sys.executable, "-m", "flows.cpipe", "push", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _front_matter(card: str) -> dict:
    assert card.startswith("---\n"), card[:200]
    return yaml.safe_load(card.split("---\n")[1])


def _written(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


@pytest.mark.slow  # a cpipe process
def test_push_uploads_the_model_and_a_card_the_hub_reads(hub, scored, tmp_path):
    proc = _push(
        hub,
        scored["model"],
        "someone/tiny-encoder",
        "--private",
        "--artifacts",
        scored["artifacts"],
        home=tmp_path / "hf",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert hub["created"]["name"] == "tiny-encoder" and hub["created"]["organization"] == "someone"
    assert hub["created"].get("visibility") == "private" or hub["created"].get("private") is True, hub["created"]
    # every file of the model, byte for byte, the card apart
    model = Path(scored["model"])
    sent = {str(p.relative_to(model)): p.read_bytes() for p in _written(model) if p.name != "README.md"}
    assert {k: v for k, v in hub["files"].items() if k != "README.md"} == sent
    meta = _front_matter(hub["files"]["README.md"].decode())
    assert meta["license"] == "apache-2.0" and meta["language"] == ["en"]
    assert meta["library_name"] == "sentence-transformers" and meta["pipeline_tag"] == "sentence-similarity"
    assert {"sentence-transformers", "sentence-similarity", "feature-extraction", "contrastive-pipeline"} <= set(
        meta["tags"]
    )
    # the model-index holds the evaluate stage's test scores of this model, x 100 as the leaderboard shows them
    from storage import list_datasets, read_table

    rows = read_table(list_datasets(scored["artifacts"])[0]["path"]).to_pandas()
    analysis = ["alignment", "uniformity", "sentence_anisotropy", "anisotropy"]  # no benchmark scores
    want = rows[(rows["split"] == "test") & (rows["subset"] == "all") & ~rows["metric"].isin(analysis)]
    assert len(want) >= 2
    results = meta["model-index"][0]["results"]
    got = {(r["dataset"]["name"], m["type"]): m["value"] for r in results for m in r["metrics"]}
    assert got == {
        (t, f"{p}_{m}"): round(v * 100, 2)
        for t, p, m, v in zip(want["task"], want["protocol"], want["metric"], want["value"])
    }
    assert meta["model-index"][0]["name"] == "tiny-encoder"
    # the sets it was scored on (these tiny ones are no public set), its parameters as the leaderboard counts them
    assert meta["datasets"] == list(dict.fromkeys(f"local: {t}" for t in want["task"]))
    assert meta["n_parameters"] == Encoder(scored["model"]).parameters
    assert 'SentenceTransformer("someone/tiny-encoder")' in hub["files"]["README.md"].decode()
    # the token went to the Hub in a header, and nowhere else
    assert any(auth == f"Bearer {TOKEN}" for *_, auth in hub["requests"])
    assert TOKEN not in proc.stdout + proc.stderr
    assert all(TOKEN.encode() not in content for content in hub["files"].values())
    assert all(
        TOKEN.encode() not in p.read_bytes()
        for root in (model.parent, Path(scored["artifacts"]))
        for p in _written(root)
    )
    assert (model / "README.md").read_bytes() == scored["card"]  # the model's own card is left as it was


@pytest.mark.slow  # a cpipe process
def test_push_keeps_a_license_given_and_fails_in_one_line_without_a_token(hub, scored, tmp_path):
    proc = _push(hub, scored["model"], "someone/tiny", "--license", "mit", home=tmp_path / "hf")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _front_matter(hub["files"]["README.md"].decode())["license"] == "mit"
    assert "model-index" not in _front_matter(hub["files"]["README.md"].decode())  # no scores known without artifacts
    hub["requests"].clear()
    proc = _push(hub, scored["model"], "someone/tiny", token=None, home=tmp_path / "empty-hf")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "no Hugging Face token" in proc.stderr, proc.stderr
    assert hub["requests"] == []


@pytest.mark.slow  # a cpipe process
def test_a_hub_error_is_one_line_without_the_token(hub, scored, tmp_path):
    proc = _push(hub, scored["model"], "someone/forbidden", home=tmp_path / "hf")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr[-3000:]
    assert proc.stderr.startswith(f"cpipe: error: push to someone/forbidden at {hub['url']} failed: 403"), proc.stderr
    assert TOKEN not in proc.stdout + proc.stderr and hub["files"] == {}
    proc = _push(hub, scored["model"], "not a repo", home=tmp_path / "hf")
    assert proc.returncode == 2 and proc.stderr.startswith("cpipe: error: not a repo: not a Hub repository id")
    proc = _push(hub, str(Path(scored["model"]).parent / "nowhere"), "someone/tiny", home=tmp_path / "hf")
    assert proc.returncode == 2 and "no sentence-transformers model here" in proc.stderr, proc.stderr


@pytest.mark.slow  # a Python process
@pytest.mark.parametrize(
    "args, message",
    [
        (["push", "{model}", "no good id"], "cpipe: error: no good id: not a Hub repository id (owner/name)"),
        (["push", "{tmp}", "someone/tiny"], "cpipe: error: {tmp}: no sentence-transformers model here"),
        (["export", "{tmp}/none", "--onnx", "{tmp}/o"], "cpipe: error: {tmp}/none: no such directory"),
        (["export", "{model}"], "cpipe export: error: the following arguments are required: --onnx"),
    ],
)
def test_push_and_export_usage_errors_come_before_any_heavy_import(scored, tmp_path, args, message):
    from tests.test_usage_errors import PROBE

    fill = {"tmp": tmp_path, "model": scored["model"]}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *(a.format(**fill) for a in args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr[-3000:]
    assert proc.stderr.startswith(message.format(**fill)), proc.stderr
    assert proc.stdout.strip() == "[]", f"imported before the error: {proc.stdout}"


@pytest.mark.slow  # a cpipe process
def test_without_network_a_push_is_one_line_without_the_token(scored, tmp_path):
    with socket.socket() as s:  # a port nothing listens on: the connection is refused, as with no route
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    proc = _push({"url": closed}, scored["model"], "me/x", token="hf_x" + TOKEN, home=tmp_path / "hf")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr[-3000:]
    assert proc.stderr.startswith(f"cpipe: error: push to me/x at {closed} failed: "), proc.stderr
    assert "Traceback" not in proc.stderr and TOKEN not in proc.stdout + proc.stderr


@pytest.mark.slow  # cpipe processes
def test_the_dry_run_writes_exactly_what_the_push_uploads(hub, scored, tmp_path):
    args = [scored["model"], "someone/tiny-encoder", "--license", "mit", "--artifacts", scored["artifacts"]]
    proc = _push(hub, *args, home=tmp_path / "hf")
    assert proc.returncode == 0, proc.stderr[-3000:]
    hub["requests"].clear()
    proc = _push(hub, *args, "--dry-run", str(tmp_path / "out"), token=None, home=tmp_path / "no-token")
    assert proc.returncode == 0 and proc.stdout.startswith(f"cpipe: wrote {tmp_path / 'out'}"), proc.stderr[-3000:]
    assert hub["requests"] == []  # nothing sent, and no token needed
    out = tmp_path / "out"
    assert {str(p.relative_to(out)): p.read_bytes() for p in _written(out)} == hub["files"]
    # a second dry run does not write over the first
    proc = _push(hub, *args, "--dry-run", str(out), token=None, home=tmp_path / "no-token")
    assert (
        proc.returncode == 2
        and proc.stderr == f"cpipe: error: {out}: already exists (--dry-run writes a new directory)\n"
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_sts):
    """A run's artifacts as its stages leave them: a corpus of a Hub dataset's file and a local directory, pairs
    made from it, a trained model (a tiny export with the card train writes), the evaluate stage's scores of it
    and of a random encoder, and the leaderboard comparing them (evaluate.compare_to: random)."""
    art = tmp_path_factory.mktemp("run")
    sources = [
        f"https://huggingface.co/datasets/Salesforce/wikitext/resolve/{'b' * 40}/test.parquet",
        "/data/my-corpus",
    ]

    def dataset(stage, fp, config, inputs, extra=None, build=None):
        with DatasetWriter(str(art), stage, fp, config=config, inputs=inputs) as out:
            out.extra.update(extra or {})
            if build:
                build(out)
        return dataset_path(str(art), stage, fp)

    dataset("corpus", "c" * 16, {"sources": sources}, {})
    pairs = dataset("augment", "a" * 16, {}, {"documents": "c" * 16}, extra={"rows": 48})
    init = dataset("init", "i" * 16, {"base": None}, {}, extra={"parameters": 999})
    cfg = TrainConfig(batch_size=4, max_steps=6)

    def train(out):
        tiny_model(Path(out.local_dir))
        out.extra.update({"steps": 6, "final_loss": 2.5})
        st = f"{out.local_dir}/{ST_DIR}"
        out.extra["card"] = train_info(
            cfg, {"pairs": pairs, "init": init}, out.extra, AutoConfig.from_pretrained(f"{out.local_dir}/{HF_DIR}"), st
        )
        write_card(st, out.extra["card"])

    model = dataset("train", "t" * 16, {"train": cfg.model_dump()}, {"pairs": "a" * 16, "init": "i" * 16}, build=train)
    config = Config(evaluate=EvaluateConfig(data=str(tiny_sts), batch_size=16))
    inputs = {}
    for row in (
        Row("declutr", {"kind": "trained"}, {"model": model}, {"objective": "declutr"}),
        Row("random", {"kind": "random", "dim": 32, "seed": 0}, {}, {"objective": "none (random)"}),
    ):
        inputs[f"scores-{row.name}"] = run_stage(evaluate.STAGE, evaluate.config(config, row), row.inputs, str(art))
    board = run_stage(ranking.STAGE, {"rank_by": None, "compare_to": "random"}, inputs, str(art))
    table = pd.read_parquet(f"{board}/leaderboard.parquet").set_index("model")
    return {"model": model, "table": table}


def test_the_dry_run_card_names_the_corpus_the_sets_the_scores_and_the_parameters(run, tmp_path, capsys):
    assert main(["push", run["model"], "me/x", "--dry-run", str(tmp_path / "out")]) == 0, capsys.readouterr().err
    card = (tmp_path / "out" / "README.md").read_text()
    meta, ours = _front_matter(card), run["table"].loc["declutr"]
    # the corpus's Hub dataset and local directory, then the sets scored (the tiny ones: no public set)
    assert meta["datasets"] == ["Salesforce/wikitext", "local: my-corpus", "local: STS12", "local: STSB"]
    # the leaderboard's scores: each "<task> <protocol>" column's Spearman x 100, under its task
    got = {
        (r["dataset"]["name"], m["type"]): m["value"] for r in meta["model-index"][0]["results"] for m in r["metrics"]
    }
    columns = [
        c
        for c in run["table"].columns
        if c.split(" ")[0] in ("STS12", "STSB") and c.count(" ") == 1 and pd.notna(ours[c])
    ]
    assert len(columns) >= 3
    for column in columns:
        task, protocol = column.split(" ")
        assert got[(task, f"{protocol}_spearman")] == pytest.approx(ours[column], abs=0.005), column
    assert meta["n_parameters"] == ours["parameters"] == Encoder(run["model"]).parameters
    # the body: the reference row beside the model's scores, and a snippet loading the repository
    assert "| column | score | random | difference [95% interval] |" in card
    assert f"| STSB cosine | {ours['STSB cosine']:.2f} | {run['table'].at['random', 'STSB cosine']:.2f} | " in card
    assert 'SentenceTransformer("me/x")' in card and "path/to/this/directory" not in card


def test_the_card_names_public_sets_by_their_hub_datasets_and_keeps_its_base_model():
    rows = pd.DataFrame(
        [
            {"task": "STSB", "n": 1379, "metric": "spearman", "protocol": "cosine", "value": 0.8},
            {"task": "SICKR", "n": 4927, "metric": "spearman", "protocol": "cosine", "value": 0.7},  # not MTEB's
            {"task": "sts12-sts", "n": 3108, "metric": "spearman", "protocol": "cosine", "value": 0.6},
        ]
    )
    text = "---\nbase_model: roberta-base\n---\n# x\n"
    meta = _front_matter(hub_card(text, "me/x", None, ["local: c", *evaluation_sets(rows)], rows, Weights(10, 12)))
    assert meta["base_model"] == "roberta-base" and meta["n_parameters"] == 10
    assert meta["datasets"] == ["local: c", "mteb/stsbenchmark-sts", "local: SICKR", "mteb/sts12-sts"]
    sets = {r["dataset"]["name"]: r["dataset"] for r in meta["model-index"][0]["results"]}
    # MTEB's datasets at the revisions its task metadata pins
    assert sets["STSB"] == {
        "name": "STSB",
        "type": "mteb/stsbenchmark-sts",
        "config": "default",
        "split": "test",
        "revision": "b0fddb56ed78048fa8b90373c8a3cfc37b684831",
    }
    assert sets["sts12-sts"]["revision"] == "a0d554a64d88156834ff5ae9920b964011b16384"
    assert sets["SICKR"] == {"name": "SICKR", "type": "SICKR", "split": "test"}


@pytest.mark.parametrize(
    "source, name",
    [
        (f"https://huggingface.co/datasets/Salesforce/wikitext/resolve/{'b' * 40}/t.parquet", "Salesforce/wikitext"),
        ("hf://datasets/me/corpus@main/data/x.jsonl", "me/corpus"),
        ("https://mirror.example/owt/urlsf_subset00.tar", "Skylion007/openwebtext"),
        ("https://dumps.wikimedia.org/enwiki/latest/enwiki-latest-pages-articles.xml.bz2", "wikimedia/wikipedia"),
        # a concealed password and a signed URL's signature stay off the card
        ("https://***@host.example:8443/c/docs.jsonl?X-Amz-Signature=abc", "https://host.example:8443/c/docs.jsonl"),
        ("/home/me/data/my-corpus/", "local: my-corpus"),
    ],
)
def test_a_corpus_source_is_named_by_its_hub_dataset_its_url_or_its_directory(source, name):
    assert source_name(source) == name
