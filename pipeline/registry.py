"""The stages, in the order a run builds them: the one list of stages.

`--until`, the config's stage names, each flow's stages and the pre-flight checks all derive from it. A stage is
named here with the module declaring its `STAGE`, which is imported only when the stage is first needed, so
that the command line can check a stage name before torch, Ray or Prefect are imported.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipeline.stage import Stage

MODULES = {
    "corpus": "pipeline.corpus.stage",
    "tokenizer": "pipeline.tokenizer.stage",
    "filter": "pipeline.filter.stage",
    "decontaminate": "pipeline.decontaminate.stage",
    "backtranslate": "pipeline.backtranslate.stage",
    "augment": "pipeline.augment.stage",
    "init": "pipeline.init.stage",
    "train": "pipeline.train.stage",
    "baseline": "pipeline.baselines.fasttext.stage",
    "infersent": "pipeline.baselines.infersent.stage",
    "evaluate": "pipeline.evaluate.stage",
    "leaderboard": "pipeline.leaderboard.stage",
}
NAMES = tuple(MODULES)


def stage(name: str) -> Stage:
    return importlib.import_module(MODULES[name]).STAGE


def stages(first: str = NAMES[0], last: str = NAMES[-1]) -> list[Stage]:
    """The stages from `first` to `last`, both included, in order."""
    return [stage(name) for name in NAMES[NAMES.index(first) : NAMES.index(last) + 1]]


def in_flow(flow: str) -> list[Stage]:
    return [s for s in stages() if s.flow == flow]
