"""One contract for every stage: `run(config, inputs, out)` writes one dataset.

A stage module exposes
- NAME, VERSION (bump it when the output would change), SCHEMA (None for stages that write files, such as models);
- RUNTIME: the settings that change how the dataset is built, not what it holds, with their defaults; a config
  keeps them under "runtime", which the fingerprint leaves out, and the stage reads them with `runtime()`;
- `config(cfg, *key) -> dict`: the stage's config from the whole Config (`key` names one of a per-run stage's
  instances: an objective's pairs, a run, a scored model);
- `inputs(done, cfg, *key) -> dict[str, str]`: its input datasets, from the paths of the stages done so far;
- `instances(cfg, done) -> dict[label, key]`, per-run stages only: the instances to build, in order;
- `needs_ray(config) -> bool`, stages that can run on Ray only: whether building this config does;
- `run(config, inputs, out)`.
A config may set `rows_per_shard` and `shard_mb` (default 256) to size the shards. The runner fingerprints the
stage, reuses a finished dataset, and otherwise writes it atomically. Stats go into the manifest through
`out.count(...)`.
"""

from __future__ import annotations

import logging
from types import ModuleType
from typing import Any

from pipeline.errors import InputError
from storage import DatasetWriter, complete, dataset_path, fingerprint, leased, remove_temporaries

log = logging.getLogger("cpipe")


def split_runtime(declared: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """A stage config from flat settings: the declared runtime keys move under "runtime"."""
    return {**{k: v for k, v in settings.items() if k not in declared},
            "runtime": {k: v for k, v in settings.items() if k in declared}}


def runtime(config: dict[str, Any], declared: dict[str, Any]) -> dict[str, Any]:
    """The config's runtime settings over the stage's declared defaults (a config written by hand may have none)."""
    given = config.get("runtime", {})
    if unknown := sorted(set(given) - set(declared)):
        raise InputError(f"unknown runtime setting(s) {', '.join(unknown)} (this stage has: "
                         f"{', '.join(declared) or 'none'})")
    return {**declared, **given}


def needs_ray(stage: ModuleType, config: dict[str, Any]) -> bool:
    return hasattr(stage, "needs_ray") and stage.needs_ray(config)


def instances(stage: ModuleType, cfg, done: dict[str, str]) -> dict[str, tuple]:
    """label -> key of every instance of the stage to build: one, labelled by the stage's name, unless per-run."""
    return stage.instances(cfg, done) if hasattr(stage, "instances") else {stage.NAME: ()}


def input_fingerprints(inputs: dict[str, str]) -> dict[str, str]:
    """A dataset path ends in its fingerprint, so inputs are identified by their paths' last part."""
    return {name: path.rstrip("/").rsplit("/", 1)[-1] for name, path in inputs.items()}


def stage_fingerprint(stage: ModuleType, config: dict[str, Any], inputs: dict[str, str]) -> str:
    # "runtime" settings (how many workers, which backend) change how a dataset is built, not what it holds.
    content = {k: v for k, v in config.items() if k != "runtime"}
    return fingerprint(stage.NAME, stage.VERSION, content, input_fingerprints(inputs))


def stage_path(stage: ModuleType, config: dict[str, Any], inputs: dict[str, str], artifacts: str) -> str:
    return dataset_path(artifacts, stage.NAME, stage_fingerprint(stage, config, inputs))


def run_stage(stage: ModuleType, config: dict[str, Any], inputs: dict[str, str], artifacts: str,
              fp: str | None = None) -> str:
    """Return the stage's dataset path, building it only when no finished one exists; `fp`, when the caller
    has it, is the stage's fingerprint.

    Runs sharing an artifacts directory build each dataset once: the builder holds the dataset's lease,
    and another run that needs it waits, then reuses it."""
    fp = fp or stage_fingerprint(stage, config, inputs)
    path = dataset_path(artifacts, stage.NAME, fp)
    if complete(path):
        log.info("%s: reusing %s", stage.NAME, path)
        return path

    def waiting(holder: dict) -> None:
        log.info("%s: waiting for pid %s on %s, which is building %s", stage.NAME, holder.get("pid"),
                 holder.get("host"), path)

    with leased(path, waiting):
        if complete(path):
            log.info("%s: reusing %s, built meanwhile by another run", stage.NAME, path)
            return path
        # Holding the lease, no live writer of this dataset exists: any temporary directory is a killed run's.
        if removed := remove_temporaries(artifacts, stage.NAME, fp):
            log.info("%s: removed %d temporary director%s left by killed runs", stage.NAME, removed,
                     "y" if removed == 1 else "ies")
        log.info("%s: building %s", stage.NAME, path)
        with DatasetWriter(artifacts, stage.NAME, fp, config=config, inputs=input_fingerprints(inputs),
                           schema=stage.SCHEMA, rows_per_shard=config.get("rows_per_shard"),
                           shard_bytes=config.get("shard_mb", 256) * 2**20) as out:
            stage.run(config, inputs, out)
    log.info("%s: wrote %s", stage.NAME, path)
    return path
