"""Helpers for benchmarks: a corpus to measure on, and timing of alternating runs."""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RSS_UNIT = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux


def own_peak_rss() -> int:
    """This process's peak RSS in bytes."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * RSS_UNIT


def in_fresh_process(cmd: list[str]) -> dict:
    """Run `cmd` (from the repository root) and return the JSON of its last stdout line, with "rss_peak": the peak
    RSS in bytes of it or the largest of its reaped workers, and "cpu_s": the CPU seconds of it and them, from wait4."""
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True, env={**os.environ, "TQDM_DISABLE": "1"}
        )
        out = proc.stdout.read()  # to EOF, i.e. until the child exits; then reap it ourselves
        proc.stdout.close()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            raise SystemExit(f"child {' '.join(cmd)} failed ({proc.returncode}):\n{err.read()[-4000:]}")
    result = json.loads(out.strip().splitlines()[-1])
    result["rss_peak"] = usage.ru_maxrss * RSS_UNIT
    result["cpu_s"] = usage.ru_utime + usage.ru_stime
    return result


def shared_corpus() -> Path:
    """The State of the Union addresses from the team's shared data (real, long documents)."""
    root = Path(os.environ.get("CPIPE_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
    sotu = root / "corpus" / "sotu"
    if not sotu.is_dir():
        raise SystemExit(f"benchmark data not found at {sotu}: set CPIPE_SHARED_DATA")
    return sotu


def default_model(work: str) -> str:
    """configs/default.yaml's model as the init stage exports it (a BPE trained on the shared corpus, initial
    weights), built under `work`."""
    from pipeline.config import Config, load_config
    from pipeline.corpus import stage as corpus
    from pipeline.corpus.config import CorpusConfig
    from pipeline.init import stage as init
    from pipeline.stage import run_stage
    from pipeline.tokenizer import stage as tokenizer

    cfg = load_config(Path(__file__).resolve().parents[1] / "configs" / "default.yaml")
    docs = run_stage(corpus.STAGE, corpus.config(Config(corpus=CorpusConfig(sources=[str(shared_corpus())]))), {}, work)
    tok = run_stage(tokenizer.STAGE, {"base": None, **cfg.tokenizer.model_dump()}, {"corpus": docs}, work)
    return run_stage(init.STAGE, cfg.model.model_dump(), {"tokenizer": tok}, work)


def alternate(a: Callable[[], None], b: Callable[[], None], repeats: int) -> tuple[list[float], list[float]]:
    """Time a and b in turn (A B A B ...), so drift in machine speed hits both alike."""
    ta, tb = [], []
    for _ in range(repeats):
        for fn, times in ((a, ta), (b, tb)):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return ta, tb


def ratio_report(name_a: str, ta: list[float], name_b: str, tb: list[float], work: float, unit: str) -> str:
    ratios = sorted(b / a for a, b in zip(ta, tb))
    return "\n".join(
        [
            f"{name_a}: median {statistics.median(ta):.3f}s  ({work / statistics.median(ta):,.0f} {unit}/s)",
            f"{name_b}: median {statistics.median(tb):.3f}s  ({work / statistics.median(tb):,.0f} {unit}/s)",
            f"throughput ratio {name_a} / {name_b}: median {statistics.median(ratios):.3f} "
            f"(min {ratios[0]:.3f}, max {ratios[-1]:.3f}, {len(ratios)} pairs)",
        ]
    )
