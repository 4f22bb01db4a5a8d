"""What an objective declares (`Objective`): one module per objective ends in `OBJECTIVE = Objective(...)`.

The config validates a run by its objective's declaration, the augment stage makes its pairs by it, the train
stage reads the columns and builds the modules it asks for, and the model card names it by its title; none of
them branches on an objective's name. A declaring module keeps its top level light (the config imports it
before any stage runs): what its pairs need (tokenizers, sacremoses, torch) is imported where they are made.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

from pipeline.config_base import Strict
from pipeline.parallel import Spread

if TYPE_CHECKING:
    from pipeline.config import Config
    from pipeline.train.config import TrainConfig


def _fits(*args: Any) -> str | None:
    return None


def _reads_nothing(cfg: Config) -> dict[str, list[str]]:
    return {}


class Settings(Strict):
    """An objective's own settings: keys of the `augment` section (`augment.tsdae_deletion`, `augment.clear`),
    declared on a subclass in its module (`Objective.settings`). The augment section extends every registered
    objective's (pipeline.augment.config), so a profile writes and the config validates them as its other keys.
    A setting two objectives share is declared once, on a class both extend (pipeline.objectives.pairs'
    `SentenceSettings`)."""

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> Self:
        """These settings, typed, from the augment stage's config (the dict its fingerprint hashes)."""
        return cls.model_validate({k: config[k] for k in cls.model_fields})


class PairsSettings(Spread):
    """The augment stage's config as an objective's `pairs` reads it (beside its own `Settings`): the keys the stage
    writes for every objective, those it writes only sometimes None where it did not (pipeline.augment.stage)."""

    objective: str
    epochs: int
    seed: int
    rows_per_shard: int
    version: str | None = None  # the objective's own version of its pairs, where it declares one
    sampling: str | None = None  # "spread": a sentence cap draws over the whole corpus
    files: dict[str, Any] | None = None  # what it reads from files, with their snapshot
    heldout_fraction: float | None = None
    augmentation: str | None = None  # the run's views (CLEAR's combination)


@dataclass(frozen=True)
class Objective:
    """- `name`: train.objective's value, and its pairs' `objective` column;
    - `title`: how it makes its pairs, as its paper does (the model card's objective row);
    - `defaults`: its paper's recipe (train settings a run or the train section may override): the loss, the
      head its loss sees (dropped at export unless keep_head), pooling, MLM, temperature, learning rate, batch
      size, max length, weight decay, optimizer and schedule; a key left out takes TrainConfig's default;
    - `inputs`: {input name: the stage whose dataset its pairs are made from}; `settings`: its own `augment`
      settings (a `Settings` subclass; none by default): beside augment's epochs, seed and rows_per_shard, only
      these are in its pairs' fingerprint; `pairs(stage, settings, inputs, tokenizer, out)` writes them from the
      stage's `PairsSettings` and its own settings, typed; `files(cfg)`, where it reads files rather than datasets, names them with their
      snapshot (in its pairs' fingerprint); `reads(cfg)`: the files the config names for it to read, by their key
      ({"augment.simcse_sup.nli": [...]}), which the pre-flight finds readable before any work; `version`: its
      pairs' own version, where they changed (rebuilds its pairs only);
    - `views`: the default of train.augmentation where a run picks its pairs' views (CLEAR's), else None;
    - `hard_negatives`: its pairs carry a hard negative per anchor (negative_ids), which the contrastive loss reads;
    - `mlm_on_originals`: its MLM term reads the pairs' original sentences (original_ids), not the anchors;
    - `decoder(mlm_model, run)`: a training-only module its loss needs (TSDAE's), never exported; such an
      objective trains the `denoising` loss, and that loss only such an objective;
    - `check(run)`: what is wrong with a run of it within the train section, or None;
      `check_config(cfg, run)`: what is wrong with it across sections (the augment, backtranslate ones), or None.
    """

    name: str
    title: str
    defaults: Mapping[str, Any]
    inputs: Mapping[str, str]
    pairs: Callable[[PairsSettings, Any, dict, Any, Any], None]
    settings: type[Settings] = Settings
    files: Callable[[Config], dict] | None = None
    reads: Callable[[Config], dict[str, list[str]]] = _reads_nothing
    version: str | None = None
    views: str | None = None
    hard_negatives: bool = False
    mlm_on_originals: bool = False
    decoder: Callable[[Any, TrainConfig], Any] | None = None
    check: Callable[[TrainConfig], str | None] = _fits
    check_config: Callable[[Config, TrainConfig], str | None] = _fits

    def columns(self, contrastive: bool, mlm: bool) -> list[str]:
        """The pair columns a step reads: the anchors; their positives for the contrastive loss, with the hard
        negatives where there are; the original sentences where MLM reads them."""
        return [
            "anchor_ids",
            *(["positive_ids"] if contrastive else []),
            *(["negative_ids"] if contrastive and self.hard_negatives else []),
            *(["original_ids"] if mlm and self.mlm_on_originals else []),
        ]
