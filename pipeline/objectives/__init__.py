"""The training objectives: the one list of them.

An objective is named here with the module declaring its `OBJECTIVE` (pipeline.objectives.base.Objective), which
is imported by name: the augment section (pipeline.augment.config) imports every one as the config is imported,
to take in their settings. Adding an objective is its module and one line here (and a loss in
pipeline.train.losses only when new). Beside the objectives: `pairs`, the row every objective writes, the loop
that writes them and the sentence objectives' settings; `spans`, DeCLUTR's span sampler; `clear_operations` (and
`clear_names`), CLEAR's sentence augmentations and hyperparameters; `prepare`, their per-document work spread
over `parallel.backend`. This module is a leaf: the config modules import it, so it imports nothing of the
project's (the declarations come by name).
"""

from __future__ import annotations

import importlib

MODULES = {
    "declutr": "pipeline.objectives.declutr",
    "cert": "pipeline.objectives.cert",
    "simcse": "pipeline.objectives.simcse",
    "clear": "pipeline.objectives.clear",
    "tsdae": "pipeline.objectives.tsdae",
    "simcse-sup": "pipeline.objectives.simcse_sup",
}


def names() -> tuple[str, ...]:
    """The objectives' names, in the registry's order (read when called: a test may register one)."""
    return tuple(MODULES)


def objective(name: str):
    """The `Objective` declared by `name`'s module (a KeyError for a name not registered)."""
    return importlib.import_module(MODULES[name]).OBJECTIVE
