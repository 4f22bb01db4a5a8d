"""The augment stage's settings (`augment:`): what every objective's pairs share (`SharedSettings`), and each
registered objective's own settings, declared in its module (`Objective.settings`: CLEAR's `clear`, supervised
SimCSE's `simcse_sup`, TSDAE's `tsdae_deletion`, DeCLUTR's spans), which `AugmentConfig` extends under the same
keys: a new objective's settings are validated, as `augment.<key>`, with nothing written here."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, Field

from pipeline import objectives
from pipeline.config_base import Strict
from pipeline.repeats import Seed


class SharedSettings(Strict):
    """What every objective's pairs share."""

    epochs: int = Field(1, ge=1)
    heldout_fraction: float = Field(
        0.0,
        ge=0,
        lt=1,
        description=(
            "share of the documents (by a hash of doc_id: the same whatever the seed or epoch) never trained on, "
            "whose first epoch's pairs score train.select_by: heldout-loss; 0 = none held out (every document "
            "trains, as the papers train)"
        ),
    )
    seed: Seed = 0
    rows_per_shard: int = Field(50_000, ge=1)


def _declared_by(model: type[BaseModel], key: str) -> type:
    """The class of `model`'s hierarchy that declares `key`."""
    return next(c for c in model.__mro__ if key in vars(c).get("__annotations__", {}))


def settings_bases(models: Iterable[type[BaseModel]]) -> tuple[type[BaseModel], ...]:
    """The objectives' settings models (in the registry's order) as the augment section's bases, the shared
    settings last: each model once, and none that another extends (its keys come with that one, and listing both
    would make no consistent method order). Bases are given last first, so that the section's keys come in the
    registry's order, after the shared ones. A key declared twice, by two objectives or by one and the shared
    settings, is refused: objectives that share a setting declare it once, on a class they both extend."""
    given = list(dict.fromkeys(models))
    kept = [m for m in given if not any(o is not m and issubclass(o, m) for o in given)]
    owners: dict[str, type] = {key: SharedSettings for key in SharedSettings.model_fields}
    for model in kept:
        for key in model.model_fields:
            owner = owners.setdefault(key, _declared_by(model, key))
            if owner is not _declared_by(model, key):
                raise TypeError(
                    f"augment.{key} is declared twice, by {owner.__module__}.{owner.__qualname__} and "
                    f"{model.__module__}.{model.__qualname__}: objectives that share a setting declare it once, on a "
                    "class they both extend"
                )
    return (*reversed(kept), SharedSettings)


class AugmentConfig(*settings_bases(objectives.objective(name).settings for name in objectives.names())):
    """Pairs for every objective the runs use: the shared settings, and each registered objective's own."""
