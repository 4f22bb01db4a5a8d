"""What the bootstrap intervals add to building a leaderboard: a table of N models on every column the evaluation
has (STS12-16 in their subsets, STS-B and SICK-R under both protocols, the eight transfer tasks with MR, CR, SUBJ
and MPQA in 10 folds), with the test sets' real sizes, built with and without the models' test items.

The items are synthetic (a model's predictions are its gold scores or labels plus noise): the cost depends on
the items' number and strata, not their values. Also times Spearman over the resamples both ways the
bootstrap could compute it, draw counts with average ranks (what pipeline.leaderboard.bootstrap does) against
sorting index arrays (scipy.stats.rankdata), on SICK-R's 4,927 pairs.

    .venv/bin/python -m bench.leaderboard_intervals [--models 8] [--repeats 3] [--seeds 1]

With --seeds S, each of the N rows is S models, "model-i (seed s)": rows over seeds (pipeline.leaderboard.seeds),
their differences pooled over seeds.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
from scipy import stats

from pipeline.evaluate import resampled
from pipeline.leaderboard import bootstrap
from pipeline.leaderboard.table import leaderboard

# Test items per stratum (SentEval's files; STS12-16 per subset).
STS = {
    "STS12": [750, 750, 750, 399, 459],
    "STS13": [750, 561, 189],
    "STS14": [750, 750, 750, 450, 300, 750],
    "STS15": [750, 750, 375, 750, 375],
    "STS16": [254, 249, 230, 209, 244],
}
RELATEDNESS = {"STSB": 1379, "SICKR": 4927}
TRANSFER = {
    "MR": (10662, 2),
    "CR": (3775, 2),
    "SUBJ": (10000, 2),
    "MPQA": (10606, 2),
    "SST2": (1821, 2),
    "TREC": (500, 6),
    "MRPC": (1725, 2),
    "SICKE": (4927, 3),
}
KFOLD = ("MR", "CR", "SUBJ", "MPQA")


def synthetic(models: int, seed: int = 0) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    rng = np.random.default_rng(seed)
    gold = {
        **{t: [rng.uniform(0, 5, n).round(1) for n in sizes] for t, sizes in STS.items()},
        **{t: [rng.uniform(1, 5, n).round(1)] for t, n in RELATEDNESS.items()},
        **{t: np.array_split(rng.integers(0, c, n), 10 if t in KFOLD else 1) for t, (n, c) in TRANSFER.items()},
    }
    scores, items = [], {}
    for m in range(models):
        name, frames = f"model-{m}", []

        def keep(task, protocol, strata, predict):
            preds = [predict(g) for g in strata]
            for i, (p, g) in enumerate(zip(preds, strata)):
                stratum = f"fold {i}" if task in KFOLD else (f"subset {i}" if task in STS else "all")
                frames.append(
                    pd.DataFrame(
                        {
                            "task": task,
                            "protocol": protocol,
                            "stratum": stratum,
                            "prediction": p.astype(float),
                            "gold": g.astype(float),
                        }
                    )
                )
            return preds

        def row(task, metric, protocol, value):
            scores.append(
                {
                    "model": name,
                    "task": task,
                    "subset": "all",
                    "split": "test",
                    "metric": metric,
                    "protocol": protocol,
                    "value": float(value),
                    "n": 1,
                }
            )

        def noisy(g):
            return g + rng.normal(scale=2 + m / 4, size=len(g))

        for task in STS:
            p = keep(task, "cosine", gold[task], noisy)
            row(task, "spearman", "senteval", np.mean([stats.spearmanr(x, g).statistic for x, g in zip(p, gold[task])]))
            row(task, "spearman", "simcse", stats.spearmanr(np.concatenate(p), np.concatenate(gold[task])).statistic)
        for task in RELATEDNESS:
            for protocol in ("cosine", "senteval"):
                [p] = keep(task, protocol, gold[task], noisy)
                row(task, "spearman", protocol, stats.spearmanr(p, gold[task][0]).statistic)
        for task, (_, classes) in TRANSFER.items():
            p = keep(
                task,
                "senteval",
                gold[task],
                lambda g: np.where(rng.random(len(g)) < 0.8, g, rng.integers(0, classes, len(g))),
            )
            row(task, "accuracy", "senteval", np.mean([np.mean(x == g) for x, g in zip(p, gold[task])]))
            if task == "MRPC":
                tp = np.sum((p[0] == 1) & (gold[task][0] == 1))
                row(task, "f1", "senteval", 2 * tp / (2 * tp + np.sum(p[0] != gold[task][0])))
        items[name] = pd.concat(frames, ignore_index=True)
    return pd.DataFrame(scores), items


def spearman_ways(n: int = 4927, b: int = bootstrap.B) -> tuple[float, float]:
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=n), rng.uniform(0, 5, n).round(1)
    idx = bootstrap.indices("SICKR", [n], b)[0]
    started = time.perf_counter()
    rx, ry = resampled.Ranker(x), resampled.Ranker(y)
    counted = np.concatenate(
        [
            resampled.spearman(rx, ry, resampled.Resample(bootstrap.counts(idx[i : i + bootstrap.CHUNK], n)))
            for i in range(0, b, bootstrap.CHUNK)
        ]
    )
    by_counts = time.perf_counter() - started
    started = time.perf_counter()
    sorted_ = np.concatenate(
        [
            [
                stats.pearsonr(a, c).statistic
                for a, c in zip(
                    stats.rankdata(x[idx[i : i + bootstrap.CHUNK]], axis=1),
                    stats.rankdata(y[idx[i : i + bootstrap.CHUNK]], axis=1),
                )
            ]
            for i in range(0, b, bootstrap.CHUNK)
        ]
    )
    by_sorting = time.perf_counter() - started
    assert np.allclose(counted, sorted_)
    return by_counts, by_sorting


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=1, help="models per row, as seeds of one run")
    args = parser.parse_args()
    scores, items = synthetic(args.models * args.seeds)
    if args.seeds > 1:
        named = {f"model-{m}": f"model-{m // args.seeds} (seed {m % args.seeds})" for m in range(len(items))}
        scores["model"], items = scores["model"].map(named), {named[m]: frame for m, frame in items.items()}
    print(
        f"{args.models} rows of {args.seeds} seed(s), {len(next(iter(items.values()))):,} test items each, "
        f"B = {bootstrap.B}"
    )
    for _ in range(args.repeats):
        # CPU seconds beside wall seconds: on a shared machine the wall clock counts the neighbours' work too.
        started, cpu = time.perf_counter(), time.process_time()
        plain = leaderboard(scores)
        middle, middle_cpu = time.perf_counter(), time.process_time()
        table = leaderboard(scores, items=items, compare_to="model-0")
        done, done_cpu = time.perf_counter(), time.process_time()
        print(
            f"leaderboard without intervals {middle - started:.2f} s ({middle_cpu - cpu:.2f} CPU s), with "
            f"intervals and comparisons {done - middle:.2f} s ({done_cpu - middle_cpu:.2f} CPU s; "
            f"{len(plain.columns)} -> {len(table.columns)} columns)"
        )
    counts, sorting = spearman_ways()
    print(
        f"Spearman of {bootstrap.B} resamples of 4,927 pairs: draw counts and average ranks {counts:.2f} s, "
        f"sorted index arrays (scipy rankdata) {sorting:.2f} s"
    )


if __name__ == "__main__":
    main()
