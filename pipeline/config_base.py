"""What every config section is built on: `Strict` (an unknown key, a bad value or a number that is not finite
fails, assignments too) and `absolute()`. A leaf: each stage package's config module imports it, and
pipeline.config composes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    # validate_default: a default path is made absolute as a written one is (Ray workers run elsewhere).
    # allow_inf_nan: no setting means anything at inf or NaN (train.lr=.inf trained on NaN losses).
    model_config = ConfigDict(extra="forbid", validate_assignment=True, validate_default=True, allow_inf_nan=False)


def absolute(path: str) -> str:
    """Local paths become absolute: Ray workers and served deployments run in other directories."""
    if "://" in path:
        return path
    try:
        return str(Path(path).expanduser().resolve())
    except RuntimeError:  # Python 3.11's resolve() on links that lead back to themselves
        raise ValueError(f"{path} is a symlink loop: its links lead back to themselves") from None


def flat(config: dict, prefix: str = "") -> dict[str, Any]:
    """A nested config as {"section.key": value}; an empty section stays one value."""
    out = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def unusable_name(name: object) -> str | None:
    """Why `name` (a run's, a task's, a model's) cannot be one component of a path, None when it can: it names a
    directory or file under another (MTEB's result files: <results_dir>/<model>/...), where "..", "." or a
    separator would write outside it or into another's place, and a control character makes a name no one can type."""
    if not isinstance(name, str) or not name:
        return "a name must be a non-empty string"
    if name in (".", ".."):
        return "'.' is a folder itself and '..' its parent: a path built from it lands outside its folder"
    if bad := sorted({c for c in name if c in "/\\" or ord(c) < 32 or ord(c) == 127}):
        return f"holds {', '.join(map(repr, bad))}: a name must not hold a path separator or a control character"
    return None
