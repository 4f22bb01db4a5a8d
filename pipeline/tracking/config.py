"""The `tracking` section: where, if anywhere, runs are also reported (pipeline.tracking.mlflow_report).

Tracking is no stage's: it is in no fingerprint, and turning it on or off rebuilds nothing."""

from __future__ import annotations

import importlib.util
import urllib.parse
from pathlib import Path

from pydantic import Field, field_validator, model_validator

from pipeline.config_base import Strict, absolute

# MLflow's own tracking stores (its registry's schemes); each database one needs its driver installed.
SCHEMES = ("sqlite", "http", "https", "postgresql", "mysql", "mssql", "databricks")
KEY = "tracking.mlflow.uri"


class MlflowConfig(Strict):
    uri: str = Field(
        description="MLflow tracking store: sqlite:///path/mlflow.db (a local file; relative to where "
        "the run starts), or a tracking server's http(s):// URL"
    )
    experiment: str = Field("contrastive-pipeline", min_length=1, description="the MLflow experiment runs go to")

    @field_validator("uri")
    @classmethod
    def _store(cls, v: str) -> str:
        if importlib.util.find_spec("mlflow") is None:  # found now, not after hours of training
            raise ValueError("MLflow is not installed here: pip install 'contrastive-pipeline[mlflow]' (mlflow-skinny)")
        if v == "databricks":  # the Databricks workspace of the environment's profile
            return v
        scheme = v.split("://", 1)[0].split("+", 1)[0].lower() if "://" in v else ""
        if not scheme:
            raise ValueError(
                f"{v!r} is a path, which MLflow 3 opens as its file store only when told to "
                f"(MLFLOW_ALLOW_FILE_STORE): write sqlite:///{v.rstrip('/') or 'mlflow.db'}"
                f"{'' if v.endswith('.db') else '/mlflow.db'} for a local store"
            )
        if scheme not in SCHEMES:
            raise ValueError(f"{v!r}: MLflow has no tracking store for {scheme}:// (it has {', '.join(SCHEMES)})")
        parts = urllib.parse.urlsplit(v)
        if parts.username or parts.password:  # the config reaches logs and Prefect's stored parameters
            raise ValueError(
                "holds credentials: set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or "
                "MLFLOW_TRACKING_TOKEN) in the environment instead, as MLflow reads them"
            )
        if scheme == "sqlite":
            return _sqlite(v)
        if scheme in ("http", "https") and not parts.hostname:
            raise ValueError(f"{v!r} names no host")
        return v


def _sqlite(uri: str) -> str:
    """A sqlite store's file made absolute, as artifacts are: served deployments run in other directories."""
    path = uri.split("://", 1)[1]
    if not path.startswith("/") or path == "/" or path.endswith("/"):  # sqlite:// alone is an in-memory store
        raise ValueError(f"{uri!r} names no database file: write sqlite:///path/to/mlflow.db")
    file = absolute(path[1:])  # sqlite:///rel.db is relative, sqlite:////abs.db absolute
    if Path(file).is_dir():
        raise ValueError(f"{uri!r}: {file} is a directory; name a database file in it (.../mlflow.db)")
    return f"sqlite:///{file}"


class TrackingConfig(Strict):
    mlflow: MlflowConfig | None = Field(
        None, description="report every training run and its leaderboard scores to MLflow; null: off"
    )

    @model_validator(mode="before")
    @classmethod
    def _null_is_off(cls, data):
        return {} if data is None else data  # `tracking:` left empty in a profile, or --set tracking=null
