"""Two gloo workers on one global batch take the same step as one worker: the contrastive loss sees
every worker's embeddings (all-gathered) and the gradients come out exact, not world-size times off.
With MoCo, the keys are all-gathered before they join the queue, and the key encoders stay equal; with
supervised SimCSE's hard negatives (tests.test_simcse_sup), each anchor's own is found among the gathered rows.
TSDAE's loss is the token mean over the global batch, though the workers' halves hold unequal token counts.
With scale_fix false, the contrastive gradient is DeCLUTR's multi-GPU one: 1 / world size of one worker's."""

from __future__ import annotations

import pyarrow as pa
import pytest
import torch
import torch.multiprocessing as mp

from pipeline.train.batching import collate, special_ids
from pipeline.train.config import TrainConfig
from pipeline.train.memory_bank import run_bank
from pipeline.train.moco import MomentumEncoder
from pipeline.train.optim import make_optimizer
from pipeline.train.step import ddp_options, make_encoder, train_step
from tests.conftest import free_port
from tests.test_simcse_sup import with_negatives
from tests.test_train_step import pairs, tiny_encoder

# Plain SGD, so that the first update is lr times the gradient: Adam's moves a weight whose gradient is float
# noise (~1e-9, its sign the reduction order's) by the full lr, and the second step's gradients then differ by
# far more than rounding (a flake in roberta's token_type_embeddings). The optimizer is not what is compared.
CFG = dict(
    lr=1e-3,
    batch_size=8,
    mlm=False,
    grad_clip=1e9,  # clipping would hide a scale error
    optimizer="sgd",
    sgd_momentum=0.0,
    weight_decay=0.0,
)


def tsdae_pairs(tok) -> pa.Table:
    """Originals of 4 to 32 tokens: the first worker's half of the batch holds far fewer than the second's."""
    rows = pairs(tok, n=8, positives=1).column("anchor_ids").to_pylist()
    return pa.Table.from_pylist(
        [{"anchor_ids": ids[: 3 + i], "positive_ids": [ids[: 4 + 4 * i]]} for i, ids in enumerate(rows)]
    )


def step(tok, rank: int, world: int, cfg: TrainConfig) -> tuple[float, dict]:
    """Two steps on this worker's half (or all) of one batch of 8 pairs; the second step's loss and gradients
    (and the key encoder's weights, with MoCo). simcse-sup's first: the gradients of its hard negatives' few
    extra embedding rows are float noise, and after one update the second step's differ by 1%."""
    model = make_encoder(tiny_encoder(tok).mlm_model, cfg)  # with its head, and TSDAE's decoder
    key = MomentumEncoder(model, cfg.momentum) if cfg.momentum else None
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, **ddp_options(cfg))
    optimizer, scheduler = make_optimizer(model, cfg, 10)
    special = special_ids(tok)
    rows = {"tsdae": lambda: tsdae_pairs(tok), "simcse-sup": lambda: with_negatives(pairs(tok, n=8))}.get(
        cfg.objective, lambda: pairs(tok, n=8)
    )()
    share = rows.num_rows // world
    batch = collate(rows.slice(rank * share, share), special, 64, True)
    bank = run_bank(cfg, cfg.projection_dim or 32)  # the head's width, as the loop sizes it
    metrics = [
        train_step(model, optimizer, scheduler, batch, cfg, special, None, bank, key_encoder=key)
        for _ in range(1 if cfg.objective == "simcse-sup" else 2)
    ][-1]
    module = model.module if world > 1 else model
    result = {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}
    if key is not None:
        result.update({f"key.{n}": p.clone() for n, p in key.module.named_parameters()})
    return metrics["loss"], result


CASES = {
    "plain": {},
    "grad-cache": {"grad_cache": 5},
    "memory-bank": {"memory_bank": 8},
    "moco": {"objective": "cert", "momentum": 0.9, "memory_bank": 8},
    # The earlier MoCo case as it was: the in-batch loss under the optimisation every objective then had.
    "moco-inbatch": {
        "objective": "cert",
        "momentum": 0.9,
        "memory_bank": 8,
        "loss": "moco-inbatch",
        "optimizer": "adamw",
        "weight_decay": 0.1,
        "schedule": "slanted-triangular",
        "max_length": 512,
        "projection_dim": None,
        "lr": 1e-9,
    },  # Adam's first step would magnify float noise in near-zero gradients
    "simcse": {"objective": "simcse"},
    "tsdae": {"objective": "tsdae"},
    "simcse-sup": {"objective": "simcse-sup", "hard_negative_weight": 0.5, "grad_cache": 5},
    # lr 1e-9: the first step leaves the weights as they were, so the second step's gradients are the first's.
    "unscaled": {"scale_fix": False, "lr": 1e-9},
}
SCALE = {"unscaled": 0.5}  # DeCLUTR's (scale_fix false): the contrastive gradient over the 2 workers


def configs() -> dict[str, TrainConfig]:
    return {name: TrainConfig(**{**CFG, **overrides}) for name, overrides in CASES.items()}


def worker(rank: int, world: int, port: int, tok, out: str) -> None:
    # One process group for every case: starting two workers costs more than all the steps they take.
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    try:
        torch.save({name: step(tok, rank, world, cfg) for name, cfg in configs().items()}, f"{out}.{rank}")
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.slow  # two worker processes
def test_two_workers_take_the_same_step_as_one(tokenizer, tmp_path):
    torch.set_num_threads(1)
    single = {name: step(tokenizer, 0, 1, cfg) for name, cfg in configs().items()}
    out = str(tmp_path / "result")
    mp.spawn(worker, args=(2, free_port(), tokenizer, out), nprocs=2, join=True)
    for rank in range(2):
        results = torch.load(f"{out}.{rank}", weights_only=False)
        for case, (loss, grads) in single.items():
            rank_loss, rank_grads = results[case]
            assert rank_loss == pytest.approx(loss, rel=1e-5), case
            assert rank_grads.keys() == grads.keys(), case
            for name, g in grads.items():
                # Whole tensors, to rounding on their terms: an embedding's gradient sums every token's, in
                # another order on two workers, so an entry near zero is off by ~1e-6 of its terms, not of
                # itself. A world-size factor or a missing worker's share is off by the norm, far above this.
                expected = g * SCALE.get(case, 1.0)
                error = (rank_grads[name] - expected).norm().item()
                assert error <= 1e-4 * expected.norm().item() + 1e-6 * g.numel() ** 0.5, (
                    f"{case}: {name} off by {error:.3g}"
                )
