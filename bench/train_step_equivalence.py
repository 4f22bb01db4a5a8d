"""The first steps' losses of every way the trainer can run a step, against the step run bare in float32.

The Ray Train worker (pipeline.train.loop.train_loop) runs `train_step` on a model that Ray's `prepare_model`
has moved to its GPU and wrapped in DistributedDataParallel with `ddp_options`. Ray's wheel is too large
for the GPU machine this project borrows, so this runs the worker's code path without Ray: the same
wrapper in a one-process process group (NCCL on a GPU, gloo on CPU), then `train_step` as the worker
calls it. Every case starts from the same weights (dropout off, so steps are deterministic up to
rounding) on the paper's span lengths, and takes `--steps` optimizer steps; the table gives each
step's loss and its largest relative difference from the float32, eager, padded step without DDP.

    python -m bench.train_step_equivalence --device cuda            # DistilRoBERTa's shape, bf16
    python -m bench.train_step_equivalence --device cpu --tiny      # a smoke run
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from transformers import AutoModelForMaskedLM, RobertaConfig

from bench.train_mfu import DISTILROBERTA, TINY, spans_table
from pipeline.config import load_config
from pipeline.objectives.spans import span_length
from pipeline.train.batching import collate
from pipeline.train.optim import make_optimizer
from pipeline.train.step import ddp_options, make_encoder, make_scaler, train_step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--tolerance", type=float, default=2e-2, help="relative, for the bf16 cases")
    args = parser.parse_args()
    cuda = args.device.startswith("cuda")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29511")
    dist.init_process_group("nccl" if cuda else "gloo", rank=0, world_size=1)

    cfg = load_config("configs/declutr-small.yaml")
    base = cfg.run_configs()["declutr"].model_copy(update={"grad_cache": None, "use_gpu": cuda})
    shape = TINY if args.tiny else DISTILROBERTA
    anchors = 4 if args.tiny else base.batch_size
    special = {
        "bos": 0,
        "pad": 1,
        "eos": 2,
        "mask": shape["vocab_size"] - 1,
        "vocab": shape["vocab_size"],
        "positions": cfg.augment.max_length,
    }
    rng = np.random.default_rng(base.seed)
    batches = [
        collate(
            spans_table(
                anchors,
                cfg.augment.num_positives,
                lambda a, b: span_length(rng, a, b, cfg.augment.min_length, cfg.augment.max_length),
                shape["vocab_size"],
                rng,
            ),
            special,
            cfg.augment.max_length,
            True,
        )
        for _ in range(args.steps)
    ]
    config = RobertaConfig(
        **shape,
        type_vocab_size=1,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        layer_norm_eps=1e-5,
        attn_implementation="sdpa",
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    torch.manual_seed(base.seed)
    weights = AutoModelForMaskedLM.from_config(config).state_dict()

    def losses(precision: str, compiled: bool, packing: bool, blocks: int | None, ddp: bool) -> list[float]:
        run = base.model_copy(
            update={"precision": precision, "compile": compiled, "packing": packing, "block_tokens": blocks}
        )
        mlm = AutoModelForMaskedLM.from_config(config)
        mlm.load_state_dict(weights)
        model = make_encoder(mlm, run).to(args.device).train()
        optimizer, scheduler = make_optimizer(model, run, args.steps)
        if ddp:  # as ray.train.torch.prepare_model wraps it
            model = DistributedDataParallel(model, device_ids=[0] if cuda else None, **ddp_options(run))
        scaler = make_scaler(precision, torch.device(args.device).type)
        generator = torch.Generator().manual_seed(base.seed)
        return [
            train_step(model, optimizer, scheduler, batch, run, special, generator, scaler=scaler)["loss"]
            for batch in batches
        ]

    low = "bf16" if cuda else "fp32"
    cases = [
        ("fp32, eager, padded (reference)", ("fp32", False, False, None, False)),
        (f"{low}, eager, padded", (low, False, False, None, False)),
        (f"{low}, eager, length blocks", (low, False, False, 4096, False)),
        (f"{low}, eager, packed", (low, False, True, 4096, False)),
        (f"{low}, compiled, length blocks, DDP (the Ray worker's path)", (low, True, False, 4096, True)),
        (f"{low}, compiled, packed, DDP (the Ray worker's path)", (low, True, True, 4096, True)),
    ]
    reference = None
    worst = 0.0
    print(
        f"{'tiny' if args.tiny else 'declutr-small'} architecture on {args.device}; {anchors} anchors; "
        f"{args.steps} steps; dropout off"
    )
    for label, case in cases:
        got = losses(*case)
        reference = reference or got
        diff = max(abs(g - r) / abs(r) for g, r in zip(got, reference))
        worst = max(worst, diff)
        print(f"{label}: losses {', '.join(f'{x:.5f}' for x in got)}; largest relative difference {diff:.2e}")
    dist.destroy_process_group()
    print(f"every case within {args.tolerance:.0e} of the reference: {'yes' if worst <= args.tolerance else 'NO'}")
    if worst > args.tolerance:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
