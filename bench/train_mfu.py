"""Training throughput and model FLOP utilisation (MFU) of DeCLUTR-small's architecture.

`configs/declutr-small.yaml`'s `declutr` run on DistilRoBERTa-base's shape (6 layers x 768
hidden, 12 heads, vocab 50,265), built from a config with random weights (nothing is
downloaded): its batch of 32 anchors x 2 positives, every span `--length` tokens (default
512, l_max), MLM on the anchors. Times `--steps` calls of `pipeline.train.train_step` in
`--precision` (default bf16) after `--warmup` untimed ones, and reports tokens/s and MFU:

    model FLOPs a step = 6 x the encoder layers' parameters x tokens          (matmuls, forward + backward)
                       + 12 x layers x length x hidden x tokens               (attention scores and values)
                       + 6 x the LM head's parameters x masked tokens         (the head sees only those)

over the device's peak dense bf16 FLOP/s (H100 SXM and H200 989e12, A100 312e12; `--peak-flops`
for another). Embedding lookups, layer norms and softmaxes are not counted, as is usual for MFU.

    .venv/bin/python -m bench.train_mfu [--device cuda] [--steps 20] [--precision bf16] [--peak-flops F]
    .venv/bin/python -m bench.train_mfu --device cpu --tiny     # a smoke run of a tiny model
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import AutoModelForMaskedLM, RobertaConfig

from pipeline.config import load_config
from pipeline.model import SpanEncoder
from pipeline.train import make_optimizer, make_scaler, train_step

DISTILROBERTA = {"vocab_size": 50265, "hidden_size": 768, "num_hidden_layers": 6, "num_attention_heads": 12,
                 "intermediate_size": 3072, "max_position_embeddings": 514}
TINY = {"vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 256, "max_position_embeddings": 130}
# Dense bf16 tensor-core peaks from the vendor's data sheets; the first name found in the device's wins.
PEAK_BF16 = {"H100 PCIe": 756e12, "H100": 989e12, "H200": 989e12, "A100": 312e12}


def flop(x: float) -> str:
    return f"{x / 1e12:,.2f} TFLOP" if x >= 1e11 else f"{x / 1e9:,.2f} GFLOP"


def peak_flops(device: str) -> tuple[float | None, str]:
    if not device.startswith("cuda"):
        return None, "CPU"
    name = torch.cuda.get_device_name(torch.device(device))
    return next(((peak, name) for key, peak in PEAK_BF16.items() if key in name), (None, name))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--precision", choices=["bf16", "fp16", "fp32"], default="bf16")
    parser.add_argument("--steps", type=int, default=20, help="timed steps")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (allocator, kernels' autotuning)")
    parser.add_argument("--length", type=int, help="tokens a span (default: 512, or 64 with --tiny)")
    parser.add_argument("--peak-flops", type=float, help="the device's peak FLOP/s (default: known GPUs' bf16 peak)")
    parser.add_argument("--threads", type=int, help="torch threads on CPU (default: torch's)")
    parser.add_argument("--tiny", action="store_true", help="2 layers x 64 hidden, 4 anchors: a smoke run")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    cfg = load_config("configs/declutr-small.yaml")
    run = {**cfg.run_configs()["declutr"].model_dump(), "precision": args.precision}
    shape = TINY if args.tiny else DISTILROBERTA
    length = args.length or (64 if args.tiny else cfg.augment.max_length)
    anchors, positives = (4 if args.tiny else run["batch_size"]), cfg.augment.num_positives
    vocab = shape["vocab_size"]
    special = {"bos": 0, "pad": 1, "eos": 2, "mask": vocab - 1, "vocab": vocab}  # RoBERTa's ids
    torch.manual_seed(run["seed"])
    mlm_model = AutoModelForMaskedLM.from_config(RobertaConfig(**shape, type_vocab_size=1, pad_token_id=1,
                                                               bos_token_id=0, eos_token_id=2, layer_norm_eps=1e-5))
    model = SpanEncoder(mlm_model, run["pooling"], run["projection"]).to(args.device).train()
    optimizer, scheduler = make_optimizer(model, run, args.warmup + args.steps)
    scaler = make_scaler(args.precision, torch.device(args.device).type)
    generator = torch.Generator().manual_seed(run["seed"])

    def spans(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        ids = torch.randint(3, vocab - 1, (n, length), generator=generator)
        ids[:, 0], ids[:, -1] = special["bos"], special["eos"]
        return ids, torch.ones_like(ids)

    batch = {"anchors": spans(anchors), "positives": spans(anchors * positives), "num_positives": positives}
    times, tokens, skipped = [], 0, 0
    for step in range(args.warmup + args.steps):
        start = time.perf_counter()
        metrics = train_step(model, optimizer, scheduler, batch, run, special, generator, scaler=scaler)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
            tokens, skipped = metrics["tokens"], skipped + metrics["skipped"]

    layers = sum(p.numel() for p in mlm_model.base_model.encoder.parameters())
    head = sum(p.numel() for p in model.head.parameters())  # its decoder (tied to the word embeddings) included
    masked = run["mlm_probability"] * anchors * (length - 2)  # expected: <s> and </s> are never masked
    d, n_layers = shape["hidden_size"], shape["num_hidden_layers"]
    flops = {"6N": 6 * layers * tokens, "attention": 12 * n_layers * length * d * tokens, "LM head": 6 * head * masked}
    step_time = statistics.median(times)
    peak, device_name = peak_flops(args.device)
    peak = args.peak_flops or peak
    print(f"{'tiny' if args.tiny else 'declutr-small'} architecture: {n_layers} layers x {d} hidden, "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters ({layers / 1e6:.1f}M in the "
          f"encoder's layers), on {device_name}, {args.precision}")
    print(f"batch {anchors} anchors x {positives} positives x {length} tokens = {tokens:,} tokens a step, "
          f"{args.steps} timed steps after {args.warmup} untimed, {skipped} skipped (fp16 overflow)")
    print(f"step: median {step_time * 1000:.1f} ms (min {min(times) * 1000:.1f}, max {max(times) * 1000:.1f})")
    print(f"throughput: {tokens / step_time:,.0f} tokens/s")
    total = sum(flops.values())
    print(f"model FLOPs a step: {flop(total)} ({', '.join(f'{k} {v / total:.0%}' for k, v in flops.items())}); "
          f"{flop(total / step_time)}/s achieved")
    print(f"MFU: {total / step_time / peak:.1%} of {flop(peak)}/s" if peak else
          "MFU: n/a (no known peak for this device: pass --peak-flops)")


if __name__ == "__main__":
    main()
