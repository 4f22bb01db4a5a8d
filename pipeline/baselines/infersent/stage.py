"""infersent stage: an InferSent encoder (pipeline.baselines.infersent.model) trained on NLI pairs, exported for the evaluate stage.

Its word vectors are a vectors file, or the corpus's fastText vectors (the baseline stage's model, input
"vectors"). The stage config names the NLI files by split, with a snapshot of them, so an edited file is
trained on again.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any, Literal

from pipeline.baselines.fasttext.bow import MODEL_FILE
from pipeline.baselines.infersent import model as infersent
from pipeline.config_base import Strict
from pipeline.file_snapshot import snapshot
from pipeline.readers import nli
from pipeline.repeats import label
from pipeline.stage import Stage

if TYPE_CHECKING:
    from pipeline.config import Config
    from storage import DatasetWriter

TRAINING = tuple(infersent.Settings.__dataclass_fields__)
log = logging.getLogger("cpipe")


class InferSentSettings(Strict):
    """The infersent stage's config: evaluate.baselines.infersent's settings, those of training (TRAINING) seeded
    for the repeat, with its NLI files found, by split, and a snapshot of them and of the vectors file."""

    nli: dict[Literal["train", "dev"], list[str]]
    vectors: str | None
    vocab_size: int | None
    max_pairs: int | None
    hidden: int
    fc_dim: int
    batch_size: int
    lr: float
    decay: float
    shrink: float
    min_lr: float
    max_norm: float
    epochs: int
    seed: int
    snapshot: dict[str, Any]


def _nli(cfg: Config) -> dict[str, list[str]] | None:
    settings = cfg.evaluate.baselines.infersent
    return nli.nli_files(settings.nli, cfg.evaluate.data) if settings.enabled else None


def infersent_label(seed: int) -> str:
    return label("infersent", seed)


def instances(cfg: Config, done: dict[str, str]) -> dict[str, int]:
    """Built when enabled and there is NLI data to train on, once per seed of the trained baselines."""
    if not cfg.evaluate.baselines.infersent.enabled:
        return {}
    if _nli(cfg) is None:
        log.warning(
            "infersent: no NLI data (no SICK_train.txt and SICK_trial.txt under evaluate.data, no "
            "evaluate.baselines.infersent.nli): row left out"
        )
        return {}
    return {infersent_label(s): s for s in cfg.baseline_seeds()}


def reads_corpus_vectors(cfg: Config) -> bool:
    """Whether the InferSent row's word vectors are the corpus's fastText ones (the baseline stage's)."""
    return _nli(cfg) is not None and not cfg.evaluate.baselines.infersent.vectors


def config(cfg: Config, key: int | None = None) -> dict:
    """From the evaluate.baselines.infersent settings and the NLI files found; the repeat with seed `key` is seeded
    infersent.seed + key."""
    section, files = cfg.evaluate.baselines.infersent, _nli(cfg)
    watched = [*files["train"], *files["dev"], *([section.vectors] if section.vectors else [])]
    return {
        "nli": files,
        **section.model_dump(include={"vectors", "vocab_size", "max_pairs", *TRAINING}),
        "seed": section.seed + (key or 0),
        "snapshot": {path: snapshot(path) for path in watched},
    }


def inputs(cfg: Config, done: dict[str, str], key: int | None = None) -> dict[str, str]:
    """The corpus's fastText vectors of the same seed, where they are the word vectors."""
    return {"vectors": done[label("baseline", key or 0)]} if reads_corpus_vectors(cfg) else {}


def about(settings: InferSentSettings) -> dict:
    """What the leaderboard says of the row."""
    names = [os.path.basename(p) for p in settings.nli["train"]]
    data = "SICK-E train" if names == ["SICK_train.txt"] else ", ".join(names)
    vectors = os.path.basename(settings.vectors) if settings.vectors else "corpus fastText"
    return {
        "objective": f"InferSent (NLI: {data})",
        "recipe": f"BiLSTM-max {settings.hidden}x2, linear classifier {settings.fc_dim}, "
        f"SGD lr {settings.lr:g} batch {settings.batch_size}, <= {settings.epochs} epochs "
        f"dev-selected, vectors: {vectors}",
    }


def _read(files: list[str], limit: int | None = None) -> nli.NliPairs:
    pairs = sum((nli.read_nli(f) for f in files[1:]), nli.read_nli(files[0]))
    if limit is None:
        return pairs
    return nli.NliPairs(pairs.premise[:limit], pairs.hypothesis[:limit], pairs.labels[:limit], pairs.dropped)


def run(settings: InferSentSettings, inputs: dict[str, str], out: DatasetWriter) -> None:
    files = settings.nli
    train_pairs, dev_pairs = _read(files["train"], settings.max_pairs), _read(files["dev"])
    if settings.vectors:
        needed = {
            w
            for p in (train_pairs, dev_pairs)
            for s in p.premise + p.hypothesis
            for w in infersent.tokens(s, lowercase=False)
        }
        vectors = infersent.file_vectors(settings.vectors, settings.vocab_size, needed)
    else:
        vectors = infersent.corpus_vectors(f"{inputs['vectors']}/{MODEL_FILE}", settings.vocab_size)
    vocab = infersent.Vocabulary(vectors.words, vectors.lowercase)
    (train_data, empty_train), (dev_data, empty_dev) = (
        infersent.encode_pairs(p, vocab) for p in (train_pairs, dev_pairs)
    )
    if not train_data[2] or not dev_data[2]:
        raise nli.NliDataError(
            f"{', '.join(files['train'] + files['dev'])}: no pair left whose two sentences have a word with a vector"
        )
    training = infersent.Settings(**settings.model_dump(include=set(TRAINING)))
    encoder, history = infersent.train(train_data, dev_data, vectors.matrix, training)
    infersent.export(encoder, vectors, out.local_dir)
    out.count("train_pairs", len(train_data[2]))
    out.count("dev_pairs", len(dev_data[2]))
    out.count("dropped_no_gold_label", train_pairs.dropped + dev_pairs.dropped)
    out.count("dropped_no_known_word", empty_train + empty_dev)
    out.extra["vocabulary"] = len(vectors.words)
    out.extra["epochs"] = history
    out.extra["dev_accuracy"] = max(h["dev_accuracy"] for h in history)
    log.info("infersent: dev accuracy %.3f after %d epochs", out.extra["dev_accuracy"], len(history))


# 2: train_nli.py's defaults: the linear classifier (nonlinear_fc 0), 20 epochs, zero padding in the max-pool.
STAGE = Stage(
    name="infersent",
    version="2",
    flow="evaluate",
    section="evaluate",
    settings=InferSentSettings,
    config=config,
    inputs=inputs,
    instances=instances,
    run=run,
)
