"""One training step inside Ray Train against the same step in a plain torch loop.

Both run `pipeline.train.step.train_step` on the same pairs, model and thread count;
Ray's side is the train stage's TorchTrainer, whose worker reads its slice of
the pair shards (`pipeline.train.shard`), the plain side slices an in-memory Arrow table. Steady-state
step times are compared (the first steps are warm-up); Ray's one-off start-up
is reported apart. Target: overhead <= 15%.

    .venv/bin/python -m bench.train_step_overhead [--steps 60] [--repeats 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

import numpy as np
import pandas as pd
import torch

from bench.common import shared_corpus
from flows.pipeline_flows import build
from pipeline import registry
from pipeline.config import Config, load_config
from pipeline.model.transformer import HF_DIR, SpanEncoder, load_mlm
from pipeline.ray_session import ray_init
from pipeline.stage import run_stage
from pipeline.tokenizer.loading import load_tokenizer
from pipeline.train import stage as train
from pipeline.train.batching import collate, special_ids
from pipeline.train.config import TrainConfig
from pipeline.train.optim import make_optimizer
from pipeline.train.step import train_step
from storage import read_table

WARMUP = 10


def prepare(work: str, cfg: Config) -> tuple[str, str]:
    """The run's pairs and initial model, built by each stage's own config and inputs, as a run builds them."""
    done: dict[str, str] = {}
    build(
        cfg,
        registry.stages(last="init"),
        done,
        "init",
        run_one=lambda stage, config, inputs, label: run_stage(stage, config, inputs, work),
    )
    [row] = train.STAGE.keys(cfg, done).values()
    inputs = train.STAGE.inputs(cfg, done, row)
    return inputs["pairs"], inputs["init"]


def plain_loop(pairs: str, init_path: str, cfg: TrainConfig, steps: int) -> list[float]:
    torch.set_num_threads(cfg.torch_threads or os.cpu_count())
    torch.manual_seed(cfg.seed)
    model = SpanEncoder(load_mlm(f"{init_path}/{HF_DIR}")).train()
    optimizer, scheduler = make_optimizer(model, cfg, steps)
    special = special_ids(load_tokenizer(f"{init_path}/{HF_DIR}"))
    table = read_table(pairs, columns=["anchor_ids", "positive_ids"])
    generator = torch.Generator().manual_seed(cfg.seed)
    times = []
    for step in range(steps):
        start = time.perf_counter()
        batch = collate(table.slice(step * cfg.batch_size, cfg.batch_size), special, cfg.max_length, True)
        train_step(model, optimizer, scheduler, batch, cfg, special, generator)
        times.append(time.perf_counter() - start)
    return times[WARMUP:]


def ray_loop(
    pairs: str, init_path: str, cfg: TrainConfig, steps: int, work: str, attempt: int
) -> tuple[list[float], float, float]:
    start = time.perf_counter()
    settings = {**cfg.model_dump(), "max_steps": steps, "checkpoint_every": steps}
    path = run_stage(train.STAGE, {"train": settings, "attempt": attempt}, {"pairs": pairs, "init": init_path}, work)
    wall = time.perf_counter() - start
    metrics = pd.read_parquet(f"{path}/metrics.parquet")
    seconds = metrics["seconds"].to_numpy()
    step_times = np.diff(seconds)[WARMUP - 1 :].tolist()
    print(f"  Ray worker waited on data: median {metrics['data_seconds'][WARMUP:].median() * 1000:.1f} ms a step")
    return step_times, wall - seconds[-1], wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    if args.steps <= WARMUP:  # the steps timed are those after the warm-up
        parser.error(f"--steps must be more than the {WARMUP} warm-up steps")
    sotu = shared_corpus()  # the evaluation data beside it: what decontaminate keeps out
    cfg = load_config(
        "configs/default.yaml",
        [
            f"corpus.sources=[{sotu}]",
            f"evaluate.data={sotu.parents[1]}/eval/senteval",
            "seeds=[0]",
            "runs={declutr: {}}",
        ],
    )
    run_cfg = cfg.run_configs()["declutr"]
    work = tempfile.mkdtemp(prefix="bench-train-")
    try:
        pairs, init_path = prepare(work, cfg)
        ray_init(None, cfg.ray.num_cpus)
        plain, ray_steps, startup, walls = [], [], [], []
        for attempt in range(args.repeats):
            plain += plain_loop(pairs, init_path, run_cfg, args.steps)
            steps, overhead, wall = ray_loop(pairs, init_path, run_cfg, args.steps, work, attempt)
            ray_steps += steps
            startup.append(overhead)
            walls.append(wall)
        p, r = statistics.median(plain), statistics.median(ray_steps)
        print(
            f"batch {run_cfg.batch_size} anchors x {cfg.augment.num_positives} positives, "
            f"{args.steps} steps x {args.repeats} repeats, {WARMUP} warm-up steps dropped each"
        )
        print(f"plain torch loop: median step {p * 1000:.1f} ms")
        print(f"Ray Train worker: median step {r * 1000:.1f} ms")
        print(f"Ray Train step overhead: {100 * (r / p - 1):+.1f}%")
        print(f"Ray Train one-off start-up and export per fit: median {statistics.median(startup):.1f}s")
        print(f"the train stage's whole fit ({args.steps} steps): median {statistics.median(walls):.1f}s")
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
