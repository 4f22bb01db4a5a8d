"""Corpus + filter throughput, serial against 2 worker processes, and peak memory as the corpus grows.

Throughput: the corpus stage (read .txt files into Parquet) then the filter stage
(min_tokens 2048, exact dedup, no language filter) on N State of the Union
addresses, once with the serial backend and once with the filter's per-batch work
on 2 worker processes; the corpus stage has no parallel path yet, so it runs in
one process both times. Each path is timed against the bare tokenizer
(`count_tokens` on the same texts already in memory). The three alternate
(serial, parallel, bare, serial, ...), each stage run with a fresh fingerprint.

Memory: corpus + filter on N and on 10N documents, each in a fresh process; its
peak RSS comes from `os.wait4`. 10N repeats every address with a distinct first
line ("Copy k.") and a few words of its first sentence swapped, so dedup keeps
every copy. Target: peak RSS for 10N within 1.5x of N.

    CPIPE_SHARED_DATA=../shared/data .venv/bin/python -m bench.corpus_filter_scale [--n 233] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.common import in_fresh_process, own_peak_rss, shared_corpus
from pipeline.config import Config
from pipeline.corpus import stage as corpus
from pipeline.corpus.config import CorpusConfig
from pipeline.filter import docstats
from pipeline.filter import stage as filter
from pipeline.filter.config import FilterConfig
from pipeline.filter.docstats import count_tokens, text_key
from pipeline.parallel import ordered_map
from pipeline.stage import run_stage
from pipeline.tokenizer import stage as tokenizer
from storage import read_manifest, read_table

MB = 2**20


# ---- the corpora ---------------------------------------------------------------------------


def variant(text: str, copy: int, seed: int) -> str:
    """A distinct copy of a document: a "Copy k." first line and two word swaps in its first sentence."""
    end = text.find(". ")
    first, rest = (text[:end], text[end:]) if end > 0 else (text, "")
    words = first.split()
    rng = random.Random(seed)
    for _ in range(2):
        if len(words) >= 2:
            i, j = rng.sample(range(len(words)), 2)
            words[i], words[j] = words[j], words[i]
    return f"Copy {copy}.\n{' '.join(words)}{rest}"


def write_corpus(directory: Path, addresses: list[tuple[str, str]], count: int, base: int) -> int:
    """Documents 0..count-1: address i % base, as copy i // base (copy 0 is the address itself).

    With the same `base`, the N corpus is the first N documents of the 10N corpus and both
    hold the same addresses in the same proportions. Returns the bytes of text written.
    """
    directory.mkdir(parents=True)
    written = 0
    for i in range(count):
        stem, text = addresses[i % base]
        copy = i // base
        if copy:
            text = variant(text, copy, seed=i)
        name = f"copy{copy:03d}/{stem}.txt"
        (directory / name).parent.mkdir(exist_ok=True)
        written += (directory / name).write_text(text, encoding="utf-8")
    return written


def corpus_config(directory: Path, backend: str = "serial", workers: int = 1) -> dict:
    return corpus.config(
        Config(corpus=CorpusConfig(sources=[str(directory)]), parallel={"backend": backend, "workers": workers})
    )


def filter_config(args, backend: str, workers: int = 1) -> dict:
    cfg = FilterConfig(min_tokens=args.min_tokens, dedup=True, language=None, near_dedup=args.near_dedup)
    return {**cfg.model_dump(), "runtime": {"backend": backend, "workers": workers}}


# ---- peak RSS in a fresh process ------------------------------------------------------------


def child(args) -> None:
    """Runs in the fresh process: corpus + filter (or only the imports and tokenizer), then one JSON line."""
    start = time.perf_counter()
    if args.child == "baseline":
        docstats.tokenizer(args.child_tokenizer)
        print(json.dumps({"rss_self": own_peak_rss()}))
        return
    docs = run_stage(corpus.STAGE, corpus_config(Path(args.child_corpus)), {}, args.child_artifacts)
    after_corpus = own_peak_rss()
    corpus_s = time.perf_counter() - start
    kept = run_stage(
        filter.STAGE,
        filter_config(args, args.rss_backend, args.workers),
        {"corpus": docs, "tokenizer": args.child_tokenizer},
        args.child_artifacts,
    )
    print(
        json.dumps(
            {
                "docs": read_manifest(docs)["rows"],
                "kept": read_manifest(kept)["rows"],
                "corpus_s": corpus_s,
                "filter_s": time.perf_counter() - start - corpus_s,
                "rss_after_corpus": after_corpus,
                "rss_self": own_peak_rss(),
            }
        )
    )


def fresh_run(args, mode: str, tok: str, corpus_dir: Path | None = None, artifacts: Path | None = None) -> dict:
    """This module's --child in a fresh process, with its peak RSS."""
    cmd = [
        sys.executable,
        "-m",
        "bench.corpus_filter_scale",
        "--child",
        mode,
        "--child-tokenizer",
        tok,
        "--rss-backend",
        args.rss_backend,
        "--workers",
        str(args.workers),
        "--min-tokens",
        str(args.min_tokens),
    ]
    if corpus_dir is not None:
        cmd += ["--child-corpus", str(corpus_dir), "--child-artifacts", str(artifacts)]
    if args.near_dedup:
        cmd.append("--near-dedup")
    return in_fresh_process(cmd)


# ---- reporting ------------------------------------------------------------------------------


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def speedup(t_num: list[float], t_den: list[float]) -> str:
    """Throughput of num relative to den, run by run (both measured in the same repeat)."""
    ratios = sorted(d / n for n, d in zip(t_num, t_den))
    return f"{med(ratios):.3f} (min {ratios[0]:.3f}, max {ratios[-1]:.3f}, {len(ratios)} pairs)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--n",
        type=int,
        default=233,
        help="documents in the small corpus (the 233 addresses; more than that cycles through them as distinct copies)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each path, alternating")
    parser.add_argument("--scale", type=int, default=10, help="the large corpus holds scale * n documents")
    parser.add_argument("--workers", type=int, default=2, help="worker processes of the parallel filter")
    parser.add_argument("--min-tokens", type=int, default=2048)
    parser.add_argument(
        "--near-dedup", action="store_true", help="also MinHash near-dedup (drops most copies of the large corpus)"
    )
    parser.add_argument(
        "--rss-backend", choices=["serial", "processes"], default="serial", help="filter backend of the memory runs"
    )
    parser.add_argument("--skip-rss", action="store_true", help="throughput only")
    parser.add_argument("--child", choices=["run", "baseline"], help=argparse.SUPPRESS)
    parser.add_argument("--child-corpus", help=argparse.SUPPRESS)
    parser.add_argument("--child-artifacts", help=argparse.SUPPRESS)
    parser.add_argument("--child-tokenizer", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)

    addresses = [(p.stem, p.read_text(encoding="utf-8")) for p in sorted(shared_corpus().glob("*.txt"))]
    base = min(args.n, len(addresses))
    work = Path(tempfile.mkdtemp(prefix="bench-corpus-filter-"))
    try:
        small_dir, large_dir = work / "corpus-n", work / "corpus-large"
        small_bytes = write_corpus(small_dir, addresses, args.n, base)
        artifacts = str(work / "artifacts")
        docs = run_stage(corpus.STAGE, corpus_config(small_dir), {}, artifacts)
        tok = run_stage(
            tokenizer.STAGE,
            {"base": None, "vocab_size": 8192, "min_frequency": 2, "max_length": 514},
            {"corpus": docs},
            artifacts,
        )
        texts = read_table(docs, columns=["text"]).column("text").to_pylist()
        backend = docstats.tokenizer(tok)
        n_docs, n_tokens = len(texts), sum(count_tokens(backend, texts))

        # ---- throughput: serial, parallel, bare tokenizer, alternating -------------------------
        runs = iter(range(1_000_000))
        times: dict[str, list[float]] = {
            k: [] for k in ("serial", "parallel", "bare", "serial_corpus", "parallel_corpus", "pool")
        }
        kept_rows: set[int] = set()

        def pipeline(mode: str, cfg_corpus: dict, cfg_filter: dict, record: bool) -> None:
            run = next(runs)  # a fresh fingerprint each time, so both stages really run
            start = time.perf_counter()
            d = run_stage(corpus.STAGE, {**cfg_corpus, "bench_run": run}, {}, artifacts)
            mid = time.perf_counter()
            k = run_stage(filter.STAGE, {**cfg_filter, "bench_run": run}, {"corpus": d, "tokenizer": tok}, artifacts)
            end = time.perf_counter()
            kept_rows.add(read_manifest(k)["rows"])
            shutil.rmtree(d), shutil.rmtree(k)
            if record:
                times[mode].append(end - start)
                times[f"{mode}_corpus"].append(mid - start)

        def bare(record: bool) -> None:
            start = time.perf_counter()
            count_tokens(backend, texts)
            if record:
                times["bare"].append(time.perf_counter() - start)

        def pool(record: bool) -> None:
            # start-up alone: spawn the workers and import pipeline.filter.docstats in them, no documents
            start = time.perf_counter()
            list(ordered_map(text_key, ["x"] * args.workers, "processes", args.workers))
            if record:
                times["pool"].append(time.perf_counter() - start)

        serial_cfg = corpus_config(small_dir), filter_config(args, "serial")
        parallel_cfg = (
            corpus_config(small_dir, "processes", args.workers),
            filter_config(args, "processes", args.workers),
        )
        for i in range(args.repeats + 1):  # the first round warms up and is not recorded
            record = i > 0
            pipeline("serial", *serial_cfg, record)
            pipeline("parallel", *parallel_cfg, record)
            bare(record)
            pool(record)
        if len(kept_rows) != 1:
            raise SystemExit(f"serial and parallel runs kept different numbers of documents: {sorted(kept_rows)}")

        # ---- peak RSS: N and scale * N documents, each in a fresh process ---------------------
        rss = {}
        if not args.skip_rss:
            large_bytes = write_corpus(large_dir, addresses, args.scale * args.n, base)
            rss["baseline"] = fresh_run(args, "baseline", tok)
            rss["small"] = fresh_run(args, "run", tok, small_dir, work / "rss-small")
            shutil.rmtree(work / "rss-small")
            rss["large"] = fresh_run(args, "run", tok, large_dir, work / "rss-large")

        # ---- one block of results ----------------------------------------------------------
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        r = args.repeats
        print()
        print("=" * 100)
        print(
            f"corpus: {n_docs} documents ({small_bytes / MB:.1f} MB of text, {n_tokens:,} tokens, "
            f"{next(iter(kept_rows))} kept by the filter: min_tokens {args.min_tokens}, dedup on, "
            f"near_dedup {'on' if args.near_dedup else 'off'}, language None)"
        )
        print(f"machine: {cores} cores available; medians of {r} alternating runs after one warm-up round")
        print()
        print(f"{'path':<52}{'median s':>10}{'docs/s':>10}{'tokens/s':>13}{'  throughput vs bare tokenizer'}")
        rows = [
            ("serial: corpus + filter, one process", "serial"),
            (f"parallel: corpus and filter on {args.workers} workers", "parallel"),
            ("bare tokenizer (count_tokens, texts in memory)", "bare"),
        ]
        for label, key in rows:
            t = med(times[key])
            vs = "1" if key == "bare" else speedup(times[key], times["bare"])
            print(f"{label:<52}{t:>10.3f}{n_docs / t:>10,.1f}{n_tokens / t:>13,.0f}  {vs}")
        print()
        print(f"parallel / serial throughput: {speedup(times['parallel'], times['serial'])}")
        print(
            f"  of which the corpus stage: "
            f"{med(times['serial_corpus']):.3f}s serial run, {med(times['parallel_corpus']):.3f}s parallel run"
        )
        print(
            f"  filter stage alone: {med([a - b for a, b in zip(times['serial'], times['serial_corpus'])]):.3f}s "
            f"serial, {med([a - b for a, b in zip(times['parallel'], times['parallel_corpus'])]):.3f}s parallel "
            f"(includes starting the pool: spawn {args.workers} workers + import pipeline.filter.docstats "
            f"= {med(times['pool']):.3f}s on its own)"
        )
        print("  note: the tokenizer's Rust batch encoder is multi-threaded in every path, the bare one included")
        if rss:
            b, s, g = rss["baseline"], rss["small"], rss["large"]
            ratio = g["rss_peak"] / s["rss_peak"]
            print()
            print(f"peak RSS, corpus + filter (filter backend {args.rss_backend}) in a fresh process, from wait4:")
            print(f"  imports + tokenizer only:             {b['rss_peak'] / MB:8.1f} MB")
            for label, res, size in (
                (f"N   = {args.n:>6} docs", s, small_bytes),
                (f"{args.scale}N = {args.scale * args.n:>6} docs", g, large_bytes),
            ):
                print(
                    f"  {label} ({size / MB:7.1f} MB text): {res['rss_peak'] / MB:8.1f} MB "
                    f"(after the corpus stage {res['rss_after_corpus'] / MB:.1f} MB; "
                    f"{res['docs']} read, {res['kept']} kept; corpus {res['corpus_s']:.1f}s, "
                    f"filter {res['filter_s']:.1f}s)"
                )
            print(f"  ratio {args.scale}N / N: {ratio:.2f} (target <= 1.5: {'met' if ratio <= 1.5 else 'NOT met'})")
            print(
                f"  above the imports-only peak: N +{(s['rss_peak'] - b['rss_peak']) / MB:.1f} MB, "
                f"{args.scale}N +{(g['rss_peak'] - b['rss_peak']) / MB:.1f} MB "
                f"(the imports, torch through transformers, dominate the ratio)"
            )
        print("=" * 100)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
