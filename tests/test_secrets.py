"""A credential in a corpus URL is used for the download and appears nowhere: output, artifacts, Prefect's database."""

from __future__ import annotations

import base64
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from pipeline.corpus.credentials import conceal, reveal, split_credentials
from tests.conftest import cpipe, http_server, make_document

SECRET = "PLANTED-s3cret-7731"


def test_conceal_masks_user_info_and_reveal_gives_it_back(monkeypatch):
    monkeypatch.delenv("CPIPE_URL_CREDENTIALS", raising=False)
    text = f"--set corpus.sources=[https://bob:{SECRET}@host.example/a.txt, /local/b.txt]"
    concealed = conceal(text)
    assert SECRET not in concealed and "bob" not in concealed
    assert concealed == "--set corpus.sources=[https://***@host.example/a.txt, /local/b.txt]"
    assert reveal("https://***@host.example/a.txt") == f"https://bob:{SECRET}@host.example/a.txt"
    assert conceal(concealed) == concealed
    assert split_credentials(f"https://bob:{SECRET}@host.example:8443/a.txt") == (
        "https://host.example:8443/a.txt",
        "bob",
        SECRET,
    )


@pytest.mark.e2e
def test_a_planted_secret_reaches_the_server_and_nothing_else(tmp_path, tiny_config, isolated_prefect):
    corpus = "\n".join(make_document(__import__("numpy").random.default_rng(0), 400) for _ in range(3)).encode()
    seen = []

    class Protected(BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.headers.get("Authorization"))
            if self.headers.get("Authorization") != "Basic " + base64.b64encode(f"alice:{SECRET}".encode()).decode():
                self.send_response(401)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(corpus)))
            self.end_headers()
            self.wfile.write(corpus)

        def log_message(self, *args):
            pass

    artifacts, downloads = tmp_path / "artifacts", tmp_path / "downloads"
    with http_server(Protected) as srv:
        url = f"http://alice:{SECRET}@127.0.0.1:{srv.server_port}/corpus.txt"
        args = [
            "run",
            "--config",
            str(tiny_config),
            "--corpus",
            url,
            "--artifacts",
            str(artifacts),
            "--until",
            "corpus",
            "--set",
            f"corpus.download_dir={downloads}",
        ]
        result = cpipe(*args)
        assert result.returncode == 0, result.stderr[-3000:]
        again = cpipe(*args[:4], url.replace(SECRET, "another-password"), *args[5:])
        assert again.returncode == 0, again.stderr[-3000:]
    assert seen and all(SECRET in base64.b64decode(h.split()[1]).decode() for h in seen)
    assert "corpus: reused" in again.stdout + again.stderr, "a changed credential must not change the fingerprint"
    output = result.stdout + result.stderr + again.stdout + again.stderr
    assert "***@127.0.0.1" in output and SECRET not in output and "another-password" not in output
    stored = [p for root in (artifacts, downloads, Path(isolated_prefect)) for p in root.rglob("*") if p.is_file()]
    assert any(p.suffix == ".db" for p in stored), "Prefect's database was not where the test looks"
    leaks = [p for p in stored if SECRET.encode() in p.read_bytes() or b"another-password" in p.read_bytes()]
    assert not leaks, leaks
