"""What publishing one model costs when the cumulative leaderboard keeps N - 1 models' test items: a run of N - 1
models is published (their items kept), then a run of one more model, timed, then that model re-scored, timed.
Each model has the synthetic items of bench.leaderboard_intervals (every column `eval/` can give, at the test sets'
real sizes: about 70k items a model).

Beside each publish: what it wrote into the kept items (one file per model, so only its own) against what the
store holds, and the cumulative table's build alone, with and without the intervals (the part that grows with N).

    .venv/bin/python -m bench.publish_cumulative [--models 20]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa

from bench.leaderboard_intervals import synthetic
from pipeline.evaluate.items import ITEMS
from pipeline.leaderboard import kept_items
from pipeline.leaderboard import stage as board
from pipeline.leaderboard.table import leaderboard
from pipeline.stage import run_stage
from storage import DatasetWriter, dataset_path

CONFIG = {"rank_by": None, "compare_to": None, "compare_to_default": "model-0"}


def evaluated(art: str, scores: pd.DataFrame, items: pd.DataFrame, model: str, fp: str) -> str:
    rows = scores[scores["model"] == model].assign(kind="user", model_fingerprint=f"{model:0>16}"[-16:], data_hash="d")
    with DatasetWriter(art, "evaluate", fp, config={"model": model, "spec": {"kind": "user"}}, inputs={}) as out:
        out.write(pa.Table.from_pandas(rows, preserve_index=False))
        items.to_parquet(f"{out.local_dir}/{ITEMS}", index=False)
    return dataset_path(art, "evaluate", fp)


def publish(art: str, paths: list[str]) -> str:
    """A run's leaderboard over `paths`, published: the seconds of both (CPU seconds beside wall seconds: on a shared
    machine the wall clock counts the neighbours' work too)."""
    started, cpu = time.perf_counter(), time.process_time()
    path = run_stage(board.STAGE, CONFIG, {f"scores-{i}": p for i, p in enumerate(paths)}, art)
    middle, middle_cpu = time.perf_counter(), time.process_time()
    board.publish(path, art)
    return (
        f"leaderboard stage {middle - started:.2f} s ({middle_cpu - cpu:.2f} CPU s), publish "
        f"{time.perf_counter() - middle:.2f} s ({time.process_time() - middle_cpu:.2f} CPU s)"
    )


def files(art: str) -> dict[str, tuple[int, int, int]]:
    """Each kept items file's (inode, modification time, size): storage.put_file replaces a file by a rename."""
    return {
        p.name: (s.st_ino, s.st_mtime_ns, s.st_size)
        for p in Path(art, board.CUMULATIVE_ITEMS).iterdir()
        for s in [p.stat()]
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", type=int, default=20)
    args = parser.parse_args()
    scores, items = synthetic(args.models)
    names = list(items)
    n_items = len(items[names[0]])
    with tempfile.TemporaryDirectory(prefix="cpipe-bench-") as art:
        paths = [evaluated(art, scores, items[m], m, f"e{i:015d}") for i, m in enumerate(names)]
        print(f"{args.models - 1} models published at once, {n_items:,} test items each: {publish(art, paths[:-1])}")
        for what, path in (
            ("one more model", paths[-1]),
            ("the same model re-scored", evaluated(art, scores, items[names[-1]], names[-1], "r" * 16)),
        ):
            before = files(art)
            timing = publish(art, [path])
            after = files(art)
            written = [f[2] for name, f in after.items() if before.get(name) != f]
            print(
                f"{what}: {timing}; wrote {len(written)} kept items "
                f"file ({sum(written) / 1e6:.2f} MB), the store holds {sum(f[2] for f in after.values()) / 1e6:.2f} "
                f"MB in {len(after)} files"
            )
        merged = pd.read_parquet(f"{art}/{board.CUMULATIVE_SCORES}")
        started = time.perf_counter()
        kept = kept_items.gather(f"{art}/{board.CUMULATIVE_ITEMS}", merged, merged.iloc[:0], {})
        read = time.perf_counter() - started
        started, cpu = time.perf_counter(), time.process_time()
        leaderboard(merged)
        plain, plain_cpu = time.perf_counter() - started, time.process_time() - cpu
        started, cpu = time.perf_counter(), time.process_time()
        leaderboard(merged, items=kept, compare_to="model-0")
        full, full_cpu = time.perf_counter() - started, time.process_time() - cpu
        print(
            f"of which, for the {len(kept)} rows: reading the kept items {read:.2f} s, the table without intervals "
            f"{plain:.2f} s ({plain_cpu:.2f} CPU s), with intervals and differences {full:.2f} s "
            f"({full_cpu:.2f} CPU s)"
        )


if __name__ == "__main__":
    main()
