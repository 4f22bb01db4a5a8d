"""Reporting runs to an experiment tracker, from the stages' artifacts: `config` (the `tracking` section) and
`mlflow_report` (each training run an MLflow run: its recipe, curves, then its leaderboard scores and model card).

A reporter reads finished datasets, so a reused stage is reported as a built one is, and it runs after a stage,
never inside the training loop. Nothing here imports MLflow until a report is made."""
