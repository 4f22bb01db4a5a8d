"""The stages, in the order a run builds them: the one list of stages.

`--until`, the config's stage names and sections, each flow's stages, the pre-flight checks and the package order
of a stage's own package all derive from it. A stage is named here with the module declaring its `STAGE` and its
config section: the key and the model, by their names (pipeline.config composes `Config` of them). The modules
are imported only when first needed, so that the command line can check a stage name before torch, Ray or
Prefect are imported. It is a leaf, importing nothing of the project's, not even for its types: the config, which
stage modules read, imports it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from pydantic import BaseModel


class Line(NamedTuple):
    module: str  # the module declaring the stage's STAGE
    section: str  # its config section's key (the stage's `section`); stages may share one
    model: str  # the section's model, "module.Class"


EVALUATE = "pipeline.evaluate.config.EvaluateConfig"
STAGES = {
    "corpus": Line("pipeline.corpus.stage", "corpus", "pipeline.corpus.config.CorpusConfig"),
    "tokenizer": Line("pipeline.tokenizer.stage", "tokenizer", "pipeline.tokenizer.config.TokenizerConfig"),
    "filter": Line("pipeline.filter.stage", "filter", "pipeline.filter.config.FilterConfig"),
    "decontaminate": Line(
        "pipeline.decontaminate.stage", "decontaminate", "pipeline.decontaminate.config.DecontaminateConfig"
    ),
    "backtranslate": Line(
        "pipeline.backtranslate.stage", "backtranslate", "pipeline.backtranslate.config.BacktranslateConfig"
    ),
    "augment": Line("pipeline.augment.stage", "augment", "pipeline.augment.config.AugmentConfig"),
    "init": Line("pipeline.init.stage", "model", "pipeline.init.config.ModelConfig"),
    "train": Line("pipeline.train.stage", "train", "pipeline.train.config.TrainConfig"),
    "baseline": Line("pipeline.baselines.fasttext.stage", "evaluate", EVALUATE),
    "infersent": Line("pipeline.baselines.infersent.stage", "evaluate", EVALUATE),
    "evaluate": Line("pipeline.evaluate.stage", "evaluate", EVALUATE),
    "leaderboard": Line("pipeline.leaderboard.stage", "evaluate", EVALUATE),
}
NAMES = tuple(STAGES)


def stage(name: str) -> Any:
    """The stage's pipeline.stage.Stage."""
    return importlib.import_module(STAGES[name].module).STAGE


def sections() -> dict[str, type[BaseModel]]:
    """{key: model} of the stages' config sections, in the stages' order, each once."""
    out: dict[str, type[BaseModel]] = {}
    for name, line in STAGES.items():
        module, _, cls = line.model.rpartition(".")
        model = getattr(importlib.import_module(module), cls)
        if out.setdefault(line.section, model) is not model:
            raise ValueError(f"stage {name}: section {line.section!r} is a {out[line.section].__name__} already")
    return out


def stages(first: str = NAMES[0], last: str = NAMES[-1]) -> list[Any]:
    """The stages from `first` to `last`, both included, in order."""
    return [stage(name) for name in NAMES[NAMES.index(first) : NAMES.index(last) + 1]]


def in_flow(flow: str) -> list[Any]:
    return [s for s in stages() if s.flow == flow]
