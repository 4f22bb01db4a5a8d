"""Filter stage throughput against the bare tokenizer on the same documents.

The filter stage reads the corpus dataset, counts tokens, deduplicates and writes
Parquet; the reference only tokenizes texts already in memory. Target: >= 0.8.

    .venv/bin/python -m bench.filter_throughput [--repeats 5]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile

from bench.common import alternate, ratio_report, shared_corpus
from pipeline.config import Config
from pipeline.corpus import stage as corpus
from pipeline.corpus.config import CorpusConfig
from pipeline.filter import docstats
from pipeline.filter import stage as filter
from pipeline.filter.docstats import count_tokens
from pipeline.stage import run_stage
from pipeline.tokenizer import stage as tokenizer
from storage import read_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="bench-filter-")
    try:
        docs = run_stage(
            corpus.STAGE, corpus.config(Config(corpus=CorpusConfig(sources=[str(shared_corpus())]))), {}, work
        )
        tok = run_stage(
            tokenizer.STAGE,
            {"base": None, "vocab_size": 8192, "min_frequency": 2, "max_length": 514},
            {"corpus": docs},
            work,
        )
        texts = read_table(docs, columns=["text"]).column("text").to_pylist()
        backend = docstats.tokenizer(tok)
        n_tokens = sum(count_tokens(backend, texts))
        runs = iter(range(10_000))

        def stage() -> None:
            # a fresh fingerprint each time, so the stage really runs
            run_stage(
                filter.STAGE,
                filter.config(Config()),  # min_tokens 2048, dedup
                {"corpus": docs, "tokenizer": tok},
                work,
                fp=f"{next(runs):016x}",
            )

        def bare() -> None:
            count_tokens(backend, texts)

        stage(), bare()  # warm-up
        t_stage, t_bare = alternate(stage, bare, args.repeats)
        print(f"{len(texts)} documents, {n_tokens:,} tokens")
        print(ratio_report("filter stage", t_stage, "bare tokenizer", t_bare, len(texts), "docs"))
        print(f"tokens/s through the filter stage: {n_tokens / sorted(t_stage)[len(t_stage) // 2]:,.0f}")
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
