"""The leaderboard stage: every model's scores in one table, for this run and across runs.

`stage` is the stage (the run's table and the cumulative one, and the model cards' scores); `table`
builds and writes a table (Markdown, CSV, Parquet, PNG) from score rows.
"""
