"""One model's evaluation, serial against `evaluate.workers: 2` (its tasks as Ray tasks), on the whole shared eval data.

The model is configs/default.yaml's (2 layers x 128 hidden, byte-level BPE trained on the shared corpus, as
the init stage exports it). Both sides score every task under `eval/` (STS, SICK, the transfer tasks, the
analysis) into a fresh artifacts directory, so nothing is reused; the serial side runs in this process
with torch's threads, the parallel side as the flow runs it, a Ray task per model fanning out one task
per unit. Both write the same rows (checked). Runs alternate, so drift in the machine hits both alike.

    .venv/bin/python -m bench.evaluate_parallel [--repeats 2] [--workers 2] [--kfold 10]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile

import ray

from bench.common import alternate, default_model, shared_corpus
from pipeline.config import Config
from pipeline.evaluate import stage as evaluate
from pipeline.evaluate.config import EvaluateConfig
from pipeline.stage import run_stage
from storage import read_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--kfold", type=int, default=10)
    args = parser.parse_args()
    data = str(shared_corpus().parents[1] / "eval")
    work = tempfile.mkdtemp(prefix="bench-evaluate-")
    try:
        model = default_model(work)
        row = evaluate.Row("default", {"kind": "untrained"}, {"model": model}, {})

        def job(workers: int) -> tuple[dict, dict]:
            cfg = Config(evaluate=EvaluateConfig(data=data, kfold=args.kfold, workers=workers))
            return evaluate.config(cfg, row), row.inputs

        outputs: dict[str, list[str]] = {"serial": [], "ray": []}

        def serial() -> None:
            outputs["serial"].append(run_stage(evaluate.STAGE, *job(1), tempfile.mkdtemp(dir=work)))

        def parallel() -> None:
            config, inputs = job(args.workers)
            outputs["ray"].append(run_stage(evaluate.STAGE, config, inputs, tempfile.mkdtemp(dir=work)))

        # "local": our own instance, never a cluster that `ray start` left on this machine
        ray.init(address="local", num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
        t_ray, t_serial = alternate(parallel, serial, args.repeats)
        tables = [read_table(p) for p in outputs["serial"] + outputs["ray"]]
        assert all(t.equals(tables[0]) for t in tables), "serial and Ray scores differ"
        units = len(read_table(outputs["ray"][0]).column("task").unique())
        print(
            f"{tables[0].num_rows} rows over {units} tasks; {args.workers} Ray workers; kfold {args.kfold}; "
            f"{args.repeats} alternating pairs"
        )
        ratios = sorted(s / r for r, s in zip(t_ray, t_serial))
        print(f"evaluate, serial: median {statistics.median(t_serial):.1f} s")
        print(f"evaluate, workers {args.workers} (Ray): median {statistics.median(t_ray):.1f} s")
        print(
            f"speed-up serial / Ray: median {statistics.median(ratios):.3f} (min {ratios[0]:.3f}, "
            f"max {ratios[-1]:.3f}, {len(ratios)} pairs)"
        )
    finally:
        if ray.is_initialized():
            ray.shutdown()
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
