"""Peak memory and step time of a contrastive batch 8x the default, with and without gradient caching.

`configs/default.yaml`'s `declutr` run and model (2 layers x 128 hidden, vocab
8,192), but `--scale` times its batch: 128 anchors x 2 positives = 384 spans of
128 tokens, with MLM on the anchors. Both modes run `pipeline.train.step.train_step`:
"full batch" with `train.grad_cache` unset, "GradCache" with it set to one
default step's spans (16 + 32 = 48), which goes through
`pipeline.train.gradcache.cached_step`. Each measurement is a fresh process, so its
peak RSS (`ru_maxrss`) is its own; on CUDA, when there is one,
`torch.cuda.max_memory_allocated`. Processes alternate full, cached, full,
cached ...; the first step of each is dropped.

    .venv/bin/python -m bench.gradcache_memory [--scale 8] [--steps 3] [--repeats 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import torch
from transformers import AutoModelForMaskedLM

from bench.common import ratio_report
from pipeline.config import load_config
from pipeline.model.transformer import SpanEncoder, scratch_config
from pipeline.train.optim import make_optimizer
from pipeline.train.step import train_step

SPECIAL = {
    "bos": 0,
    "pad": 1,
    "eos": 2,
    "mask": 4,
}  # the trained tokenizer's order (pipeline.tokenizer.loading.SPECIAL)
MODES = {"full": "full batch", "cached": "GradCache"}


class _Vocab:
    """What `scratch_config` reads from a tokenizer, without training one."""

    def __init__(self, size: int):
        self.size, self.pad_token_id, self.bos_token_id, self.eos_token_id = size, 1, 0, 2

    def __len__(self) -> int:
        return self.size


def child(mode: str, device: str, scale: int, steps: int, threads: int | None) -> dict:
    cfg = load_config("configs/default.yaml")
    run = cfg.run_configs()["declutr"]
    torch.set_num_threads(threads or run.torch_threads or os.cpu_count())
    torch.manual_seed(run.seed)
    vocab = cfg.tokenizer.vocab_size
    mlm_model = AutoModelForMaskedLM.from_config(scratch_config(cfg.model, _Vocab(vocab)))
    model = SpanEncoder(mlm_model, run.pooling, run.projection)
    model.to(device).train()
    optimizer, scheduler = make_optimizer(model, run, steps)
    special = {**SPECIAL, "vocab": vocab}
    generator = torch.Generator().manual_seed(run.seed)
    b, k, length = scale * run.batch_size, cfg.augment.num_positives, cfg.augment.max_length

    def spans(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        ids = torch.randint(5, vocab, (n, length), generator=generator)
        ids[:, 0], ids[:, -1] = SPECIAL["bos"], SPECIAL["eos"]
        return ids, torch.ones_like(ids)

    batch = {"anchors": spans(b), "positives": spans(b * k), "num_positives": k}
    chunk = run.batch_size * (1 + k)
    run = run.model_copy(update={"grad_cache": chunk if mode == "cached" else None})
    cuda = device.startswith("cuda")
    baseline = torch.cuda.memory_allocated() if cuda else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        train_step(model, optimizer, scheduler, batch, run, special, generator)
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated() if cuda else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "baseline": baseline,
        "peak": peak,
        "times": times[1:],
        "anchors": b,
        "positives": k,
        "length": length,
        "chunk": chunk,
        "threads": torch.get_num_threads(),
    }


def measure(mode: str, device: str, args) -> dict:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.gradcache_memory",
            "--child",
            mode,
            "--device",
            device,
            "--scale",
            str(args.scale),
            "--steps",
            str(args.steps),
        ]
        + (["--threads", str(args.threads)] if args.threads else []),
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.splitlines()[-1])


def report(device: str, runs: dict[str, list[dict]]) -> None:
    first = runs["full"][0]
    label = "peak allocated" if device.startswith("cuda") else "peak RSS"
    print(
        f"\n{device}: {first['anchors']} anchors x {first['positives']} positives x {first['length']} tokens "
        f"({first['anchors'] * (1 + first['positives'])} spans), GradCache chunks of {first['chunk']} spans, "
        f"{first['threads']} torch threads, {len(runs['full'])} processes a mode"
    )
    rows = {}
    for mode in MODES:
        peak = statistics.median(r["peak"] for r in runs[mode]) / 2**20
        step = statistics.median(r["peak"] - r["baseline"] for r in runs[mode]) / 2**20
        time_ = statistics.median(t for r in runs[mode] for t in r["times"])
        rows[mode] = (peak, step, time_)
    print(f"| mode | {label} | step's own peak (above model + data) | median step |")
    print("|---|---|---|---|")
    for mode, name in MODES.items():
        peak, step, time_ = rows[mode]
        print(f"| {name} | {peak:,.0f} MiB | {step:,.0f} MiB | {time_:.2f} s |")
    (pc, sc, tc), (pf, sf, tf) = rows["cached"], rows["full"]
    print(f"| **GradCache / full** | **{pc / pf:.2f}** | **{sc / sf:.2f}** | **{tc / tf:.2f}** |")
    per_process = {mode: [statistics.median(r["times"]) for r in runs[mode]] for mode in MODES}
    pairs = first["anchors"]
    print(ratio_report("full batch", per_process["full"], "GradCache", per_process["cached"], pairs, "pairs"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=int, default=8, help="batch as a multiple of the default")
    parser.add_argument("--steps", type=int, default=3, help="steps a process, the first one dropped")
    parser.add_argument("--repeats", type=int, default=3, help="processes a mode and device")
    # On a loaded machine threads wait on each other at the end of every op, and the cached step runs
    # each forward op 16 times (2 passes x 8 chunks) to the full batch's once: 1 thread compares fairly there.
    parser.add_argument("--threads", type=int, help="torch threads (default: the run's, else every core)")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--device", default="cpu", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.device, args.scale, args.steps, args.threads)))
        return
    for device in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):
        runs = {mode: [] for mode in MODES}
        for _ in range(args.repeats):
            for mode in MODES:
                runs[mode].append(measure(mode, device, args))
        report(device, runs)


if __name__ == "__main__":
    main()
