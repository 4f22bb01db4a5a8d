"""The leaderboard stage: every model's scores in one table, for this run and across runs.

`stage` is the stage (the run's table and the cumulative one, and the model cards' scores); `table`
builds and writes a table (Markdown, CSV, Parquet, PNG) from score rows, its Markdown's notes from `notes` and its
PNG from `figure`, the columns all three read in `columns`; `bootstrap` and `intervals` give each
score its interval and each row its paired difference to the reference row (`readouts`: read the way the row is),
`seeds` makes one row of a run's repeats, `kept_items` keeps the test items behind `leaderboard-all`.
"""
