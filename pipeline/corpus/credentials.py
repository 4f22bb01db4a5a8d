"""Credentials in URLs (`https://user:password@host/corpus.txt`) are used for the request, never shown or stored.

Everything the pipeline prints, fingerprints or writes (logs, manifests, Prefect's flow parameters) sees
the concealed form `https://***@host/corpus.txt`, so a changed password neither leaks nor rebuilds a
stage: the CLI conceals its options and `pipeline.config.Config` every string of the config as it is read,
whichever key holds it. The real URL is kept in this process's environment, which its subprocesses and local
Ray workers inherit (a job on a cluster gets it through its runtime_env's env_vars), and is revealed only where
the request is made. Credentials go only to the origin (scheme, host, port) they were written for, not where it redirects.
"""

from __future__ import annotations

import json
import os
import re
import urllib.parse

ENV = "CPIPE_URL_CREDENTIALS"
MASK = "***"
_USERINFO = re.compile(r"\b([a-z][a-z0-9+.-]*://)([^\s/@]+)@", re.IGNORECASE)
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s/@]+@\S*", re.IGNORECASE)


def _known() -> dict[str, str]:
    return json.loads(os.environ.get(ENV) or "{}")


def conceal(text: str) -> str:
    """`text` with the credentials of every URL in it masked; the real URLs are remembered for `reveal`."""
    text, found = _masked(text)
    known = {**_known(), **found}
    if known:
        os.environ[ENV] = json.dumps(known)
    return text


def concealed(value):
    """`value` with `conceal` applied to every string in it, however deep in dicts and lists: a whole config (a
    profile, `--set`, flow parameters), whichever of its keys holds a URL."""
    if isinstance(value, dict):
        return {k: concealed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [concealed(v) for v in value]
    return conceal(value) if isinstance(value, str) else value


def conceal_for_another_process(texts: list[str]) -> tuple[list[str], dict[str, str]]:
    """`texts` with credentials masked, and the environment variables with which another process (a job on a
    cluster) reveals them: the secrets travel beside the command, never in it."""
    masked, found = zip(*map(_masked, texts)) if texts else ((), ())
    secrets = {k: v for f in found for k, v in f.items()}
    return list(masked), ({ENV: json.dumps(secrets)} if secrets else {})


def _masked(text: str) -> tuple[str, dict[str, str]]:
    """`text` with every URL's user info masked, and the real URLs by their masked form."""

    def mask(match: re.Match) -> str:
        return f"{match[1]}{MASK}@" if match[2] != MASK else match[0]

    found = {}
    # A URL in running text (`--set corpus.sources=[URL, ...]`) ends before the quotes and brackets around it; a
    # whole value that is one URL is all URL (`https://host/{source}-{pivot}`).
    for url in [text] if _URL.fullmatch(text) else [u.rstrip("'\",]}") for u in _URL.findall(text)]:
        concealed = _USERINFO.sub(mask, url)
        if concealed != url:
            found[concealed] = url
    return _USERINFO.sub(mask, text), found


def reveal(url: str) -> str:
    """The URL with the credentials `conceal` masked."""
    return _known().get(url, url)


def split_credentials(url: str) -> tuple[str, str | None, str | None]:
    """(the URL without user info, user, password): urllib sends user info only as an Authorization header."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None:
        return url, None, None
    netloc = parts.hostname + (f":{parts.port}" if parts.port else "")
    return (
        urllib.parse.urlunsplit(parts._replace(netloc=netloc)),
        urllib.parse.unquote(parts.username),
        urllib.parse.unquote(parts.password or ""),
    )


_DEFAULT_PORTS = {"http": 80, "https": 443}


def same_origin(url: str, redirect: str) -> bool:
    """Whether a redirect from `url` to `redirect` may carry `url`'s credentials: the same scheme, host and port,
    or http upgraded to https on the default ports (`requests`' rule, its `Session.should_strip_auth`)."""
    old, new = urllib.parse.urlsplit(url), urllib.parse.urlsplit(redirect)
    if old.hostname != new.hostname:
        return False
    if old.scheme == "http" and old.port in (80, None) and new.scheme == "https" and new.port in (443, None):
        return True
    return old.scheme == new.scheme and (old.port or _DEFAULT_PORTS.get(old.scheme)) == (
        new.port or _DEFAULT_PORTS.get(new.scheme)
    )
