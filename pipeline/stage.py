"""One contract for every stage: a `Stage` says what it builds and from what; `run_stage` builds it once.

A stage module ends in one declaration, `STAGE = Stage(...)`, naming its parts:
- `name`, `version` (bump it when the output would change), `schema` (None for stages that write files, such
  as models), the `flow` that builds it (data, train or evaluate), and its config `section` (a `Config` field);
- `settings`: the typed model of its stage config, a pydantic model whose fields are the stage config's keys
  (often its section's subclass, with what the stage adds from other sections); `run` and `needs_ray` receive
  the stage config as one (`Stage.settings_of`), never as a dict;
- `runtime`: the settings that change how the dataset is built, not what it holds, with their defaults; a
  stage config keeps them under "runtime", which the fingerprint leaves out (`runtime()` reads them); a typed
  model declares them on its fields (`Field(..., json_schema_extra=AT_RUNTIME)`; by default they are the
  stage's `runtime`, as `runtime_defaults` lists them), and `declared_settings` splits it (`section_from` joins
  it back);
- `config(cfg, key) -> dict`: the stage config, the part of the whole `Config` (mostly its section) that the
  fingerprint hashes, the manifest records and Prefect and Ray carry: the boundary where a stage config is a
  dict (`stage_config` makes it of a typed one);
- `inputs(cfg, done, key) -> {name: dataset path}`: its input datasets, from the paths of the stages done so far;
- `instances(cfg, done) -> {label: key}`: what to build, in order (by default one instance, labelled by the
  stage's name, whose key is None); a per-run stage has one per run, objective or scored model, and its key
  says which;
- `check(cfg)`: the pre-flight check, run on every stage a run will reach before any work starts;
- `needs_ray(settings)`: whether building with these settings needs Ray, which is then started first;
- `side_by_side(cfg)`: whether its instances are built at once (each waiting on Ray for its own work);
- `run(settings, inputs, out)`: writes the dataset through `out`, a `DatasetWriter` (rows, `out.count(...)` for
  the manifest's stats, `out.extra`, `out.local_dir` for files); `run_stage` is its only caller.
A config may set `rows_per_shard` and `shard_mb` (default 256) to size the shards. The stages, in order, are
`pipeline.registry`'s, and no other list exists.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

import pyarrow as pa

from pipeline.errors import InputError
from storage import (
    DamagedDataset,
    DatasetWriter,
    complete,
    dataset_parts,
    dataset_path,
    discard,
    fingerprint,
    leased,
    remove_temporaries,
    verify,
)

if TYPE_CHECKING:
    from pydantic import BaseModel

    from pipeline.config import Config

log = logging.getLogger("cpipe")
Key = TypeVar("Key")
Done = dict[str, str]  # instance label -> the path of its finished dataset
FLOWS = ("data", "train", "evaluate")
AT_RUNTIME = {"runtime": True}  # a typed model's field so declared is a runtime setting


def _no_check(cfg: Config) -> None:
    return None


def _never(settings: Any) -> bool:
    return False


def _one_at_a_time(cfg: Config) -> bool:
    return False


def _says_nothing(manifest: dict[str, Any]) -> str | None:
    return None


def _no_inputs(cfg: Config, done: Done, key: Any) -> dict[str, str]:
    return {}


@dataclass(frozen=True)
class Stage(Generic[Key]):
    name: str
    version: str
    flow: Literal["data", "train", "evaluate"]
    section: str
    config: Callable[[Config, Key], dict[str, Any]]
    run: Callable[[Any, dict[str, str], DatasetWriter], None]
    settings: type[BaseModel]
    inputs: Callable[[Config, Done, Key], dict[str, str]] = _no_inputs
    instances: Callable[[Config, Done], dict[str, Key]] | None = None  # None: one, labelled by the name
    schema: pa.Schema | None = None
    runtime: Mapping[str, Any] = field(default_factory=dict)
    check: Callable[[Config], None] = _no_check
    needs_ray: Callable[[Any], bool] = _never
    side_by_side: Callable[[Config], bool] = _one_at_a_time
    # What a built dataset of this stage, by its manifest, adds to the recipe of a leaderboard row scored from it
    # (the train stage: the step a dev-selected run exported): how a later stage learns it without importing this one.
    describe: Callable[[dict[str, Any]], str | None] = _says_nothing

    def __post_init__(self) -> None:
        if self.flow not in FLOWS:
            raise ValueError(f"stage {self.name}: flow {self.flow!r} is not one of {FLOWS}")
        if not self.runtime:  # what its typed model declares
            object.__setattr__(self, "runtime", runtime_defaults(self.settings))

    def keys(self, cfg: Config, done: Done) -> dict[str, Key]:
        """label -> key of every instance to build."""
        return self.instances(cfg, done) if self.instances is not None else {self.name: None}

    def settings_of(self, config: dict[str, Any]) -> Any:
        """The stage config as `run` and `needs_ray` receive it: its typed model, the runtime settings over their
        declared defaults (an unknown one refused, as `runtime` does)."""
        content = {k: v for k, v in config.items() if k != "runtime"}
        return section_from(self.settings, content, runtime(config, self.runtime))

    def fingerprint(self, config: dict[str, Any], inputs: dict[str, str]) -> str:
        # "runtime" settings (how many workers, which backend) change how a dataset is built, not what it holds.
        content = {k: v for k, v in config.items() if k != "runtime"}
        return fingerprint(self.name, self.version, content, input_fingerprints(inputs))

    def path(self, config: dict[str, Any], inputs: dict[str, str], artifacts: str) -> str:
        return dataset_path(artifacts, self.name, self.fingerprint(config, inputs))


def split_runtime(declared: Mapping[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """A stage config from flat settings: the declared runtime keys move under "runtime"."""
    return {
        **{k: v for k, v in settings.items() if k not in declared},
        "runtime": {k: v for k, v in settings.items() if k in declared},
    }


def runtime(config: dict[str, Any], declared: Mapping[str, Any]) -> dict[str, Any]:
    """The config's runtime settings over the stage's declared defaults (a config written by hand may have none)."""
    given = config.get("runtime", {})
    if unknown := sorted(set(given) - set(declared)):
        raise InputError(
            f"unknown runtime setting(s) {', '.join(unknown)} (this stage has: {', '.join(declared) or 'none'})"
        )
    return {**declared, **given}


def _declared(section: type) -> tuple[list[str], dict[str, Any]]:
    """A typed section's (pydantic model class's) runtime fields, and {field: the value at which the fingerprint
    omits it}, as each field declares in its json_schema_extra ({"runtime": True}, {"fingerprint_omits": v})."""
    extras = {name: f.json_schema_extra or {} for name, f in section.model_fields.items()}
    return (
        [name for name, x in extras.items() if x.get("runtime")],
        {name: x["fingerprint_omits"] for name, x in extras.items() if "fingerprint_omits" in x},
    )


def declared_settings(section: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """A typed section's settings as a stage config holds them: (what the fingerprint hashes, the runtime
    settings). Its fields declare what stays out (`_declared`), and so may the section for its current values
    (an `inert()` method naming fields that decide nothing here); no stage keeps a list of its own."""
    runtime_names, omits = _declared(type(section))
    inert = section.inert() if hasattr(section, "inert") else set()
    settings = section.model_dump()
    content = {
        k: v
        for k, v in settings.items()
        if k not in runtime_names and k not in inert and not (k in omits and v == omits[k])
    }
    return content, {k: settings[k] for k in runtime_names}


def stage_config(settings: BaseModel) -> dict[str, Any]:
    """A typed stage config as the dict a stage's `config` returns: what `declared_settings` keeps, the runtime
    settings under "runtime" (where there are any); `Stage.settings_of` reads it back."""
    content, runtime_settings = declared_settings(settings)
    return {**content, **({"runtime": runtime_settings} if runtime_settings else {})}


def runtime_defaults(section: type) -> dict[str, Any]:
    """A typed section's runtime settings at their defaults: its stage's `runtime`."""
    return {name: section.model_fields[name].default for name in _declared(section)[0]}


def section_from(section: type, content: dict[str, Any], runtime_settings: dict[str, Any]) -> Any:
    """The typed section back from what `declared_settings` kept (or a full dump, as a hand-written stage config
    may be): the omitted settings at the values they were omitted at, the inert ones at their defaults."""
    return section(**{**_declared(section)[1], **runtime_settings, **content})


def input_fingerprints(inputs: dict[str, str]) -> dict[str, str]:
    """A dataset path ends in its fingerprint, so inputs are identified by their paths' last part."""
    return {name: dataset_parts(path)[2] for name, path in inputs.items()}


def run_stage(
    stage: Stage, config: dict[str, Any], inputs: dict[str, str], artifacts: str, fp: str | None = None
) -> str:
    """Return the stage's dataset path, building it only when no finished one exists; `fp`, when the caller
    has it, is the stage's fingerprint.

    Runs sharing an artifacts directory build each dataset once: the builder holds the dataset's lease,
    and another run that needs it waits, then reuses it. A finished dataset whose shards fail their check
    (`storage.verify`) is not reused but rebuilt."""
    fp = fp or stage.fingerprint(config, inputs)
    path = dataset_path(artifacts, stage.name, fp)
    if complete(path):
        if (damage := _damage(path)) is None:
            log.info("%s: reusing %s", stage.name, path)
            return path
        log.warning("%s: %s; rebuilding it", stage.name, damage)

    def waiting(holder: dict) -> None:
        log.info(
            "%s: waiting for pid %s on %s, which is building %s",
            stage.name,
            holder.get("pid"),
            holder.get("host"),
            path,
        )

    with leased(path, waiting):
        if complete(path):
            if _damage(path) is None:
                log.info("%s: reusing %s, built meanwhile by another run", stage.name, path)
                return path
            discard(path)
        # Holding the lease, no live writer of this dataset exists: any temporary directory is a killed run's.
        if removed := remove_temporaries(artifacts, stage.name, fp):
            log.info(
                "%s: removed %d temporary director%s left by killed runs",
                stage.name,
                removed,
                "y" if removed == 1 else "ies",
            )
        log.info("%s: building %s", stage.name, path)
        with DatasetWriter(
            artifacts,
            stage.name,
            fp,
            config=config,
            inputs=input_fingerprints(inputs),
            schema=stage.schema,
            rows_per_shard=config.get("rows_per_shard"),
            shard_bytes=config.get("shard_mb", 256) * 2**20,
        ) as out:
            out.built_from(*inputs.values())
            stage.run(stage.settings_of(config), inputs, out)
    log.info("%s: wrote %s", stage.name, path)
    return path


def _damage(path: str) -> str | None:
    """What is wrong with a finished dataset, in one line, or None when it is intact."""
    try:
        verify(path)
    except DamagedDataset as e:
        return str(e)
    return None
