"""Peak memory of the filter stage (with and without near-duplicates) and the DeCLUTR and SimCSE augment
stages on one long single-line document.

The document is the State of the Union addresses joined into one line, repeated to --mb megabytes (30: a
crawled page gone wrong). Each stage runs in a fresh process, which reports its peak RSS (ru_maxrss) and its
RSS before the stage ran (imports, tokenizer), so the difference is what the document cost.

    .venv/bin/python -m bench.long_document_memory [--mb 30]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import shared_corpus

MB = 2**20


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def stage(case: str, work: str) -> None:
    """One stage over the prepared datasets, in this (fresh) process; prints its memory as JSON."""
    from pipeline.augment import stage as augment
    from pipeline.config import Config
    from pipeline.filter import stage as filter
    from pipeline.filter.config import FilterConfig
    from pipeline.stage import run_stage

    paths = json.loads((Path(work) / "paths.json").read_text())
    before = rss_mb()
    if case.startswith("filter"):
        # The defaults (2048 tokens, exact duplicates, no language ID), with MinHash near-duplicates or without.
        config = {**FilterConfig(near_dedup=case == "filter-neardup").model_dump(), "runtime": {}}
        path = run_stage(filter.STAGE, config, {"corpus": paths["corpus"], "tokenizer": paths["tokenizer"]}, work)
    else:
        cfg = Config(runs={case: {"objective": case}})
        path = run_stage(
            augment.STAGE,
            augment.config(cfg, cfg.run_configs()[case]),
            {"documents": paths["filter"], "tokenizer": paths["tokenizer"]},
            work,
        )
    print(json.dumps({"before_mb": before, "peak_mb": rss_mb(), "path": path}))


def measure(case: str, work: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "bench.long_document_memory", "--stage", case, "--work", work],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=float, default=30)
    parser.add_argument("--stage", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stage:
        return stage(args.stage, args.work)
    from pipeline.config import Config
    from pipeline.corpus import stage as corpus
    from pipeline.corpus.config import CorpusConfig
    from pipeline.stage import run_stage
    from pipeline.tokenizer import stage as tokenizer

    work = tempfile.mkdtemp(prefix="bench-longdoc-")
    try:
        texts = [" ".join(p.read_text(encoding="utf-8").split()) for p in sorted(shared_corpus().glob("*.txt"))]
        line = " ".join(texts)
        (Path(work) / "docs").mkdir()
        (Path(work) / "docs" / "long.txt").write_text(
            (line + " ") * int(args.mb * MB // len(line) + 1), encoding="utf-8"
        )
        docs = run_stage(corpus.STAGE, corpus.config(Config(corpus=CorpusConfig(sources=[f"{work}/docs"]))), {}, work)
        # The tokenizer section's default (BPE, 8192), trained on the addresses (not on the long line: its training is not
        # what is measured).
        sotu = run_stage(
            corpus.STAGE, corpus.config(Config(corpus=CorpusConfig(sources=[str(shared_corpus())]))), {}, f"{work}/sotu"
        )
        tok = run_stage(tokenizer.STAGE, tokenizer.config(Config()), {"corpus": sotu}, work)
        paths = {"corpus": docs, "tokenizer": tok}
        (Path(work) / "paths.json").write_text(json.dumps(paths))
        results = {"filter": measure("filter", work)}
        paths["filter"] = results["filter"]["path"]
        (Path(work) / "paths.json").write_text(json.dumps(paths))
        results |= {case: measure(case, work) for case in ("filter-neardup", "declutr", "simcse")}
        size = (Path(work) / "docs" / "long.txt").stat().st_size / MB
        print(f"one {size:.1f} MB single-line document")
        for case, r in results.items():
            print(
                f"{case:<15} peak RSS {r['peak_mb']:8.0f} MB  ({r['peak_mb'] - r['before_mb']:6.0f} MB above the "
                f"{r['before_mb']:.0f} MB before the stage)"
            )
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
