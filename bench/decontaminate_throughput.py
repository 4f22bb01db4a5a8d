"""Decontamination's matching against the bare word split of the same documents, on one core.

The whole shared corpus (its 303 documents, the filter keeping all but duplicates) against the n-grams of the whole
shared `eval/`: `Matcher.find` on the stage's batches splits the documents at spaces, simplifies each distinct
piece it has not seen and looks its words up in the evaluation vocabulary, then hashes windows with numpy where an
evaluation n-gram may begin; the reference is `str.split` of the texts already in memory. "cold" forgets the pieces
before each pass, as a fresh process knows none (this corpus's 71k distinct pieces are 3.5% of its pieces); "warm"
has seen them all. Also timed once: building the index (reading every evaluation file
with the evaluation's readers, then hashing), and the stage (reading the documents' Parquet, matching, writing).

    CPIPE_SHARED_DATA=../shared/data .venv/bin/python -m bench.decontaminate_throughput [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time

from bench.common import alternate, ratio_report, shared_corpus
from pipeline.config import Config
from pipeline.corpus import stage as corpus
from pipeline.corpus.config import CorpusConfig
from pipeline.decontaminate import stage as decontaminate
from pipeline.decontaminate.match import Matcher
from pipeline.decontaminate.ngrams import Pieces
from pipeline.filter import stage as filter
from pipeline.stage import run_stage
from pipeline.tokenizer import stage as tokenizer
from storage import read_manifest, read_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    data = str(shared_corpus().parents[1] / "eval")
    work = tempfile.mkdtemp(prefix="bench-decont-")
    try:
        raw = run_stage(
            corpus.STAGE, corpus.config(Config(corpus=CorpusConfig(sources=[str(shared_corpus().parent)]))), {}, work
        )
        tok = run_stage(
            tokenizer.STAGE,
            {"base": None, "vocab_size": 8192, "min_frequency": 2, "max_length": 514},
            {"corpus": raw},
            work,
        )
        docs = run_stage(
            filter.STAGE, filter.config(Config(filter={"min_tokens": 0})), {"corpus": raw, "tokenizer": tok}, work
        )
        column = read_table(docs, columns=["text"]).column("text").combine_chunks()
        texts = column.to_pylist()
        where = {"data": data, "transfer": True, "dev_sets": []}
        start = time.perf_counter()
        index = decontaminate.indexed(json.dumps(where, sort_keys=True), decontaminate.listing(where), 13, 8)
        built = time.perf_counter() - start
        matcher, lookup = Matcher(index), index.lookup()
        n_words = sum(len(t.split()) for t in texts)

        def warm() -> None:
            for i in range(0, len(texts), decontaminate.BATCH):
                matcher.find(column.slice(i, decontaminate.BATCH))

        def cold() -> None:
            matcher.pieces = Pieces(lookup)
            warm()

        def bare() -> None:
            for t in texts:
                t.split()

        warm(), bare()  # warm-up
        ngrams = sum(len(k) for k in matcher.keys.values())
        print(
            f"{len(texts)} documents, {n_words:,} words; index: {ngrams:,} n-grams of {len(index.tasks)} tasks, "
            f"built in {built:.2f}s"
        )
        for name, match in (("match, cold", cold), ("match, warm", warm)):
            t_match, t_bare = alternate(match, bare, args.repeats)
            print(ratio_report(name, t_match, "bare split", t_bare, n_words, "words"))
        config = {"mode": "drop", "n": 13, "min_words": 8, "ngrams": index.digest(), "runtime": where}
        start = time.perf_counter()
        built = read_manifest(run_stage(decontaminate.STAGE, config, {"documents": docs}, work))
        print(
            f"the stage on the corpus dataset (index cached): {time.perf_counter() - start:.2f}s; "
            f"{built['counts']}, by task {built['contaminated_by_task']}"
        )
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
