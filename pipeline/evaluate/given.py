"""The row of a model given to `cpipe evaluate --model`: a hub name names its row, a directory its name, and a
run's train dataset (<artifacts>/train/<fingerprint>) the run's name, the row its pipeline's evaluate stage scored
it under, rather than the fingerprint (its row then says the run's objective: pipeline.evaluate.stage.model_row).

Light on purpose: the command line names the rows before torch is imported."""

from __future__ import annotations

import logging
import os

from pipeline.config_base import unusable_name
from pipeline.errors import InputError
from pipeline.locate import HF_DIR, ST_DIR, is_hub_name
from storage import DatasetError, complete, dataset_parts, list_datasets, read_manifest

log = logging.getLogger("cpipe")
_said: set[str] = set()


def rows(models: list[str]) -> dict[str, str]:
    """{row name: hub name or absolute directory} of `cpipe evaluate --model`'s models, in order. A directory's
    name names its MTEB results' folder, so it must be one usable path component. Directories of one name
    (`v1/encoder`, `v2/encoder`) are told apart by their parents' names (`v1-encoder`, `v2-encoder`), said once;
    one model given twice is refused."""
    located = [(model, model if is_hub_name(model) else the_run(os.path.abspath(model))) for model in models]
    names = [row_name(model) for model in models]
    for model, name in zip(models, names):
        if not is_hub_name(model) and (why := unusable_name(name)):
            raise InputError(f"--model: the directory name {name!r} names its row, and is no usable name: {why}")
    for name in {n for n in names if names.count(n) > 1}:
        at = [i for i, n in enumerate(names) if n == name]
        paths = [located[i][1] for i in at]
        if len(set(paths)) < len(paths) or any(is_hub_name(models[i]) for i in at):
            raise InputError(f"--model: {name!r} is given twice")
        told = _told_apart(paths)
        for i, new in zip(at, told):
            names[i] = new
        said = f"--model: {len(at)} models are named {name!r}; their rows are " + ", ".join(
            f"{n!r} ({p})" for n, p in zip(told, paths)
        )
        if said not in _said:  # the pre-flight and the evaluate flow both name the rows
            _said.add(said)
            log.warning(said)
    if len(set(names)) < len(names):
        raise InputError(f"--model: two models' rows are both named {next(n for n in names if names.count(n) > 1)!r}")
    return {name: where for name, (_, where) in zip(names, located)}


def _told_apart(paths: list[str]) -> list[str]:
    """Each directory's name with as many of its parents' names before it (joined by '-') as tell them apart."""
    parts = [p.rstrip(os.sep).split(os.sep) for p in paths]
    for depth in range(2, max(map(len, parts)) + 1):
        names = ["-".join(p[-depth:]).lstrip("-") for p in parts]
        if len(set(names)) == len(names):
            return names
    raise InputError(f"--model: cannot tell apart {', '.join(paths)}")


def row_name(model: str) -> str:
    if is_hub_name(model):
        return model
    path = the_run(os.path.abspath(model))
    return run_name(path) or os.path.basename(path)


def the_run(path: str) -> str:
    """A run's exported folder (`<train dataset>/sentence-transformers`, the path the docs give, or its `hf/`) is
    the run: its train dataset, so its row is the run's, not a second row named 'sentence-transformers'."""
    parent, folder = os.path.split(path.rstrip(os.sep))
    return parent if folder in (ST_DIR, HF_DIR) and train_manifest(parent) is not None else path


def train_manifest(path: str) -> dict | None:
    """The manifest of the finished train dataset at the local `path` (its config holds a run's `train`
    settings), else None."""
    if is_hub_name(path) or not complete(path):
        return None
    try:
        manifest = read_manifest(path)
    except DatasetError:
        return None
    train = manifest.get("config", {}).get("train") if isinstance(manifest.get("config"), dict) else None
    return manifest if isinstance(train, dict) and "objective" in train else None


def run_name(path: str) -> str | None:
    scored = scored_as(path)
    return scored[0] if scored else None


def trained_about(path: str) -> dict | None:
    """What the row of the train dataset at `path` says of its training (objective, corpus), as its run's row
    said it; the objective from its manifest where no evaluate stage scored it; None for any other model."""
    scored = scored_as(path)
    if scored is not None:
        return {k: scored[1][k] for k in ("objective", "corpus") if scored[1].get(k) is not None}
    manifest = train_manifest(path)
    if manifest is None:
        return None
    train = manifest["config"]["train"]
    return {
        "objective": train["objective"] if train.get("contrastive", True) else f"mlm ({train['objective']} anchors)"
    }


def scored_as(path: str) -> tuple[str, dict] | None:
    """(row name, its `about`) under which the evaluate stage beside the train dataset at `path` scored it (the
    latest, where runs of two names trained the same model: a rename rebuilds nothing), or None: no train
    dataset, or never scored."""
    if train_manifest(path) is None:
        return None
    root, _, fp = dataset_parts(path)
    try:
        datasets = list_datasets(root)
    except DatasetError:
        return None
    found = []
    for d in datasets:
        try:
            manifest = read_manifest(d["url"])
        except DatasetError:  # a damaged dataset elsewhere in the artifacts is no reason to stop here
            continue
        config = manifest.get("config") if isinstance(manifest.get("config"), dict) else {}
        spec = config.get("spec") if isinstance(config.get("spec"), dict) else {}
        # a post-processed row (whitening, flow) is another model made from this one
        if (
            spec.get("kind") == "trained"
            and not spec.get("postprocess")
            and manifest.get("inputs", {}).get("model") == fp
        ):
            found.append((manifest.get("created") or 0, config["model"], config.get("about") or {}))
    return max(found, key=lambda f: f[0])[1:] if found else None
