"""`cpipe plan` and `cpipe run --dry-run` on real artifacts: the data stages and init built on the tiny corpus by the
flows' own loop (tests.conftest.prebuild), then planned through the CLI's entry point, in this process. The test
harness fails a test that starts Ray or a Prefect server unmarked, so these also check that planning starts neither."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from flows.cli import main
from tests.conftest import prebuild

UNTIL = "init"  # every data stage and the initial model: what can be built without Ray


@pytest.fixture(scope="module")
def finished(tmp_path_factory, tiny_config, tiny_corpus, tiny_sts) -> tuple[Path, dict[str, str]]:
    """A finished run up to init (the evaluation data given as a --set, the plans below give it as --eval-data): its
    artifacts directory and label -> dataset path."""
    art = tmp_path_factory.mktemp("plan") / "artifacts"
    built = prebuild(tiny_config, tiny_corpus, art, UNTIL, [f"evaluate.data={json.dumps(str(tiny_sts))}"])
    return art, built


@pytest.fixture
def copy(finished, tmp_path) -> tuple[Path, dict[str, str]]:
    """The finished run's artifacts, copied for a test that damages them; label -> path in the copy."""
    art, built = finished
    shutil.copytree(art, tmp_path / "artifacts")
    return tmp_path / "artifacts", {
        label: path.replace(str(art), str(tmp_path / "artifacts")) for label, path in built.items()
    }


def arguments(art: Path, tiny_config, tiny_corpus, tiny_sts, *more: str) -> list[str]:
    return [
        "--config",
        str(tiny_config),
        "--corpus",
        str(tiny_corpus),
        "--eval-data",
        str(tiny_sts),
        "--artifacts",
        str(art),
        *more,
    ]


def planned(capsys, *args: str) -> dict[str, dict]:
    """`cpipe plan --json ...`: label -> step."""
    capsys.readouterr()
    assert main(["plan", "--json", *args]) == 0
    return {step["label"]: step for step in json.loads(capsys.readouterr().out)}


def test_after_a_finished_run_every_stage_is_reused(finished, capsys, tiny_config, tiny_corpus, tiny_sts):
    art, built = finished
    steps = planned(capsys, *arguments(art, tiny_config, tiny_corpus, tiny_sts, "--until", UNTIL))
    assert {label: s["path"] for label, s in steps.items()} == built  # the run's own instances and fingerprints
    assert {s["action"] for s in steps.values()} == {"reused"}
    assert all(s["fingerprint"] == Path(s["path"]).name for s in steps.values())


def test_a_changed_setting_rebuilds_its_stage_and_everything_after_naming_the_key(
    finished, capsys, tiny_config, tiny_corpus, tiny_sts
):
    art, built = finished
    steps = planned(
        capsys, *arguments(art, tiny_config, tiny_corpus, tiny_sts, "--until", UNTIL, "--set", "filter.min_tokens=150")
    )
    assert steps["corpus"]["action"] == steps["tokenizer"]["action"] == steps["init"]["action"] == "reused"
    rebuilt = {label for label, s in steps.items() if s["action"] == "rebuilt"}
    assert rebuilt == {"filter", "decontaminate", *(label for label in built if label.startswith("augment/"))}
    f = steps["filter"]
    assert f["config_changes"] == {"min_tokens": {"before": 200, "now": 150}}
    assert f["input_changes"] == {} and f["previous"] == built["filter"] and f["path"] != built["filter"]
    assert "config changed: min_tokens 200 -> 150" in f["why"]
    d = steps["decontaminate"]
    assert d["config_changes"] == {} and d["previous"] == built["decontaminate"]
    assert d["input_changes"] == {
        "documents": {"stage": "filter", "before": Path(built["filter"]).name, "now": f["fingerprint"]}
    }
    assert d["why"].startswith("input changed: documents (filter ")
    for label in rebuilt - {"filter", "decontaminate"}:  # the pairs read the documents decontaminate keeps
        assert steps[label]["input_changes"]["documents"]["stage"] == "decontaminate", steps[label]


def test_a_damaged_an_unfinished_and_a_removed_dataset(copy, capsys, tiny_config, tiny_corpus, tiny_sts):
    art, built = copy
    shard = sorted(Path(built["filter"]).glob("part-*.parquet"))[0]
    shard.write_bytes(shard.read_bytes()[:-8])  # cut short
    (Path(built["tokenizer"]) / "_SUCCESS").unlink()  # as a killed run leaves a dataset: not finished
    shutil.rmtree(built["decontaminate"])
    steps = planned(capsys, *arguments(art, tiny_config, tiny_corpus, tiny_sts, "--until", UNTIL))
    assert steps["filter"]["action"] == "rebuilt" and steps["filter"]["why"].startswith("damaged: ")
    assert shard.name in steps["filter"]["why"]
    assert steps["tokenizer"]["action"] == "rebuilt" and steps["tokenizer"]["why"].startswith("incomplete")
    assert steps["decontaminate"]["action"] == "built" and steps["decontaminate"]["why"] == "nothing there"
    # Rebuilt at the same fingerprint, these are what the pairs were made of: the run reuses them
    assert {s["action"] for label, s in steps.items() if label.startswith("augment/")} == {"reused"}
    assert {label: s["path"] for label, s in steps.items()} == built


def test_a_manifest_of_another_shape_is_damaged(copy, capsys, tiny_config, tiny_corpus, tiny_sts):
    """Valid JSON of the wrong shape: `cpipe plan` failed on it with a traceback, and a run never rebuilt it."""
    art, built = copy
    shapes = {
        "filter": lambda m: [],
        "tokenizer": lambda m: {**m, "parts": 5},
        "corpus": lambda m: {**m, "dropped": "x"},
    }
    for label, change in shapes.items():
        manifest = Path(built[label]) / "_manifest.json"
        manifest.write_text(json.dumps(change(json.loads(manifest.read_text()))))
    steps = planned(capsys, *arguments(art, tiny_config, tiny_corpus, tiny_sts, "--until", UNTIL))
    assert {label: (steps[label]["action"], steps[label]["why"]) for label in shapes} == {
        "filter": ("rebuilt", "damaged: _manifest.json: the whole file should be a JSON object (it is [])"),
        "tokenizer": ("rebuilt", "damaged: _manifest.json: parts should be a valid list (it is 5)"),
        "corpus": ("rebuilt", 'damaged: _manifest.json: dropped should be a JSON object (it is "x")'),
    }
    assert {s["action"] for label, s in steps.items() if label not in shapes} == {"reused"}


def test_an_artifacts_path_holding_glob_characters_is_planned_as_a_path(
    copy, capsys, tiny_config, tiny_corpus, tiny_sts
):
    """run[s] is a directory of that name: read as a glob pattern, its datasets (and its killed runs' temporary
    directories) were not found, and the plan said "nothing there"."""
    art, built = copy
    bracketed = art.rename(art.with_name("run[s]"))
    built = {label: path.replace(str(art), str(bracketed)) for label, path in built.items()}
    tokenizer = Path(built["tokenizer"])
    tokenizer.rename(tokenizer.with_name(f".tmp-{tokenizer.name}-killed"))  # as a killed run leaves it
    steps = planned(
        capsys,
        *arguments(bracketed, tiny_config, tiny_corpus, tiny_sts, "--until", UNTIL, "--set", "filter.min_tokens=150"),
    )
    assert steps["corpus"]["action"] == "reused" and steps["corpus"]["path"] == built["corpus"]
    assert steps["filter"]["action"] == "rebuilt" and steps["filter"]["previous"] == built["filter"]
    assert steps["filter"]["config_changes"] == {"min_tokens": {"before": 200, "now": 150}}
    assert steps["tokenizer"]["action"] == "rebuilt" and steps["tokenizer"]["why"].startswith("incomplete: ")


def test_an_empty_directory_builds_everything_and_the_rows_of_models_not_trained_are_unknown(
    tmp_path, capsys, tiny_config, tiny_corpus, tiny_sts
):
    art = tmp_path / "none" / "artifacts"
    steps = planned(capsys, *arguments(art, tiny_config, tiny_corpus, tiny_sts))
    known = {label: s for label, s in steps.items() if s["action"] != "unknown"}
    assert {s["action"] for s in known.values()} == {"built"}
    assert {"corpus", "filter", "init", "train/declutr", "train/mlm-only", "evaluate/untrained"} <= set(known)
    # An evaluate row of a trained model says what its model's manifest holds (its dev-selected step): it is
    # known once that model is trained, and so is the leaderboard over every row.
    unknown = {label: s for label, s in steps.items() if s["action"] == "unknown"}
    assert unknown["evaluate of train/declutr"]["after"] == ["train/declutr"]
    assert unknown["leaderboard"]["after"] == ["train/declutr", "train/mlm-only"]
    assert all(s["fingerprint"] is None and s["path"] is None for s in unknown.values())
    assert not art.parent.exists()


def tree(root: Path) -> dict[str, tuple]:
    """Every file and directory under `root`, with each file's size, modification time and bytes."""
    out = {}
    for where, dirs, files in os.walk(root):
        for d in dirs:
            out[os.path.relpath(os.path.join(where, d), root)] = ()
        for f in files:
            path = os.path.join(where, f)
            st = os.stat(path)
            out[os.path.relpath(path, root)] = (st.st_size, st.st_mtime_ns, Path(path).read_bytes())
    return out


def test_dry_run_prints_the_plan_in_plain_columns_and_leaves_the_artifacts_as_they_were(
    copy, capsys, tiny_config, tiny_corpus, tiny_sts
):
    art, built = copy
    (Path(built["tokenizer"]) / "_SUCCESS").unlink()  # a dataset a run would rebuild, and so write
    before = tree(art)
    capsys.readouterr()
    assert (
        main(
            [
                "run",
                "--dry-run",
                *arguments(art, tiny_config, tiny_corpus, tiny_sts, "--until", UNTIL, "--set", "filter.min_tokens=150"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert tree(art) == before
    header, *lines = out.splitlines()
    assert header.startswith("plan: will reuse ") and ", will rebuild " in header  # the run has built nothing yet
    assert lines[0].split() == ["instance", "action", "fingerprint", "path", "why"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == set(built)
    assert rows["corpus"].split()[:5] == ["corpus", "will", "reuse", Path(built["corpus"]).name, built["corpus"]]
    assert rows["tokenizer"].split()[1:3] == ["will", "rebuild"]
    assert "config changed: min_tokens 200 -> 150" in rows["filter"]
    # aligned: each column starts where its header does, and no path is cut
    starts = [lines[0].index(name) for name in ("action", "fingerprint", "path")]
    for line in lines[1:]:
        assert all(line[s - 2 : s] == "  " and line[s] != " " for s in starts), line
    assert not any("…" in line for line in lines)


def test_the_same_settings_under_another_fingerprint_read_as_a_new_stage_version(
    copy, capsys, tiny_config, tiny_corpus, tiny_sts
):
    art, built = copy
    moved = Path(built["filter"]).with_name("0123456789abcdef")  # as a bump of the stage's version leaves it
    Path(built["filter"]).rename(moved)
    steps = planned(capsys, *arguments(art, tiny_config, tiny_corpus, tiny_sts, "--until", "filter"))
    f = steps["filter"]
    assert f["action"] == "rebuilt" and f["previous"] == str(moved)
    assert f["config_changes"] == f["input_changes"] == {}
    assert f["why"] == "stage version changed (new code) (was 0123456789abcdef)"


def test_on_a_terminal_a_table_that_cuts_no_fingerprint_or_path(finished, tiny_config, tiny_corpus, tiny_sts):
    from io import StringIO

    from rich.console import Console

    from pipeline.plan import plan, show
    from pipeline.preflight import configured

    art, built = finished
    steps = plan(configured(str(tiny_config), str(tiny_corpus), str(tiny_sts), str(art), UNTIL), UNTIL)
    out = StringIO()
    show(steps, Console(file=out, force_terminal=True, width=90, color_system=None))
    text = out.getvalue()
    assert "│" in text and "…" not in text and re.search(rf"plan: will reuse {len(built)} *\n", text)
    for path in built.values():
        assert Path(path).name in text
        # a path folded over lines: its characters in order, once the table's borders and spaces are gone
        assert path in "".join(line.split("│")[4].strip() for line in text.splitlines() if line.count("│") > 4)
