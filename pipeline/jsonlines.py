"""JSON Lines as every reader of users' files here reads them: blank lines skipped, and a line that is not a
JSON object an error naming the file and line."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

from pipeline.errors import InputError


def json_objects(lines: Iterable[str], path, error: type[InputError] = InputError) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line; `error` (the caller's InputError) for a bad one."""
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise error(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
        if not isinstance(record, dict):
            raise error(f"{path}:{lineno}: expected an object, got {line.strip()[:40]}")
        yield lineno, record
