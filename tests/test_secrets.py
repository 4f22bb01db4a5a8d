"""A credential in a URL, whichever config key holds it, is used for the download and appears nowhere: output,
artifacts, Prefect's database."""

from __future__ import annotations

import base64
import json
import random
import re
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
import yaml

from pipeline.config import load_config
from pipeline.corpus.credentials import conceal, reveal, split_credentials
from pipeline.errors import ConfigError
from tests.conftest import cpipe, http_server
from tests.helpers import EN_WORDS, sentence

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


# A password in each key that may hold a URL, in several sections; none of those keys is special.
PLANTED = {
    "corpus.sources": ["http://alice:PLANTED-corpus-1@127.0.0.1:9/corpus.txt"],
    "filter.langid_model": "http://bob:PLANTED-langid-2@127.0.0.1:9/lid.176.ftz",
    "evaluate.data": {"sts": "https://carol:PLANTED-eval-3@host.example/sts.csv"},
    "model.base": "https://dave:PLANTED-base-4@hub.example/encoder",
    "augment.simcse_sup.nli": ["https://erin:PLANTED-nli-5@host.example/nli.jsonl"],
    "evaluate.baselines.vectors": ["https://frank:PLANTED-vectors-6@host.example/glove.txt"],
    "backtranslate.forward_model": {"de": "https://grace:PLANTED-mt-7@hub.example/{source}-{pivot}"},
    "ray.address": "ray://heidi:PLANTED-ray-8@10.0.0.1:10001",
}


def profile(values: dict, **more) -> str:
    """A YAML profile of dotted keys' values."""
    data: dict = {}
    for key, value in {**values, **more}.items():
        *sections, last = key.split(".")
        node = data
        for section in sections:
            node = node.setdefault(section, {})
        node[last] = value
    return yaml.safe_dump(data)


def leaves(value) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in leaves(v)]
    return [s for v in value for s in leaves(v)] if isinstance(value, list) else [value]


def test_every_url_in_a_profile_or_set_is_masked_and_revealed_for_the_download(tmp_path, monkeypatch):
    monkeypatch.delenv("CPIPE_URL_CREDENTIALS", raising=False)
    planted = tmp_path / "planted.yaml"
    in_profile = {k: v for k, v in PLANTED.items() if k != "ray.address"}
    planted.write_text(profile(in_profile, **{"backtranslate.pivots": ["de"]}))
    cfg = load_config(planted, [f"ray.address={PLANTED['ray.address']}"])
    held = cfg.model_dump()
    for key, value in PLANTED.items():
        node = held
        for part in key.split("."):
            node = node[part]
        for real, masked in zip(leaves(value), leaves(node), strict=True):
            assert masked == re.sub(r"//[^/@]+@", "//***@", real), key
            assert reveal(masked) == real, key
    assert "PLANTED" not in cfg.model_dump_json()
    rotated = tmp_path / "rotated.yaml"
    rotated.write_text(planted.read_text().replace("PLANTED", "ROTATED"))
    again = load_config(rotated, [f"ray.address={PLANTED['ray.address'].replace('PLANTED', 'ROTATED')}"])
    assert again.model_dump() == held, "a changed password must not change a fingerprint"
    planted.write_text(profile({"filter.min_tokens": PLANTED["filter.langid_model"]}))
    with pytest.raises(ConfigError, match=r"filter\.min_tokens: .*got 'http://\*\*\*@127") as bad:
        load_config(planted)
    assert "PLANTED" not in str(bad.value)


def credentials(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.e2e
def test_planted_secrets_reach_the_server_and_nothing_else(tmp_path, tiny_config, isolated_prefect, lid_model):
    """The corpus by --corpus, the language model by the profile: each download gets its own password, and no
    password (those of the keys the run reads nothing from, --set's too) is in the output or any file written."""
    rng = random.Random(0)
    corpus = "\n".join(" ".join(sentence(rng, EN_WORDS) + "." for _ in range(40)) for _ in range(3)).encode()
    served = {
        "/corpus.txt": ("alice", SECRET, corpus),
        "/lid.176.ftz": ("bob", split_credentials(PLANTED["filter.langid_model"])[2], Path(lid_model).read_bytes()),
    }
    seen = []

    class Protected(BaseHTTPRequestHandler):
        def do_GET(self):
            user, password, body = served[self.path]
            seen.append((self.path, self.headers.get("Authorization")))
            if self.headers.get("Authorization") != credentials(user, password):
                self.send_response(401)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    artifacts, downloads = tmp_path / "artifacts", tmp_path / "downloads"
    with http_server(Protected) as srv:
        origin = f"127.0.0.1:{srv.server_port}"
        url = f"http://alice:{SECRET}@{origin}/corpus.txt"
        unread = ("evaluate.data", "augment.simcse_sup.nli", "backtranslate.forward_model")
        planted = tmp_path / "planted.yaml"
        planted.write_text(
            profile(
                {k: PLANTED[k] for k in unread},
                **{
                    "extends": str(tiny_config),
                    "filter.language": "en",
                    "filter.langid_model": PLANTED["filter.langid_model"].replace("127.0.0.1:9", origin),
                    "backtranslate.pivots": ["de"],
                },
            )
        )
        args = [
            "run",
            "--config",
            str(planted),
            "--corpus",
            url,
            "--artifacts",
            str(artifacts),
            "--until",
            "filter",
            "--set",
            f"corpus.download_dir={downloads}",
            "--set",
            f"evaluate.baselines.vectors=[{PLANTED['evaluate.baselines.vectors'][0]}]",
        ]
        result = cpipe(*args)
        assert result.returncode == 0, result.stderr[-3000:]
        rotated = tmp_path / "rotated.yaml"
        rotated.write_text(planted.read_text().replace("PLANTED", "ROTATED"))
        changed = [str(rotated) if a == str(planted) else a.replace("PLANTED", "ROTATED") for a in args]
        # What the run would build again: the plan computes its fingerprints, starting and downloading nothing.
        again = cpipe("plan", *changed[1:], "--json")
        assert again.returncode == 0, again.stderr[-3000:]
    assert sorted({path for path, _ in seen}) == ["/corpus.txt", "/lid.176.ftz"]
    assert all(header == credentials(*served[path][:2]) for path, header in seen), "each download, its password"
    actions = {step["stage"]: step["action"] for step in json.loads(again.stdout)}
    assert actions == dict.fromkeys(("corpus", "tokenizer", "filter"), "reused"), "a changed password, no fingerprint"
    output = result.stdout + result.stderr + again.stdout + again.stderr
    corpus_manifest = next((artifacts / "corpus").glob("*/_manifest.json")).read_text()
    assert "***@127.0.0.1" in corpus_manifest  # the masked URL, where the run records its sources
    secrets = ["PLANTED", "ROTATED"]  # every password planted (SECRET too) and its change
    assert not [s for s in secrets if s in output]
    stored = [p for root in (artifacts, downloads, Path(isolated_prefect)) for p in root.rglob("*") if p.is_file()]
    assert any(p.suffix == ".db" for p in stored), "Prefect's database was not where the test looks"
    assert any(p.name == "_manifest.json" and p.parent.parent.name == "filter" for p in stored), "no filter manifest"
    leaks = [(p, s) for p in stored for s in secrets if s.encode() in p.read_bytes()]
    assert not leaks, leaks
