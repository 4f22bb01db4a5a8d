"""Which files are test splits, and so never a dev set (train.dev_set): a leaf, importing nothing of this
project's, so that the config checks a dev set by the rule dev-set selection applies (pipeline.train.devset)."""

from __future__ import annotations

import re
from pathlib import Path

# STS12-16 are test sets only (SentEval's STS1x-en-test directories hold STS.input.*/STS.gs.* files).
_STS_YEAR_FILE = re.compile(r"^STS\.(input|gs)\..+\.txt$")
_STS_YEAR_DIR = re.compile(r"^STS1[2-6]-en-test$")


def why_test_split(path: str | Path) -> str | None:
    """Why `path` is a test split (and so no dev set), or None."""
    path = Path(path)
    if _STS_YEAR_FILE.match(path.name) or any(_STS_YEAR_DIR.match(p) for p in path.parts):
        return "STS12-16 are test sets"
    if "test" in path.name.lower():
        return "its name says it is a test split"
    return None
