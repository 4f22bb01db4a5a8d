"""`cpipe plan` (and `cpipe run --dry-run`): what a run would do, before it starts. For each stage instance the run
reaches, its fingerprint and whether its dataset will be reused (finished and intact), rebuilt (damaged, left
unfinished, or a dataset of the same stage under another fingerprint: the config keys and inputs that differ from
that dataset's manifest) or built (nothing there).

Nothing is built and nothing heavy starts (no Prefect, no Ray): the stages' own `config`, `inputs` and `instances`
give the fingerprints as the run computes them (a fingerprint holds its inputs' fingerprints, which are their paths'
last part, so a downstream fingerprint is known before its input is built); the datasets found are checked as a run
checks them before reusing one. A stage that reads what an input holds to know its instances or config (the
evaluate stage reads a train dataset's manifest) cannot be planned before that input exists: it is `unknown` until
the instance it waits on has run, as is everything downstream of it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import fsspec

from pipeline import registry
from pipeline.config import Config
from pipeline.config_base import flat
from pipeline.preflight import checked
from pipeline.stage import Stage, input_fingerprints
from storage import (
    DamagedDataset,
    DatasetError,
    complete,
    dataset_parts,
    dataset_path,
    finished_datasets,
    read_manifest,
    temporaries,
    verify,
)
from storage.inspection import default_console
from storage.lease import Lease, stale

REUSED, REBUILT, BUILT, UNKNOWN = "reused", "rebuilt", "built", "unknown"
# What the printed plan says of each action (the JSON keeps the words above): before the run, "built" read as done.
SAID = {REUSED: "will reuse", REBUILT: "will rebuild", BUILT: "will build", UNKNOWN: "unknown"}
SHORT = 40  # a changed value longer than this (a file listing, a digest list) is named by its key alone


@dataclass
class Step:
    """One stage instance of the run: what will happen to its dataset, and why."""

    label: str
    stage: str
    action: str  # REUSED, REBUILT, BUILT or UNKNOWN
    fingerprint: str | None
    path: str | None
    why: str
    previous: str | None = None  # the dataset of the same stage compared with (rebuilt: config or input changed)
    config_changes: dict[str, dict] = field(default_factory=dict)  # key -> {"before", "now"} (stage config)
    input_changes: dict[str, dict] = field(default_factory=dict)  # input -> {"stage", "before", "now"} (fingerprints)
    after: list[str] = field(default_factory=list)  # UNKNOWN: the instances whose datasets decide it


def plan(cfg: Config, until: str | None = None) -> list[Step]:
    """Every instance the run of `cfg` builds up to `until`, in the run's order; `cfg` as pipeline.preflight.configured
    returns it (checked here as the run checks it)."""
    checked(cfg, until=until)
    steps: list[Step] = []
    done: dict[str, str] = {}  # label -> its dataset's path, as the flows' `build` keeps it
    waits: dict[str, list[str]] = {}  # path (or a placeholder) -> the instances it is unknown until
    planned: dict[str, tuple[dict, dict]] = {}  # path -> (stage config, input fingerprints)
    for stage in registry.stages(last=until or registry.NAMES[-1]):
        steps += _stage_steps(stage, cfg, done, waits, planned, {s.path for s in steps if s.action == REUSED})
    stored = _stored(cfg.artifacts)
    claimed = {s.path for s in steps if s.path is not None}  # a dataset this run reuses (or builds) is no other's
    makers = {s.fingerprint: s.label for s in steps if s.fingerprint is not None}
    for step in steps:
        if step.action == BUILT:
            _compare(step, *planned[step.path], [d for d in stored.get(step.stage, []) if d[0] not in claimed], makers)
    return steps


def _stage_steps(
    stage: Stage,
    cfg: Config,
    done: dict[str, str],
    waits: dict[str, list[str]],
    planned: dict[str, tuple[dict, dict]],
    reused: set[str],
) -> Iterator[Step]:
    keys, blocked = _keys(stage, cfg, done, reused)
    for label, key in keys.items():
        config, inputs = stage.config(cfg, key), stage.inputs(cfg, done, key)
        after = sorted({w for path in inputs.values() for w in waits.get(path, [])})
        if after:
            done[label] = waits_path = f"?{label}"
            waits[waits_path] = after
            yield _unknown(label, stage.name, after, "so is an input's fingerprint")
            continue
        fp = stage.fingerprint(config, inputs)
        done[label] = path = stage.path(config, inputs, cfg.artifacts)
        action, why = _found(path)
        planned[path] = (_normal(config), input_fingerprints(inputs))
        yield Step(label, stage.name, action, fp, path, why)
    for culprit in blocked:  # what the stage makes of a dataset not built yet: its labels too are unknown
        label = f"{stage.name}/?{culprit}"
        done[label] = waits_path = f"?{label}"
        waits[waits_path] = waits.get(done[culprit]) or [culprit]  # an unknown culprit waits on its own
        yield _unknown(
            f"{stage.name} of {culprit}",
            stage.name,
            waits[waits_path],
            f"the stage reads {culprit}'s dataset to know its instances",
        )


def _keys(stage: Stage, cfg: Config, done: dict[str, str], reused: set[str]) -> tuple[dict, list[str]]:
    """The stage's instances; where reading them needs a dataset the run has not built yet (its manifest), that
    dataset's label is left out of what the stage sees, and returned."""
    view, blocked = dict(done), []
    while True:
        try:
            return stage.keys(cfg, view), blocked
        except DatasetError as e:
            culprit = next((label for label, path in view.items() if path not in reused and path in str(e)), None)
            if culprit is None:
                raise
            blocked.append(culprit)
            del view[culprit]


def _unknown(label: str, stage: str, after: list[str], because: str) -> Step:
    return Step(
        label,
        stage,
        UNKNOWN,
        None,
        None,
        f"unknown until {', '.join(after)} {'runs' if len(after) == 1 else 'run'} ({because})",
        after=after,
    )


def _found(path: str) -> tuple[str, str]:
    """What the run will do with the dataset at its fingerprint's path, as pipeline.stage.run_stage decides."""
    if complete(path):
        try:
            verify(path)
        except DamagedDataset as e:
            return REBUILT, f"damaged: {e.what}"
        return REUSED, "finished and intact"
    fs, p = fsspec.core.url_to_fs(path)
    holder = Lease(path).holder()
    if holder is not None and not stale(holder):
        return BUILT, (
            f"being built now by pid {holder.get('pid')} on {holder.get('host')}: the run will wait for "
            "it, then reuse it"
        )
    if fs.exists(p) or temporaries(*dataset_parts(path)):
        return REBUILT, "incomplete: a stopped or killed run left it unfinished"
    return BUILT, "nothing there"


def _stored(artifacts: str) -> dict[str, list[tuple[str, dict]]]:
    """stage -> (path, manifest) of each finished dataset under `artifacts`, newest first; an unreadable manifest is
    passed over (its own plan step says it is damaged, if the run reaches it)."""
    found: dict[str, list[tuple[str, dict]]] = {}
    for stage, fp in finished_datasets(artifacts):
        path = dataset_path(artifacts, stage, fp)  # spelled as the plan spells its paths (a relative root stays so)
        try:
            manifest = read_manifest(path)
        except DatasetError:
            continue
        found.setdefault(stage, []).append((path, manifest))
    for datasets in found.values():
        datasets.sort(key=lambda d: -(d[1].get("created") or 0))
    return found


def _compare(
    step: Step, config: dict, inputs: dict[str, str], stored: list[tuple[str, dict]], makers: dict[str, str]
) -> None:
    """A new fingerprint where datasets of the same stage are found that no other instance of this run takes: the
    nearest one (fewest differences, then the newest) is taken for this instance's earlier build, and the step
    says what differs from it."""
    candidates = []
    for path, manifest in stored:
        old, new = flat(_normal(manifest.get("config") or {})), flat(config)
        keys = _differences(old, new)
        before = manifest.get("inputs") or {}
        changed = {
            name: {"stage": makers.get(inputs.get(name), name), "before": before.get(name), "now": inputs.get(name)}
            for name in sorted({*before, *inputs})
            if before.get(name) != inputs.get(name)
        }
        alike = len(old.keys() & new.keys()) - len(keys) + len(before.keys() & inputs.keys()) - len(changed)
        if len(keys) + len(changed) < alike:  # more alike than not: another run's dataset is no earlier build
            candidates.append((len(keys) + len(changed), path, keys, changed))
    if not candidates:
        return
    _, path, keys, changed = min(candidates, key=lambda c: c[0])  # min keeps the first of a tie: the newest
    step.action, step.previous, step.config_changes, step.input_changes = REBUILT, path, keys, changed
    reasons = []
    if keys:
        reasons.append("config changed: " + ", ".join(_said(k, v) for k, v in keys.items()))
    if changed:
        reasons.append(
            "input changed: "
            + ", ".join(
                f"{name} ({c['stage']} {c['before'] or 'none'} -> {c['now'] or 'none'})" for name, c in changed.items()
            )
        )
    if not reasons:  # the same config and inputs under another fingerprint: the stage's version is new
        reasons.append("stage version changed (new code)")
    step.why = f"{'; '.join(reasons)} (was {dataset_parts(path)[2]})"


def _normal(value: Any) -> Any:
    """A config as its manifest holds it (JSON, runtime settings left out as the fingerprint leaves them)."""
    plain = json.loads(json.dumps(value, sort_keys=True, default=str))
    return {k: v for k, v in plain.items() if k != "runtime"} if isinstance(plain, dict) else plain


_ABSENT = object()


def _differences(before: dict[str, Any], now: dict[str, Any]) -> dict[str, dict]:
    return {
        k: {"before": before.get(k), "now": now.get(k)}
        for k in sorted({*before, *now})
        if before.get(k, _ABSENT) != now.get(k, _ABSENT)
    }


def _said(key: str, change: dict) -> str:
    before, now = (json.dumps(change[k], default=str) for k in ("before", "now"))
    return key if max(len(before), len(now)) > SHORT else f"{key} {before} -> {now}"


def as_json(steps: list[Step]) -> str:
    return json.dumps([asdict(s) for s in steps], indent=2, default=str)


COLUMNS = ("instance", "action", "fingerprint", "path", "why")


def _cells(step: Step) -> tuple[str, ...]:
    return step.label, SAID[step.action], step.fingerprint or "?", step.path or "", step.why


def summary(steps: list[Step]) -> str:
    counts = {a: sum(s.action == a for s in steps) for a in (REUSED, REBUILT, BUILT, UNKNOWN)}
    return "plan: " + ", ".join(f"{SAID[a]} {n}" for a, n in counts.items() if n) if steps else "plan: nothing to run"


def show(steps: list[Step], console=None) -> None:
    """A table on a terminal (paths folded, never cut); off one, plain text in aligned columns, a line a step."""
    console = console or default_console()
    if console.is_terminal:
        from rich.table import Table

        table = Table(title=summary(steps))
        table.add_column(COLUMNS[0], overflow="fold")
        table.add_column(COLUMNS[1], no_wrap=True)
        table.add_column(COLUMNS[2], no_wrap=True, min_width=16)  # a fingerprint is 16 characters, never cut
        for name in COLUMNS[3:]:
            table.add_column(name, overflow="fold", ratio=1)
        for step in steps:
            table.add_row(*_cells(step))
        console.print(table)
        return
    rows = [COLUMNS, *(_cells(s) for s in steps)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS) - 1)]
    print(summary(steps))
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])
