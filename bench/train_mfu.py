"""Training throughput and model FLOP utilisation (MFU) of DeCLUTR-small's architecture, on real tokens.

`configs/declutr-small.yaml`'s `declutr` run on DistilRoBERTa-base's shape (6 layers x 768
hidden, 12 heads, vocab 50,265), built from a config with random weights (nothing is
downloaded), SDPA attention: its batch of 32 anchors x 2 positives, MLM on the anchors. One run
times, side by side (`--steps` timed after `--warmup` untimed, in `--precision`, default bf16):

- `train_step` on every span l_max (512) tokens: the fixed-length batch;
- a plain torch loop of the same batch (one padded forward, NT-Xent + MLM, backward, clip, AdamW),
  eager and under torch.compile (`--no-compile` skips every compiled case): the reference;
- `train_step` on the paper's span lengths (the project's sampler, pipeline.objectives.spans: l_min 32,
  l_max 512, Beta(4, 2) anchors, Beta(2, 4) positives), with every row padded to the longest
  (the padded path, the default), in length-sorted blocks (train.block_tokens), packed (train.packing), and
  compiled.

Model FLOPs a step count real tokens only (padding is not work):

    6 x the encoder layers' parameters x real tokens                       (matmuls, forward + backward)
    + 12 x layers x hidden x sum over rows of length^2                      (attention scores and values)
    + 6 x the LM head's parameters x masked tokens                          (the head sees only those)

over the device's peak dense bf16 FLOP/s (H100 SXM and H200 989e12, A100 312e12; `--peak-flops`
for another): real-token MFU. "slots" are the token positions the encoder computed, padding included.
Embedding lookups, layer norms and softmaxes are not counted, as is usual for MFU.

    .venv/bin/python -m bench.train_mfu [--device cuda] [--steps 20] [--precision bf16] [--peak-flops F]
    .venv/bin/python -m bench.train_mfu --device cpu --tiny --precision fp32   # a tiny model on CPU

Imports only torch, transformers, pyarrow, numpy and the project's modules that need no more (no Ray,
no Prefect, no pydantic beyond pipeline.config's), so that it runs on a bare GPU machine.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np
import pyarrow as pa
import torch
import torch.nn.functional as F
from transformers import AutoModelForMaskedLM, RobertaConfig

from pipeline.config import load_config
from pipeline.objectives.spans import span_length
from pipeline.train.batching import collate
from pipeline.train.config import TrainConfig
from pipeline.train.losses import nt_xent
from pipeline.train.optim import make_optimizer
from pipeline.train.step import autocast, make_encoder, make_scaler, train_step

DISTILROBERTA = {
    "vocab_size": 50265,
    "hidden_size": 768,
    "num_hidden_layers": 6,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "max_position_embeddings": 514,
}
TINY = {
    "vocab_size": 1000,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 256,
    "max_position_embeddings": 514,
}
# Dense bf16 tensor-core peaks from the vendor's data sheets; the first name found in the device's wins.
PEAK_BF16 = {"H100 PCIe": 756e12, "H100": 989e12, "H200": 989e12, "A100": 312e12}


def flop(x: float) -> str:
    return f"{x / 1e12:,.2f} TFLOP" if x >= 1e11 else f"{x / 1e9:,.2f} GFLOP"


def peak_flops(device: str) -> tuple[float | None, str]:
    if not device.startswith("cuda"):
        return None, "CPU"
    name = torch.cuda.get_device_name(torch.device(device))
    return next(((peak, name) for key, peak in PEAK_BF16.items() if key in name), (None, name))


def spans_table(anchors: int, positives: int, lengths, vocab: int, rng: np.random.Generator) -> pa.Table:
    """Pairs of random token ids whose lengths `lengths(a, b)` draws (Beta(a, b) for the paper's)."""

    def ids(a, b):
        return rng.integers(3, vocab - 1, lengths(a, b)).tolist()

    return pa.Table.from_pylist(
        [{"anchor_ids": ids(4, 2), "positive_ids": [ids(2, 4) for _ in range(positives)]} for _ in range(anchors)]
    )


def model_flops(batch: dict, shape: dict, layers: int, head: int, masked: float) -> float:
    lengths = torch.cat([batch["anchors"][1].sum(1), batch["positives"][1].sum(1)]).double()
    d, n_layers = shape["hidden_size"], shape["num_hidden_layers"]
    return float(6 * layers * lengths.sum() + 12 * n_layers * d * (lengths**2).sum() + 6 * head * masked)


def reference_loop(model, run: TrainConfig, batch: dict, special: dict, device: str, compiled: bool, generator):
    """One step of the plain loop: every row padded to one width in one forward, NT-Xent between anchors
    and their positives' mean, MLM on 15% of the anchors' tokens (drawn once: the batch repeats), AdamW."""
    b, p = batch["anchors"][0].size(0), batch["num_positives"]
    ids, mask = (torch.cat([a, q]).to(device) for a, q in zip(batch["anchors"], batch["positives"]))
    chosen = (torch.rand(ids.shape, generator=generator) < run.mlm_probability).to(device) & mask.bool()
    chosen[b:] = False
    index, labels = chosen.flatten().nonzero().squeeze(1), ids[chosen]
    ids = ids.masked_fill(chosen, special["mask"])
    optimizer, _ = make_optimizer(model, run, 1)

    def loss_fn():
        with autocast(run.precision, torch.device(device).type):
            hidden = model.mlm_model.base_model(input_ids=ids, attention_mask=mask).last_hidden_state
            logits = model.head(hidden.flatten(0, 1).index_select(0, index))
        m = mask.unsqueeze(-1).float()
        z = (hidden.float() * m).sum(1) / m.sum(1)
        return nt_xent(z[:b], z[b:].view(b, p, -1).mean(1), run.temperature) + F.cross_entropy(logits.float(), labels)

    forward = torch.compile(loss_fn) if compiled else loss_fn

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        forward().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), run.grad_clip)
        optimizer.step()

    return step


def timed(step, args) -> tuple[list[float], object]:
    times, last = [], None
    for i in range(args.warmup + args.steps):
        start = time.perf_counter()
        last = step()
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        if i >= args.warmup:
            times.append(time.perf_counter() - start)
    return times, last


def host_syncs(step) -> int | None:
    """Times one more step makes the host wait on the GPU (CUDA's sync debug mode warns at each): every
    one idles the GPU until the host has queued the next kernels. None off CUDA."""
    if not torch.cuda.is_available():
        return None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--precision", choices=["bf16", "fp16", "fp32"], default="bf16")
    parser.add_argument("--steps", type=int, default=20, help="timed steps")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (allocator, compilation)")
    parser.add_argument("--peak-flops", type=float, help="the device's peak FLOP/s (default: known GPUs' bf16 peak)")
    parser.add_argument("--threads", type=int, help="torch threads on CPU (default: torch's)")
    parser.add_argument(
        "--block-tokens",
        type=int,
        default=4096,
        help="train.block_tokens of the length-blocks cases (default: %(default)s)",
    )
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile cases")
    parser.add_argument("--tiny", action="store_true", help="2 layers x 64 hidden, 4 anchors: a smoke run")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    cfg = load_config("configs/declutr-small.yaml")
    run = cfg.run_configs()["declutr"].model_copy(
        update={"precision": args.precision, "grad_cache": None, "use_gpu": args.device.startswith("cuda")}
    )
    shape = TINY if args.tiny else DISTILROBERTA
    l_min, l_max = cfg.augment.min_length, cfg.augment.max_length
    anchors, positives = (4 if args.tiny else run.batch_size), cfg.augment.num_positives
    vocab = shape["vocab_size"]
    special = {"bos": 0, "pad": 1, "eos": 2, "mask": vocab - 1, "vocab": vocab, "positions": l_max}  # RoBERTa's ids
    rng = np.random.default_rng(run.seed)
    batches = {
        "fixed": collate(spans_table(anchors, positives, lambda a, b: l_max, vocab, rng), special, l_max, True),
        "paper": collate(
            spans_table(anchors, positives, lambda a, b: span_length(rng, a, b, l_min, l_max), vocab, rng),
            special,
            l_max,
            True,
        ),
    }
    config = RobertaConfig(
        **shape,
        type_vocab_size=1,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        layer_norm_eps=1e-5,
        attn_implementation="sdpa",
    )

    def fresh(compiled: bool, packing: bool = False):
        torch.manual_seed(run.seed)
        settings = run.model_copy(update={"compile": compiled, "packing": packing})
        return make_encoder(AutoModelForMaskedLM.from_config(config), settings).to(args.device).train()

    def stepper(name: str, compiled: bool, blocks: int | None, packing: bool = False):
        model = fresh(compiled, packing)
        optimizer, scheduler = make_optimizer(
            model, run.model_copy(update={"compile": compiled}), args.warmup + args.steps
        )
        scaler = make_scaler(args.precision, torch.device(args.device).type)
        generator = torch.Generator().manual_seed(run.seed)

        def step():
            settings = run.model_copy(update={"packing": packing, "block_tokens": blocks})
            return train_step(model, optimizer, scheduler, batches[name], settings, special, generator, scaler=scaler)

        return step

    cases = [
        ("train_step, every span l_max", "fixed", stepper("fixed", False, None)),
        ("train_step, every span l_max, compiled", "fixed", stepper("fixed", True, None)),
        (
            "plain loop, same batch, eager",
            "fixed",
            reference_loop(
                fresh(False), run, batches["fixed"], special, args.device, False, torch.Generator().manual_seed(1)
            ),
        ),
        (
            "plain loop, same batch, compiled",
            "fixed",
            reference_loop(
                fresh(False), run, batches["fixed"], special, args.device, True, torch.Generator().manual_seed(1)
            ),
        ),
        ("train_step, paper spans, padded to the longest", "paper", stepper("paper", False, None)),
        ("train_step, paper spans, padded to the longest, compiled", "paper", stepper("paper", True, None)),
        ("train_step, paper spans, length blocks", "paper", stepper("paper", False, args.block_tokens)),
        ("train_step, paper spans, length blocks, compiled", "paper", stepper("paper", True, args.block_tokens)),
        ("train_step, paper spans, packed", "paper", stepper("paper", False, None, packing=True)),
        ("train_step, paper spans, packed, compiled", "paper", stepper("paper", True, None, packing=True)),
    ]
    if args.no_compile:
        cases = [c for c in cases if "compiled" not in c[0]]

    probe = fresh(False)
    layers = sum(p.numel() for p in probe.mlm_model.base_model.encoder.parameters())
    head = sum(p.numel() for p in probe.head.parameters())  # its decoder (tied to the word embeddings) included
    peak, device_name = peak_flops(args.device)
    peak = args.peak_flops or peak
    print(
        f"{'tiny' if args.tiny else 'declutr-small'} architecture: {shape['num_hidden_layers']} layers x "
        f"{shape['hidden_size']} hidden, {sum(p.numel() for p in probe.parameters()) / 1e6:.1f}M parameters "
        f"({layers / 1e6:.1f}M in the encoder's layers), on {device_name}, {args.precision}; {anchors} anchors x "
        f"{positives} positives; {args.steps} timed steps after {args.warmup}; block_tokens {args.block_tokens}"
    )
    del probe
    medians = {}
    for label, name, step in cases:
        times, metrics = timed(step, args)
        batch = batches[name]
        real = int(batch["anchors"][1].sum() + batch["positives"][1].sum())
        slots = metrics["padded_tokens"] if metrics else batch["anchors"][0].numel() + batch["positives"][0].numel()
        masked = run.mlm_probability * float((batch["anchors"][1].sum(1) - 2).sum())  # <s>, </s> never masked
        flops = model_flops(batch, shape, layers, head, masked)
        t = medians[label] = statistics.median(times)
        mfu = f", real-token MFU {flops / t / peak:.1%}" if peak else ""
        syncs = host_syncs(step) if args.device.startswith("cuda") else None
        print(
            f"{label}: median {t * 1000:.1f} ms (min {min(times) * 1000:.1f}); {real:,} real tokens in "
            f"{slots:,} slots ({1 - real / slots:.0%} padding); {real / t:,.0f} real tokens/s, "
            f"{slots / t:,.0f} slots/s; {flop(flops / t)}/s{mfu}"
            + (f"; {syncs} host syncs a step" if syncs is not None else "")
        )
    ratios = [
        ("train_step / plain loop eager (fixed)", "train_step, every span l_max", "plain loop, same batch, eager"),
        (
            "train_step / plain loop compiled (fixed)",
            "train_step, every span l_max",
            "plain loop, same batch, compiled",
        ),
        (
            "compiled train_step / plain loop compiled (fixed)",
            "train_step, every span l_max, compiled",
            "plain loop, same batch, compiled",
        ),
        ("plain loop compiled / eager (fixed)", "plain loop, same batch, compiled", "plain loop, same batch, eager"),
        (
            "length blocks / padded (paper spans)",
            "train_step, paper spans, length blocks",
            "train_step, paper spans, padded to the longest",
        ),
        (
            "compiled / eager train_step (paper spans)",
            "train_step, paper spans, length blocks, compiled",
            "train_step, paper spans, length blocks",
        ),
        (
            "padded compiled / padded (paper spans)",
            "train_step, paper spans, padded to the longest, compiled",
            "train_step, paper spans, padded to the longest",
        ),
        (
            "packed / padded (paper spans)",
            "train_step, paper spans, packed",
            "train_step, paper spans, padded to the longest",
        ),
        (
            "packed compiled / padded (paper spans)",
            "train_step, paper spans, packed, compiled",
            "train_step, paper spans, padded to the longest",
        ),
    ]
    print(
        "step-time ratios (below 1: the first is faster): "
        + "; ".join(f"{name} {medians[a] / medians[b]:.3f}" for name, a, b in ratios if a in medians and b in medians)
    )


if __name__ == "__main__":
    main()
