"""The JSON Lines reader every user-file reader shares: line numbers count blank lines, errors name file and line."""

import pytest

from pipeline.errors import InputError
from pipeline.jsonlines import json_objects


class ReaderError(InputError):
    pass


def test_objects_come_with_their_line_numbers_blank_lines_counted_and_skipped():
    lines = ['{"a": 1}\n', "\n", "   \n", '{"b": [2]}\n']
    assert list(json_objects(lines, "f.jsonl")) == [(1, {"a": 1}), (4, {"b": [2]})]


@pytest.mark.parametrize(
    "lines, message",
    [
        (['{"a": 1}\n', "\n", '{"a": \n'], r"^f\.jsonl:3: not valid JSON \("),
        (['{"a": 1}\n', '["a", "b"]\n'], r'^f\.jsonl:2: expected an object, got \["a", "b"\]$'),
        (["3\n"], r"^f\.jsonl:1: expected an object, got 3$"),
    ],
)
def test_a_bad_line_raises_the_callers_error_naming_file_and_line(lines, message):
    with pytest.raises(ReaderError, match=message):
        list(json_objects(lines, "f.jsonl", ReaderError))
