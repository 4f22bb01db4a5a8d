"""What every config section is built on: `Strict` (an unknown key or a bad value fails, assignments too) and
`absolute()`. A leaf: each stage package's config module imports it, and pipeline.config composes them."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    # validate_default: a default path is made absolute as a written one is (Ray workers run elsewhere).
    model_config = ConfigDict(extra="forbid", validate_assignment=True, validate_default=True)


def absolute(path: str) -> str:
    """Local paths become absolute: Ray workers and served deployments run in other directories."""
    return path if "://" in path else str(Path(path).expanduser().resolve())
