"""Every command's usage mistakes answer in one line on stderr, exit 2, before torch, transformers, Prefect or Ray
is imported (seconds each: a mistake would wait for them)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pipeline.errors import ConfigError
from pipeline.preflight import configured
from tests.conftest import ROOT

HEAVY = ("torch", "transformers", "prefect", "ray")
# The CLI's main as `cpipe` and the run it starts call it; then which heavy modules the error path imported (an
# argparse error leaves main by SystemExit).
PROBE = (
    "import sys\nfrom flows.cli import main\ntry:\n    code = main(sys.argv[1:])\nexcept SystemExit as e:\n"
    f"    code = e.code\nprint(sorted(m for m in {HEAVY!r} if m in sys.modules))\nsys.exit(code)"
)


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "--until", "nosuch"], "cpipe run: error: argument --until: invalid choice: 'nosuch'"),
        (["run", "--corpus", "{tmp}/no-corpus", "--artifacts", "{tmp}/a"], "cpipe: error: corpus"),
        (
            [
                "run",
                "--corpus",
                "{tmp}/c.txt",
                "--artifacts",
                "{tmp}/a",
                "--set",
                "augment.simcse_sup.nli=[{tmp}/nli.jsonl]",
            ],
            "cpipe: error: augment.simcse_sup.nli: no such file: {tmp}/nli.jsonl",
        ),
        (
            ["run", "--corpus", "{tmp}/c.txt", "--artifacts", "{tmp}/a", "--set", "train.lr=.inf"],
            "cpipe: error: config error: --set train.lr=.inf: train.lr: Input should be a finite number",
        ),
        (
            ["serve", "--corpus", "{tmp}/c.txt", "--eval-data", "{tmp}/no-eval"],
            "cpipe: error: evaluate.data: {tmp}/no-eval: no such file or directory",
        ),
        (["evaluate"], "cpipe evaluate: error: the following arguments are required: --model"),
        (
            ["submit", "--address", "http://127.0.0.1:9", "--corpuss", "x"],
            "cpipe submit: error: unrecognized arguments: --corpuss x",
        ),
        (
            ["embed", "--model", "m", "--input", "{tmp}/in.txt"],
            "cpipe embed: error: the following arguments are required: --output",
        ),
        (
            ["embed", "--model", "m", "--input", "{tmp}/in.txt", "--output", "{tmp}/o.parquet", "--batch-size", "0"],
            "cpipe embed: error: argument --batch-size: must be at least 1, not 0",
        ),
        (
            ["embed", "--model", "{tmp}", "--input", "{tmp}/none.txt", "--output", "{tmp}/o.parquet"],
            "cpipe: error: {tmp}/none.txt: no such file",
        ),
        (
            ["embed", "--model", "{tmp}", "--input", "{tmp}/in.doc", "--output", "{tmp}/o.parquet"],
            "cpipe: error: {tmp}/in.doc: unknown input type '.doc'",
        ),
        (["inspect", "{tmp}", "--rows", "-1"], "cpipe inspect: error: argument --rows: must be at least 0, not -1"),
        (["inspect", "{tmp}/nothing"], "cpipe: error: "),
    ],
)
def test_a_usage_error_is_one_line_and_exit_2_before_any_heavy_import(tmp_path, args, message):
    (tmp_path / "c.txt").write_text("a document\n")
    (tmp_path / "in.txt").write_text("a sentence\n")
    (tmp_path / "in.doc").write_text("a sentence\n")
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *(a.format(tmp=tmp_path) for a in args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(message.format(tmp=tmp_path)), proc.stderr
    assert proc.stdout.strip() == "[]", f"imported before the error: {proc.stdout}"
    assert not (tmp_path / "a").exists() and not (tmp_path / "o.parquet").exists()


def test_a_missing_nli_file_is_checked_only_by_runs_that_make_pairs(tmp_path, tiny_corpus):
    nli = [f"augment.simcse_sup.nli=[{tmp_path / 'nli.jsonl'}]"]
    with pytest.raises(ConfigError, match=r"^augment\.simcse_sup\.nli: no such file: "):
        configured(corpus=str(tiny_corpus), artifacts=str(tmp_path / "a"), overrides=nli)
    configured(corpus=str(tiny_corpus), artifacts=str(tmp_path / "a"), overrides=nli, until="filter")
    (tmp_path / "nli.jsonl").write_text("{}\n")
    configured(corpus=str(tiny_corpus), artifacts=str(tmp_path / "a"), overrides=nli)
