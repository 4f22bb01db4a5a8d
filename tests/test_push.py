"""`cpipe push`: a model's sentence-transformers directory and its Hub card uploaded through huggingface_hub, here to
a local stand-in of the Hub's HTTP API (the endpoints create_repo and upload_folder call), never the network."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from pipeline.config import Config
from pipeline.evaluate import stage as evaluate
from pipeline.evaluate.config import EvaluateConfig
from pipeline.locate import ST_DIR
from pipeline.stage import run_stage
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
    assert proc.stderr.startswith("cpipe: error: push to someone/forbidden failed: 403"), proc.stderr
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
