"""The data side at 100 MB and 1 GB: corpus -> filter -> decontaminate -> augment (DeCLUTR, SimCSE), serial and on
worker processes, each stage in a fresh process: its time, documents/s, MB/s and peak RSS, and the large / small
ratios of time and memory.

The corpus is made from the shared corpora (the State of the Union addresses, WikiText-2's validation articles,
the OpenWebText sample): each document takes the length of a real document drawn at random and is filled with real
paragraphs drawn at random from all of them, so its sentences and paragraphs are real text, while exact and near
dedup (word 5-grams, Jaccard 0.8) keep it. It is written once under --work (not in the repository) and reused.
The stages run as `cpipe run` runs them: `configs/declutr-small.yaml` (min_tokens 2048, language en with the
shared lid.176, near dedup; DeCLUTR's spans of up to 512 tokens, one epoch) with --corpus, --eval-data (the shared
`eval/`) and `--set parallel.backend=... parallel.workers=...`; SimCSE is `runs={simcse: {objective: simcse}}`.
The tokenizer is trained once, on the shared addresses. Every result is appended to --work/results.jsonl as it
comes (with the load average), and `--report` prints the tables from it.

--ray-data compares, on the same documents, decontamination's matching through `ordered_map(backend="ray")` and
through Ray Data's `map_batches` on an actor pool with preserve_order, the same number of workers, each timed from
the call to the last result (start-up included), alternating.

    CPIPE_SHARED_DATA=../shared/data nice -n 5 .venv/bin/python -m bench.data_scale --mb 100 1000 --workers 2
    CPIPE_SHARED_DATA=../shared/data .venv/bin/python -m bench.data_scale --report
    CPIPE_SHARED_DATA=../shared/data nice -n 5 .venv/bin/python -m bench.data_scale --ray-data --mb 30 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import shutil
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import pyarrow.compute as pc

from bench.common import ROOT, in_fresh_process, own_peak_rss, shared_corpus
from pipeline.config import load_config
from pipeline.stage import run_stage
from storage import iter_batches, read_manifest

MB = 2**20
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'])")
STAGES = ("corpus", "filter", "decontaminate", "augment-declutr", "augment-simcse")
OBJECTIVES = {"augment-declutr": "declutr", "augment-simcse": "simcse"}
INPUT = {
    "corpus": "corpus",
    "filter": "corpus",
    "decontaminate": "filter",
    **dict.fromkeys(OBJECTIVES, "decontaminate"),
}


# ---- the corpus ------------------------------------------------------------------------------


def real_documents() -> list[str]:
    """The shared corpora's documents: addresses, WikiText-2's validation articles, the OpenWebText sample."""
    root = shared_corpus().parent
    docs = [p.read_text(encoding="utf-8") for p in sorted((root / "sotu").glob("*.txt"))]
    for path in sorted((root / "openwebtext-sample").glob("*.jsonl")):
        docs += [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    wiki = (root / "wikitext-2" / "wiki.valid.raw").read_text(encoding="utf-8")
    docs += [a for a in re.split(r"\n(?= = [^=].* = \n)", wiki) if a.strip()]  # an article starts at " = Title = "
    return docs


def pieces(docs: list[str], rng: random.Random):
    """The documents' lines cut into runs of 1 to 8 whole sentences: many addresses are a few lines of thousands of
    words, and drawn whole they would make documents that near dedup rightly drops."""
    for doc in docs:
        for line in doc.split("\n"):
            sentences = SENTENCE_END.split(line.strip())
            while sentences and sentences[0]:
                k = rng.randint(1, 8)
                yield " ".join(sentences[:k])
                sentences = sentences[k:]


def write_corpus(directory: Path, mb: int, seed: int = 0) -> dict:
    """About `mb` MB of documents as .txt files, 1,000 a folder; written once (its summary in _done.json). Each
    takes a real document's length and is filled with runs of sentences drawn from all of them, a line each."""
    done = directory / "_done.json"
    if done.exists():
        return json.loads(done.read_text())
    shutil.rmtree(directory, ignore_errors=True)
    docs = real_documents()
    lengths = [len(d) for d in docs]
    rng, written, n = random.Random(seed), 0, 0
    paragraphs = list(pieces(docs, rng))
    while written < mb * MB:
        target, parts, size = rng.choice(lengths), [], 0
        while size < target:
            parts.append(rng.choice(paragraphs))
            size += len(parts[-1]) + 1
        path = directory / f"{n // 1000:04d}" / f"doc{n:07d}.txt"
        if n % 1000 == 0:
            path.parent.mkdir(parents=True)
        written += path.write_text("\n".join(parts), encoding="utf-8")
        n += 1
    summary = {"mb": mb, "documents": n, "bytes": written, "paragraph_pool": len(paragraphs)}
    done.write_text(json.dumps(summary))
    return summary


# ---- one stage in a fresh process -------------------------------------------------------------


def profile(corpus: str, backend: str, workers: int, objective: str | None = None):
    eval_data = str(shared_corpus().parents[1] / "eval")
    lid = str(shared_corpus().parents[1] / "models" / "lid.176.ftz")
    sets = [f"parallel.backend={backend}", f"parallel.workers={workers}", f"filter.langid_model={lid}"]
    if objective is not None:
        sets.append(f"runs={{{objective}: {{objective: {objective}}}}}")
    return load_config(
        ROOT / "configs" / "declutr-small.yaml", sets, **{"corpus.sources": [corpus], "evaluate.data": eval_data}
    )


def child(spec: dict) -> None:
    from pipeline.augment import stage as augment
    from pipeline.corpus import stage as corpus
    from pipeline.decontaminate import stage as decontaminate
    from pipeline.filter import stage as filter

    name, done = spec["stage"], spec["done"]
    objective = OBJECTIVES.get(name)
    cfg = profile(spec["corpus"], spec["backend"], spec["workers"], objective)
    if name == "corpus":
        stage, config, inputs = corpus.STAGE, corpus.config(cfg), {}
    elif name == "filter":
        stage, config, inputs = filter.STAGE, filter.config(cfg), filter.inputs(cfg, done)
    elif name == "decontaminate":
        stage, config, inputs = decontaminate.STAGE, decontaminate.config(cfg), decontaminate.inputs(cfg, done)
    else:
        run = cfg.run_configs()[objective]
        stage, config, inputs = augment.STAGE, augment.config(cfg, run), augment.inputs(cfg, done, run)
    before, cpu, driver = own_peak_rss(), cpu_seconds(), cpu_seconds(workers=False)
    start = time.perf_counter()
    path = run_stage(stage, config, inputs, spec["artifacts"])
    seconds, cpu, driver = time.perf_counter() - start, cpu_seconds() - cpu, cpu_seconds(workers=False) - driver
    result = {"path": path, "seconds": seconds, "stage_cpu_s": cpu, "driver_cpu_s": driver}
    print(json.dumps({**result, "rss_self": own_peak_rss(), "rss_before": before}))


def cpu_seconds(workers: bool = True) -> float:
    """CPU time of this process's threads (and its reaped workers'): the cores the work needs, whatever the load."""
    used = [resource.getrusage(resource.RUSAGE_SELF)]
    if workers:
        used.append(resource.getrusage(resource.RUSAGE_CHILDREN))
    return sum(u.ru_utime + u.ru_stime for u in used)


def text_bytes(dataset: str) -> int:
    """The UTF-8 bytes of a dataset's text column, read shard by shard."""
    return sum(pc.sum(pc.binary_length(b.column("text"))).as_py() or 0 for b in iter_batches(dataset, ["text"]))


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def commit() -> str:
    head = (ROOT / ".git" / "HEAD").read_text().strip()
    ref = ROOT / ".git" / head.removeprefix("ref: ") if head.startswith("ref: ") else None
    return (ref.read_text().strip() if ref and ref.exists() else head)[:7]


def measure(args, size: int, summary: dict, corpus_dir: Path, tok: str, backend: str) -> None:
    workers = 1 if backend == "serial" else args.workers
    artifacts = Path(args.work) / f"artifacts-{size}mb-{backend}"
    shutil.rmtree(artifacts, ignore_errors=True)
    done: dict[str, str] = {"tokenizer": tok}
    mb_in = {"corpus": summary["bytes"] / MB}
    rows_in = {"corpus": summary["documents"]}
    try:
        for name in args.stages:
            spec = {
                "stage": name,
                "done": done,
                "corpus": str(corpus_dir),
                "backend": backend,
                "workers": workers,
                "artifacts": str(artifacts),
            }
            before = load()
            r = in_fresh_process([sys.executable, "-m", "bench.data_scale", "--child", json.dumps(spec)])
            read = INPUT[name]  # what the stage read: the generated files for the corpus stage
            if read not in mb_in:
                mb_in[read], rows_in[read] = text_bytes(done[read]) / MB, read_manifest(done[read])["rows"]
            if name in INPUT.values():
                done[name] = r["path"]
            manifest = read_manifest(r["path"])
            row = {
                "size_mb": size,
                "backend": backend,
                "workers": workers,
                "stage": name,
                "seconds": r["seconds"],
                "cpu_s": r["stage_cpu_s"],
                "driver_cpu_s": r["driver_cpu_s"],
                "process_cpu_s": r["cpu_s"],
                "docs_in": rows_in[read],
                "mb_in": mb_in[read],
                "rows_out": manifest["rows"],
                "counts": manifest.get("counts", {}),
                "rss_driver": r["rss_self"],
                "rss_imports": r["rss_before"],
                "rss_tree": r["rss_peak"],
                "load_before": before,
                "load_after": load(),
                "commit": commit(),
                "at": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
            }
            with open(Path(args.work) / "results.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
            print(
                f"{size} MB {backend:<9} {name:<16} {r['seconds']:8.1f} s  {rows_in[read] / r['seconds']:8.1f} docs/s  "
                f"{mb_in[read] / r['seconds']:6.2f} MB/s  cpu {r['stage_cpu_s']:7.1f} s  driver {r['rss_self'] / MB:6.0f} MB  "
                f"tree {r['rss_peak'] / MB:6.0f} MB  out {manifest['rows']}  load {before}",
                flush=True,
            )
    finally:
        if not args.keep:
            shutil.rmtree(artifacts, ignore_errors=True)


def tokenizer(work: Path) -> str:
    """The profile's tokenizer settings, trained from scratch on the shared addresses."""
    from pipeline.config import Config
    from pipeline.corpus import stage as corpus
    from pipeline.corpus.config import CorpusConfig
    from pipeline.tokenizer import stage as tokenizer_stage

    cfg = profile(str(shared_corpus()), "serial", 1)
    docs = run_stage(
        corpus.STAGE, corpus.config(Config(corpus=CorpusConfig(sources=[str(shared_corpus())]))), {}, str(work)
    )
    return run_stage(tokenizer_stage.STAGE, {"base": None, **cfg.tokenizer.model_dump()}, {"corpus": docs}, str(work))


# ---- Ray Data against ordered_map on Ray ------------------------------------------------------


def ray_data(args, documents: str) -> None:
    import ray

    from pipeline.decontaminate import stage as decontaminate
    from pipeline.decontaminate.match import Matcher
    from pipeline.parallel import ordered_map
    from storage.dataset import shards

    cfg = profile(str(shared_corpus()), "serial", 1)
    settings = decontaminate.sources(cfg)
    index = decontaminate.indexed(
        json.dumps(settings, sort_keys=True),
        decontaminate.listing(settings),
        cfg.decontaminate.n,
        cfg.decontaminate.min_words,
    )
    matcher = Matcher(index)
    n_docs, n_mb = read_manifest(documents)["rows"], text_bytes(documents) / MB
    start = time.perf_counter()
    ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
    ray_start = time.perf_counter() - start
    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True
    ctx.enable_progress_bars = False

    def with_ordered_map() -> list[bool]:
        texts = (b.column("text") for b in iter_batches(documents, ["text"], batch_size=decontaminate.BATCH))
        return [bool(h) for hits in ordered_map(Matcher.find, texts, "ray", args.workers, shared=matcher) for h in hits]

    class Match:
        def __init__(self, shared):
            self.matcher = shared

        def __call__(self, batch):
            import pyarrow as pa

            return pa.table({"dirty": [bool(h) for h in self.matcher.find(batch.column("text").combine_chunks())]})

    def with_ray_data() -> list[bool]:
        # Each actor holds half a CPU slot: Ray Data's file listing and reading take a whole one (num_cpus=0 does not
        # reach the listing), and with the actors holding both slots they never ran. Two processes match either way.
        # As many blocks as ordered_map has units: a dataset of one shard is otherwise one block, for one actor.
        blocks = -(-n_docs // decontaminate.BATCH)
        ds = ray.data.read_parquet(shards(documents), override_num_blocks=blocks).select_columns(["text"])
        ds = ds.map_batches(
            Match,
            fn_constructor_args=(matcher,),
            batch_size=decontaminate.BATCH,
            batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=args.workers),
            num_cpus=0.5,
        )
        return [
            d for b in ds.iter_batches(batch_format="pyarrow", batch_size=None) for d in b.column("dirty").to_pylist()
        ]

    times: dict[str, list[float]] = defaultdict(list)
    results = {}
    for _ in range(args.repeats):
        for name, fn in (("ordered_map", with_ordered_map), ("ray_data", with_ray_data)):
            start = time.perf_counter()
            results[name] = fn()
            times[name].append(time.perf_counter() - start)
            print(f"{name}: {times[name][-1]:.2f} s, load {load()}", flush=True)
    if results["ordered_map"] != results["ray_data"]:
        raise SystemExit("Ray Data and ordered_map disagree on which documents hold evaluation text")
    print(f"{n_docs} documents, {n_mb:.1f} MB, {sum(results['ray_data'])} holding evaluation text; load {load()}")
    print(f"ray.init(num_cpus={args.workers}): {ray_start:.1f} s (both share it); {args.workers} workers each")
    for name, ts in times.items():
        m = statistics.median(ts)
        print(
            f"{name:<12} median {m:7.2f} s ({n_docs / m:7.1f} docs/s, {n_mb / m:5.2f} MB/s); "
            f"runs {', '.join(f'{t:.2f}' for t in ts)}"
        )
    ratios = sorted(a / b for a, b in zip(times["ray_data"], times["ordered_map"]))
    print(
        f"throughput ordered_map / Ray Data: median {statistics.median(ratios):.2f} ({ratios[0]:.2f}-{ratios[-1]:.2f})"
    )
    ray.shutdown()


# ---- the report -------------------------------------------------------------------------------


def report(work: Path) -> None:
    rows = [json.loads(line) for line in (work / "results.jsonl").read_text().splitlines() if line.strip()]
    latest = {(r["size_mb"], r["backend"], r["stage"]): r for r in rows}  # a repeated run replaces the earlier one
    print(
        "| size | stage | backend | s | docs/s | MB/s | driver peak RSS | tree peak RSS | docs in → out | load | commit |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---|---|---|")
    for (size, backend, stage), r in sorted(latest.items(), key=lambda kv: (kv[0][0], STAGES.index(kv[0][2]))):
        print(
            f"| {size} MB | {stage} | {backend} ({r['workers']}) | {r['seconds']:.1f} | {r['docs_in'] / r['seconds']:.1f} "
            f"| {r['mb_in'] / r['seconds']:.2f} | {r['rss_driver'] / MB:,.0f} MB | {r['rss_tree'] / MB:,.0f} MB "
            f"| {r['docs_in']:,} → {r['rows_out']:,} | {r['load_before']} | {r['commit']} |"
        )
    sizes = sorted({k[0] for k in latest})
    print()
    print(
        "| stage | backend | large / small | time | driver peak RSS | tree peak RSS | MB/s ratio 2 workers / serial |"
    )
    print("|---|---|---|---:|---:|---:|---|")
    for stage in STAGES:
        for backend in ("serial", "processes"):
            for small, large in zip(sizes, sizes[1:]):
                a, b = latest.get((small, backend, stage)), latest.get((large, backend, stage))
                if a and b:
                    print(
                        f"| {stage} | {backend} | {large} / {small} MB | {b['seconds'] / a['seconds']:.2f} "
                        f"| {b['rss_driver'] / a['rss_driver']:.2f} | {b['rss_tree'] / a['rss_tree']:.2f} | |"
                    )
        for size in sizes:
            s, p = latest.get((size, "serial", stage)), latest.get((size, "processes", stage))
            if s and p:
                print(f"| {stage} | 2 workers / serial | {size} MB | | | | {s['seconds'] / p['seconds']:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, nargs="+", default=[100, 1000], help="corpus sizes in MB")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--backends", nargs="+", default=["serial", "processes"], choices=["serial", "processes"])
    parser.add_argument("--stages", nargs="+", default=list(STAGES), choices=STAGES, help="a prefix of the stages")
    parser.add_argument("--work", default="/tmp/data-scale", help="corpora, artifacts and results.jsonl")
    parser.add_argument("--keep", action="store_true", help="keep each run's artifacts")
    parser.add_argument("--report", action="store_true", help="print the tables from results.jsonl")
    parser.add_argument("--ray-data", action="store_true", help="decontamination: Ray Data against ordered_map")
    parser.add_argument("--repeats", type=int, default=3, help="--ray-data's alternating runs")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(json.loads(args.child))
    work = Path(args.work)
    if args.report:
        return report(work)
    work.mkdir(parents=True, exist_ok=True)
    tok = tokenizer(work / "tokenizer")
    for size in args.mb:
        corpus_dir = work / f"corpus-{size}mb"
        start = time.perf_counter()
        summary = write_corpus(corpus_dir, size)
        print(f"{size} MB corpus: {summary} ({time.perf_counter() - start:.1f} s)", flush=True)
        if args.ray_data:
            from pipeline.config import Config
            from pipeline.corpus import stage as corpus
            from pipeline.corpus.config import CorpusConfig

            docs = run_stage(
                corpus.STAGE, corpus.config(Config(corpus=CorpusConfig(sources=[str(corpus_dir)]))), {}, str(work)
            )
            ray_data(args, docs)
            continue
        for backend in args.backends:
            measure(args, size, summary, corpus_dir, tok, backend)


if __name__ == "__main__":
    main()
