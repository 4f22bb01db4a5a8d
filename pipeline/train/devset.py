"""Dev-set model selection (train.eval_every), as SimCSE's scripts select with the HF Trainer's
load_best_model_at_end: every evaluation scores the current model by the Spearman correlation of cosine
similarity with the dev set's gold scores, and the run exports its best-scoring checkpoint.

The dev set is an STS-B-format file (SentEval's sts-dev.csv by default), read with the evaluation's reader
and scored with its cosine protocol (pipeline.evaluate.sts), the same sentences tokenised and pooled as the
evaluation's encoder does (pipeline.model.exported). A test split is never a dev set: selecting on it would
leak the test set into the scores the leaderboard reports (pipeline.train.splits.why_test_split: the config
refuses one by its name; refuse_test_copy, by its content).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.errors import ConfigError
from pipeline.evaluate.sts import score_sts
from pipeline.readers.sts import StsSubset, data_hash, find_file, read_stsb_split, same_pair, scored_splits

if TYPE_CHECKING:
    from pipeline.train.config import TrainConfig

DEFAULT_DEV = "sts-dev.csv"
# The share of a dev set's pairs that one test file may hold before the dev set counts as a copy of it.
SHARED_LIMIT = 0.5
SELECTED = "selected at step"  # the leaderboard's recipe column says so of a dev-selected run


def find_dev(dev_set: str | None, eval_data: str | None) -> Path:
    """The dev file a run selects on: `dev_set`, else sts-dev.csv under the evaluation data; never a copy of a
    test split the evaluation scores."""
    if dev_set is not None:
        if not Path(dev_set).is_file():
            raise ConfigError(f"train.dev_set: {dev_set} is not a file")
        found = Path(dev_set)
    else:
        found = find_file(Path(eval_data), DEFAULT_DEV) if eval_data and Path(eval_data).is_dir() else None
    if found is None:
        where = f"under evaluate.data ({eval_data})" if eval_data else "(evaluate.data is not set)"
        raise ConfigError(
            f"train.eval_every needs a dev set: set train.dev_set, or put {DEFAULT_DEV} "
            f"(STS-B dev, SentEval's layout) {where}; looked for {DEFAULT_DEV} {where}"
        )
    refuse_test_copy(found, eval_data)
    return found


def refuse_test_copy(path: Path, eval_data: str | None) -> None:
    """A test split renamed passes the check by name (pipeline.train.splits), so the dev pairs are compared
    with every test file the evaluation scores. STS-B's dev shares some pairs with STS12's test files (it was
    drawn from the same SemEval data): 9.0% with MSRvid's, 8.1% with MSRpar's, 0.2% with STS-B's test (1500
    pairs), far below SHARED_LIMIT."""
    scored = scored_splits(eval_data)
    if not scored:
        return
    dev = read_dev(path)
    pairs = [same_pair(a, b) for a, b in zip(dev.sent1, dev.sent2)]
    for test in (s for s in scored if pairs):
        held = {same_pair(a, b) for a, b in zip(test.sent1, test.sent2)}
        shared = sum(p in held for p in pairs) / len(pairs)
        if shared >= SHARED_LIMIT:
            raise ConfigError(
                f"dev set {path}: {shared:.0%} of its {len(pairs)} pairs are in the test split "
                f"{test.task} {test.name} of {eval_data}; a test split is never a dev set"
            )


def read_dev(path: str | Path) -> StsSubset:
    return read_stsb_split(Path(path), "dev")


def stage_config(train: TrainConfig, eval_data: str | None, max_length: int) -> dict | None:
    """What the train stage's config holds of the dev set, None without eval_every: the file, its content's
    hash (so an edited dev set retrains; its path alone would not) and the evaluation's max_length, which
    its sentences are truncated to as the evaluation truncates them."""
    if train.eval_every is None:
        return None
    path = find_dev(train.dev_set, eval_data)
    return {"file": str(path.resolve()), "hash": data_hash([read_dev(path)]), "max_length": max_length}


def dev_spearman(encode, dev: StsSubset) -> float:
    """The evaluation's STS-B "cosine" score of `encode` on the dev pairs (pipeline.evaluate.sts)."""
    [row] = [r for r in score_sts(encode, [dev]) if r["metric"] == "spearman"]
    return row["value"]


def selected(manifest: dict) -> str | None:
    """What the leaderboard says of a dev-selected train run: "selected at step 600 of 1000 by heldout-loss
    1.234" (pipeline.train.selection.label); a run trained before select_by by its dev Spearman."""
    if manifest.get("best_step") is None:
        return None
    by = manifest.get("selected_by") or f"sts-dev Spearman {manifest['best_dev_spearman']:.3f}"
    return f"{SELECTED} {manifest['best_step']} of {manifest['steps']} by {by}"
