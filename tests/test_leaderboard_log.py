"""What the run's log says of its leaderboard (tasks.build.ranking): a line a row, where the whole Markdown table was
logged, rows of a thousand characters and more in a log file."""

from __future__ import annotations

import math

import pandas as pd

from tasks.build import ranking


def test_each_row_is_a_line_with_its_score_and_interval_in_the_column_it_is_ranked_by():
    table = pd.DataFrame(
        {
            "model": ["declutr (seed 0)", "random", "fasttext-bow"],
            "recipe": ["x" * 2000, "", ""],  # a wide column stays out of the log
            "STSB cosine": [41.2, 30.0, math.nan],
            "STSB cosine lo": [38.5, math.nan, math.nan],
            "STSB cosine hi": [44.0, math.nan, math.nan],
        }
    )
    assert ranking(table, "STSB cosine").splitlines() == [
        "leaderboard, by STSB cosine:",
        "  declutr (seed 0) 41.20 [38.50, 44.00]",
        "  random 30.00",
        "  fasttext-bow —",
    ]
    assert ranking(table.drop(columns=["STSB cosine", "STSB cosine lo", "STSB cosine hi"]), None) == (
        "leaderboard: declutr (seed 0), random, fasttext-bow (no scores)"
    )
