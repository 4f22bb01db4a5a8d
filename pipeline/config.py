"""One validated configuration, loaded from YAML with `--set key=value` overrides.

Each stage package owns its section (pipeline.<stage>.config), which the registry names beside its stage; `Config`
composes them (`composed`) and checks what spans sections. Unknown keys and bad values fail here, before any work
starts, with the key named. The sections' defaults are the papers' (DeCLUTR-small's recipe); configs/default.yaml
holds what the small CPU demo changes.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, NamedTuple

import yaml
from pydantic import Field, StrictInt, ValidationError, create_model, field_validator, model_validator

from pipeline import objectives, registry
from pipeline.config_base import Strict, absolute, unusable_name
from pipeline.corpus.credentials import conceal, concealed
from pipeline.errors import ConfigError
from pipeline.repeats import seed_list, seeded, split_seeded
from pipeline.tracking.config import TrackingConfig
from pipeline.train.config import HELDOUT_LOSS, TrainConfig


class ParallelConfig(Strict):
    """How the corpus, filter, decontaminate and augment stages spread their work; the output is the same either way."""

    backend: Literal["serial", "processes", "ray"] = "serial"
    workers: int = Field(2, ge=1)


class RayConfig(Strict):
    address: str | None = Field(None, description="existing cluster; null starts a local instance")
    num_cpus: int | None = Field(None, ge=1)


class Training(NamedTuple):
    """One repeat of one run: its leaderboard row, the run, the repeat's seed, its settings (seed = the repeat's) and
    the row of the parent repeat it continues (init_from), if any."""

    row: str
    run: str
    seed: int
    config: TrainConfig
    parent: str | None


class Spanning(Strict):
    """The settings no stage owns, and the checks across sections: `Config` without the stages' sections."""

    artifacts: str = "artifacts"
    seeds: list[StrictInt] | None = Field(
        None,
        description=(
            "repeats: every run that names no seeds of its own, the untrained encoder and the trained baselines "
            "(fastText, InferSent) are built once per seed (pipeline.repeats); the leaderboard shows each one's mean "
            "over seeds with a t-interval; null = each run's train.seed, one model"
        ),
    )
    repeats: StrictInt | None = Field(None, ge=1, description="seeds 0..N-1 (instead of seeds)")
    runs: dict[str, dict[str, Any]] = Field(
        default_factory=lambda: {"declutr": {}},
        description="named runs: train overrides per run; all share the data stages",
    )
    parallel: ParallelConfig = Field(default_factory=ParallelConfig)
    ray: RayConfig = Field(default_factory=RayConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)

    @model_validator(mode="before")
    @classmethod
    def _concealed(cls, data: Any) -> Any:
        """Whichever key holds a URL with a password (a profile's, `--set`'s, a flow parameter's), the config
        holds it masked: fingerprints, manifests, logs and Prefect's stored parameters are made of the config,
        and the download reveals it (pipeline.corpus.credentials)."""
        return concealed(data)

    @field_validator("artifacts")
    @classmethod
    def _absolute_artifacts(cls, v: str) -> str:
        if "://" in v:  # fsspec names the package a protocol needs (s3fs for s3://, gcsfs for gs://)
            import fsspec

            try:
                fsspec.get_filesystem_class(v.split("://", 1)[0])
            except (ImportError, ValueError) as e:
                raise ValueError(f"{v}: {e}") from None
        return absolute(v)

    @model_validator(mode="after")
    def _runs(self) -> Spanning:
        if not self.runs:
            raise ValueError("runs: at least one named run is needed")
        seed_list("config", self.seeds, self.repeats)
        for where, name in [
            *(("runs", n) for n in self.runs),
            *((f"evaluate.baselines.models[{i}].name", m.name) for i, m in enumerate(self.evaluate.baselines.models)),
        ]:
            _check_row_name(where, name)
        rows = {
            *self.runs,
            "untrained",
            "fasttext-bow",
            "random",
            "infersent",
            *(m.name for m in self.evaluate.baselines.models),
        }
        for pp in self.evaluate.baselines.postprocess:
            if pp.model not in rows:
                raise ValueError(
                    f"evaluate.baselines.postprocess: no row named {pp.model!r} to post-process "
                    f"(rows: {', '.join(sorted(rows))})"
                )
        self.rows()  # no two rows share a name
        self.training_order()  # every init_from names another run, and none continues itself through others
        self.trainings()  # every repeat of a continuing run has its parent's repeat to start from
        for name, run in self.run_configs().items():  # validates every run's overrides now
            if why := objectives.objective(run.objective).check_config(self, run):  # what it needs of the others
                raise ValueError(f"runs.{name}: {why}")
            if run.select_by == HELDOUT_LOSS and not self.augment.heldout_fraction:
                raise ValueError(
                    f"runs.{name}: select_by heldout-loss scores documents held out of training: set "
                    "augment.heldout_fraction above 0 (0.05, say); it is 0, none is held out"
                )
        return self

    def training_order(self) -> list[str]:
        """The runs, each after the run it continues (init_from), otherwise in the config's order."""
        runs, order = self.run_configs(), []

        def visit(name: str, chain: list[str]) -> None:
            if name in order:
                return
            if name in chain:
                raise ValueError(f"runs: init_from makes a cycle: {' -> '.join([*chain[chain.index(name) :], name])}")
            parent = runs[name].init_from
            if parent is not None:
                if parent not in runs:
                    raise ValueError(f"runs.{name}.init_from: no run named {parent!r} (runs: {', '.join(runs)})")
                visit(parent, [*chain, name])
            order.append(name)

        for name in runs:
            visit(name, [])
        return order

    def initial_name(self) -> str:
        """The untrained encoder's row: "untrained" when built from scratch, else the base model's own name
        (pipeline.evaluate.stage.initial_row)."""
        return "untrained" if self.model.base is None else Path(self.model.base.rstrip("/")).name

    def postprocessed(self, model: str) -> str:
        """The row a post-processing of `model` reads: "untrained" is the untrained encoder's row under its own
        name (initial_name) where that row is scored, any other name the row of that name."""
        return self.initial_name() if model == "untrained" and self.evaluate.untrained else model

    def rows(self) -> dict[str, str]:
        """{row: the key that makes it} of every row of the pipeline's leaderboard as configured, each row over
        several seeds once, by its name (pipeline.evaluate.stage.pipeline_rows names them): the runs, the untrained
        encoder, the baselines (EvaluateConfig.baseline_rows) and their post-processed rows. Raises ValueError
        naming both keys where two rows share a name: one of them would replace the other on the leaderboard."""
        ev, base = self.evaluate, self.evaluate.baselines
        named = [
            *((name, f"runs.{name}") for name in self.runs),
            *((b.name, b.key) for b in ev.baseline_rows(self.initial_name())),
        ]
        out: dict[str, str] = {}
        for row, key in named:
            _add_row(out, row, key)
        for i, pp in enumerate(base.postprocess):  # every row of that name, seeded or not (pipeline_rows)
            model = self.postprocessed(pp.model)
            row, key = f"{model}+{pp.kind}", f"evaluate.baselines.postprocess[{i}]"
            if model in out:
                _add_row(out, row, key)
        return out

    def default_seeds(self) -> list[int] | None:
        """The top-level seeds (or repeats), None when the config sets neither."""
        return seed_list("config", self.seeds, self.repeats)

    def run_seeds(self) -> dict[str, list[int]]:
        """Each run's seeds: its own seeds (or repeats), else its own seed, else the top-level seeds, else
        train.seed."""
        out, runs = {}, self.run_configs()
        for name, overrides in self.runs.items():
            overrides = overrides or {}
            own = seed_list(f"runs.{name}", overrides.get("seeds"), overrides.get("repeats"))
            if own is not None and "seed" in overrides:
                raise ValueError(f"runs.{name}: set seed or seeds (repeats), not both")
            fallback = None if "seed" in overrides else self.default_seeds()
            out[name] = own or fallback or [runs[name].seed]
        return out

    def trainings(self) -> dict[str, Training]:
        """Every repeat of every run, parents first, by row: a run with one seed is its own row (named as the run),
        one with several has a row per seed ("<run> (seed s)"). A continuing run's repeat starts from its parent's
        repeat of the same seed, or from the parent's only model."""
        runs, seeds, out = self.run_configs(), self.run_seeds(), {}
        rows = {name: {s: name if len(seeds[name]) == 1 else seeded(name, s) for s in seeds[name]} for name in runs}
        for name in self.training_order():
            parent = runs[name].init_from
            for s in seeds[name]:
                if parent is None:
                    start = None
                elif len(seeds[parent]) == 1:
                    start = rows[parent][seeds[parent][0]]
                elif s in rows[parent]:
                    start = rows[parent][s]
                else:
                    raise ValueError(
                        f"runs.{name}: seed {s} continues run {parent!r}, which has no seed {s} "
                        f"(its seeds: {seeds[parent]})"
                    )
                out[rows[name][s]] = Training(rows[name][s], name, s, runs[name].model_copy(update={"seed": s}), start)
        return out

    def init_seeds(self) -> list[int]:
        """The repeats' seeds that the init stage builds initial weights for (model.seed + s): those of the runs
        trained from them, and the untrained row's (the top-level seeds, else seed 0)."""
        used = {t.seed for t in self.trainings().values() if t.parent is None}
        if self.evaluate.untrained:
            used |= set(self.default_seeds() or [0])
        return sorted(used)

    def baseline_seeds(self) -> list[int]:
        """The trained baselines' seeds (fastText, InferSent): the top-level seeds, else 0."""
        return self.default_seeds() or [0]

    def run_configs(self) -> dict[str, TrainConfig]:
        out = {}
        for name, overrides in self.runs.items():
            settings = {k: v for k, v in (overrides or {}).items() if k not in ("seeds", "repeats")}
            try:
                out[name] = TrainConfig(**{**self.train.model_dump(exclude_unset=True), **settings})
            except ValidationError as e:
                raise ValueError(
                    _describe(e, prefix=f"runs.{name}.").replace(f"runs.{name}.: ", f"runs.{name}: ")
                ) from None
        return out


def composed() -> type[Spanning]:
    """`Config`: the settings no stage owns and every stage's section (pipeline.registry), each section at its
    defaults where a profile leaves it out."""
    sections = {key: (model, Field(default_factory=model)) for key, model in registry.sections().items()}
    return create_model("Config", __base__=Spanning, __module__=__name__, **sections)


Config = composed()


def _add_row(rows: dict[str, str], row: str, key: str) -> None:
    if row in rows:
        raise ValueError(
            f"{key}: the row {row!r} is also {rows[row]}'s; rename one (two rows of one name would be "
            "one on the leaderboard)"
        )
    rows[row] = key


READOUT_VARIANT = re.compile(r".+ \[[^\]]+\]")


def _check_row_name(where: str, name: str) -> None:
    """A run's or a baseline's name names its leaderboard row and its directory of MTEB results."""
    if why := unusable_name(name):
        raise ValueError(f"{where}: {name!r} is no usable name: {why}")
    row, seed = split_seeded(name)
    if seed is not None:  # the leaderboard would read it as seed `seed` of row `row`, and mix the two
        raise ValueError(
            f'{where}: {name!r} is named as a repeat is ("<row> (seed N)"): the leaderboard would take '
            f"it for seed {seed} of {row!r}; rename it"
        )
    if READOUT_VARIANT.fullmatch(row):  # the reference's rows under other readouts (pipeline.evaluate.readouts)
        raise ValueError(
            f'{where}: {name!r} is named as the leaderboard names a row read another way ("<row> [cls]"),'
            " which it adds itself; rename it"
        )


def _describe(e: ValidationError, prefix: str = "") -> str:
    return "; ".join(_said(err, prefix) for err in e.errors())


def _said(err: dict, prefix: str = "") -> str:
    key = prefix + ".".join(repr(x) if isinstance(x, str) and unusable_name(x) else str(x) for x in err["loc"])
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        return f"unknown key '{key}'"
    if err["type"] == "value_error":
        return f"{key}: {msg}" if key else msg
    return f"{key}: {msg} (got {err['input']!r})"


_FIRST_KEY = re.compile(r"(?:unknown key ')?([^\s:']+)")
# The options that set a key of the config whole (cpipe's, and the flows' parameters of the same names).
OPTIONS = {"artifacts": "--artifacts", "corpus.sources": "--corpus", "evaluate.data": "--eval-data"}


def _sourced(e: ValidationError, profile: Path, overrides: list[str], replaced: list[str]) -> str:
    """Each error after where its value came from: the last `--set` or option that set its key or a section holding
    it, else the profile (an error of the config as a whole too)."""
    given = [(_parse_override(item)[0], f"--set {conceal(item)}") for item in overrides]
    given += [(key.split("."), OPTIONS.get(key, key)) for key in replaced]
    by_source: dict[str, list[str]] = {}
    for err in e.errors():
        said = _said(err)
        # An error of the config as a whole (a run's settings, checked with the train section's) begins with its key.
        loc = [str(part) for part in err["loc"]] or (m[1].split(".") if (m := _FIRST_KEY.match(said)) else [])
        source = next((what for path, what in reversed(given) if loc[: len(path)] == path), str(profile))
        by_source.setdefault(source, []).append(said)
    return "; ".join(f"{source}: {'; '.join(parts)}" for source, parts in by_source.items())


def _parse_override(item: str) -> tuple[list[str], Any]:
    if "=" not in item:
        raise ConfigError(f"--set expects key=value, got '{item}'")
    key, raw = item.split("=", 1)
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"--set has an empty key in '{item}'")
    try:
        value = yaml.safe_load(raw) if raw != "" else None
    except yaml.YAMLError as e:  # a syntax error, or a tag such as !!python/object (safe_load constructs none)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"--set {key}: not valid YAML: {problem}") from None  # the value may hold a password
    return key.split("."), value


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """`a.b=value` sets a nested key; values are parsed as YAML scalars (1024, true, null, [a, b])."""
    for item in overrides:
        path, value = _parse_override(item)
        _set(data, path, value, item)
    return data


def _set(data: dict, path: list[str], value: Any, what: str) -> None:
    node = data
    for part in path[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{what}: '{part}' is not a section")
        node = child
    node[path[-1]] = value


DEFAULT_PROFILE = Path(__file__).resolve().parents[1] / "configs" / "default.yaml"


def read_profile(p: Path, extending: tuple[Path, ...] = ()) -> dict:
    """A profile's settings, on top of those of the profile it `extends` (a path relative to it): sections merge
    key by key, anything else (a list, a value) replaces the parent's."""
    if not p.is_file():
        raise ConfigError(f"config file not found: {p}" + (f" (extended by {extending[-1]})" if extending else ""))
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{p}:{mark.line + 1}:{mark.column + 1}" if mark else str(p)
        raise ConfigError(f"{where}: not valid YAML: {getattr(e, 'problem', None) or str(e).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping at the top level")
    if (parent := data.pop("extends", None)) is None:
        return data
    if not isinstance(parent, str) or not parent:
        raise ConfigError(f"{p}: extends: expected the path of another profile, got {parent!r}")
    base = (p.parent / parent).resolve()
    if base in (*extending, p.resolve()):
        raise ConfigError(f"{p}: extends {parent}, which extends it in turn")
    return _merged(read_profile(base, (*extending, p.resolve())), data)


def _merged(base: dict, over: dict) -> dict:
    return {
        **base,
        **{
            k: _merged(base[k], v) if isinstance(v, dict) and isinstance(base.get(k), dict) else v
            for k, v in over.items()
        },
    }


def load_config(path: str | Path | None = None, overrides: list[str] | None = None, **replace: Any) -> Config:
    """Load YAML (without a path: configs/default.yaml, the small CPU demo: the papers' defaults with what it
    changes), apply `--set` overrides and validate; a key a profile leaves out takes its section's default.

    `replace` holds values from dedicated CLI options (artifacts, corpus sources,
    eval data) as dotted keys, applied after the overrides.
    """
    p = Path(path) if path is not None else DEFAULT_PROFILE
    data = read_profile(p)
    apply_overrides(data, list(overrides or []))
    for key, value in replace.items():
        if value is not None:
            _set(data, key.split("."), value, key)
    try:
        return Config(**data)
    except ValidationError as e:
        replaced = [key for key, value in replace.items() if value is not None]
        raise ConfigError(f"config error: {_sourced(e, p, list(overrides or []), replaced)}") from None
