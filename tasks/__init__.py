"""Prefect tasks over pipeline/ stages: each stage a task whose state says reused or built, logs, artifacts."""

import os

# The pipeline logs to the stdlib logger "cpipe"; Prefect forwards it to the run's logs
# only when told before prefect is first imported.
os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "cpipe")
# Outside a flow run (a notebook, a test, a Ray worker) the pipeline's logs stay local, without a warning each.
os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
# A bare ray.init() that starts Ray (a notebook's, a test's) would otherwise turn token authentication on and
# write a token to ~/.ray for good. The instance a run starts has a token of its own (pipeline.ray_session); a
# cluster's mode is its operator's, which the user sets in the environment (docs/operations.md).
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
# Telemetry writes race with the run's own writes on the embedded SQLite database ("database is locked").
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# The embedded server starts with the run; on a loaded machine, or beside another run starting on the same
# database, it takes longer than Prefect's 20 s default, and the run would fail before any work.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
