"""README.md is a front page and the manual is docs/: every relative link in them leads somewhere that exists
(a file, and a heading of it where the link names one), and the README stays short enough to be read whole."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 160

FENCE = re.compile(r"^(```|~~~)")
LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)\)")
INLINE_CODE = re.compile(r"`[^`]*`")


def prose(path: Path) -> list[str]:
    """The file's lines outside fenced code blocks (a link or heading in a code sample is no link or heading)."""
    out, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
        elif not fenced:
            out.append(line)
    return out


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation other than '-' and '_' removed, spaces '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading anchors by its text
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in prose(path):
        if m := re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line):
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")  # GitHub numbers repeated headings
    return out


def links(path: Path) -> list[str]:
    return [m.group(1) for line in prose(path) for m in LINK.finditer(INLINE_CODE.sub("", line))]


def shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def broken(path: Path) -> list[str]:
    """Each relative link of `path` whose file or heading does not exist, with what is wrong."""
    out = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...: not ours to check
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            out.append(f"{target}: no file {shown(dest)}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            out.append(f"{target}: no heading #{anchor} in {shown(dest)}")
    return out


def test_the_manual_is_there():
    names = {p.name for p in DOCS}
    assert {"objectives.md", "evaluation.md", "operations.md", "contributing.md"} <= names, names


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(doc):
    assert links(doc) or doc.name != "README.md", "the README links into the manual"
    assert broken(doc) == []


def test_the_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < README_MAX_LINES, f"README.md has {len(lines)} lines: move the detail into docs/"
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in links(ROOT / "README.md") if not t.startswith("#")}
    assert all(p.resolve() in linked for p in DOCS[1:]), "every document of docs/ is linked from the README"


def test_the_link_check_finds_a_missing_file_and_a_missing_heading(tmp_path):
    """The checker itself: a link to a file or heading that is not there is reported; a code sample is not."""
    (tmp_path / "other.md").write_text("# Other\n\n## Some `code`, and more\n")
    doc = tmp_path / "doc.md"
    doc.write_text(
        "# Doc\n\n[ok](other.md#some-code-and-more) [ok](#doc) [web](https://example.com/x)\n"
        "[gone](missing.md) [no heading](other.md#nowhere)\n\n```\n[in code](nowhere.md)\n```\n"
    )
    found = [b.split(":")[0] for b in broken(doc)]
    assert found == ["missing.md", "other.md#nowhere"]
