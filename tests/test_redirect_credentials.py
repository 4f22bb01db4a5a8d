"""A URL's credentials go to the origin they were written for: kept on a redirect within it, dropped on one to
another host (two servers on 127.0.0.1 with different ports are different origins)."""

from __future__ import annotations

import base64
from http.server import BaseHTTPRequestHandler

import pytest

from pipeline.corpus.credentials import same_origin
from pipeline.corpus.download import fetch
from tests.conftest import http_server

SECRET = "S3CRETPW-4412"
AUTH = "Basic " + base64.b64encode(f"alice:{SECRET}".encode()).decode()
DOC = b"a document behind a password\n" * 100


class Handler(BaseHTTPRequestHandler):
    """/doc.txt (with the credential when srv.protected), /same -> /doc.txt here, /cross -> srv.elsewhere's
    /doc.txt; every request's path and Authorization header go to srv.seen."""

    def do_GET(self) -> None:
        srv = self.server
        srv.seen.append((self.path, self.headers.get("Authorization")))
        if self.path in ("/same", "/cross"):
            self.send_response(302)
            self.send_header("Location", "/doc.txt" if self.path == "/same" else f"{srv.elsewhere}/doc.txt")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if srv.protected and self.headers.get("Authorization") != AUTH:
            return self.send_error(401)
        self.send_response(200)
        self.send_header("Content-Length", str(len(DOC)))
        self.end_headers()
        self.wfile.write(DOC)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def servers():
    """(the credential's server, another that serves the document to anyone)."""
    with http_server(Handler) as home, http_server(Handler) as other:
        for srv, protected in ((home, True), (other, False)):
            srv.seen, srv.protected = [], protected
        home.elsewhere = f"http://127.0.0.1:{other.server_port}"
        yield home, other


def get(srv, path, tmp_path):
    url = f"http://alice:{SECRET}@127.0.0.1:{srv.server_port}{path}"
    return fetch(url, tmp_path, retries=0, timeout=5.0, progress=False).read_bytes()


def test_the_credential_reaches_its_server_and_a_redirect_within_it(servers, tmp_path):
    home, other = servers
    assert get(home, "/doc.txt", tmp_path) == DOC
    assert get(home, "/same", tmp_path) == DOC
    assert home.seen == [("/doc.txt", AUTH), ("/same", AUTH), ("/doc.txt", AUTH)] and not other.seen


def test_a_redirect_to_another_host_gets_no_credential_and_the_download_goes_on(servers, tmp_path):
    home, other = servers
    assert get(home, "/cross", tmp_path) == DOC
    assert home.seen == [("/cross", AUTH)]
    assert other.seen == [("/doc.txt", None)]


@pytest.mark.parametrize(
    "url, redirect, keeps",
    [
        ("http://h.example/a", "http://H.example/b", True),
        ("http://h.example/a", "http://h.example:80/b", True),  # the default port, written out
        ("http://h.example/a", "https://h.example/b", True),  # an upgrade on the default ports
        ("http://h.example:8080/a", "http://h.example:8080/b", True),
        ("https://h.example/a", "http://h.example/b", False),  # a downgrade would send it in clear
        ("http://h.example:8080/a", "https://h.example/b", False),
        ("http://h.example/a", "http://h.example:8080/b", False),
        ("http://h.example/a", "http://other.example/a", False),
        ("http://127.0.0.1:1234/a", "http://127.0.0.1:1235/a", False),
    ],
)
def test_credentials_follow_a_redirect_only_within_their_origin(url, redirect, keeps):
    assert same_origin(url, redirect) is keeps
