"""Why SimCSE collapses on the small encoder: its STS-B dev Spearman through training, per readout.

The objectives profile's SimCSE row (paper recipe: InfoNCE over a Linear+Tanh head on [CLS], dropout as
the only noise) falls far below the encoder it starts from. This separates the causes on
`configs/default.yaml`'s model (initial weights, BPE trained on the shared State of the Union corpus) and
the corpus's sentences, with SimCSE's step as the train stage runs it (`train_step`, its batch of 16,
lr 1e-3 as the profile's, SimCSE's tau 0.05), scored as dev-set selection scores (the evaluation's
tokenisation and cosine protocol, eval mode) every `--every` steps. Each variant starts from the same
weights and sees the same batches; only its one setting differs from the paper's recipe.

    .venv/bin/python -m bench.simcse_readout [--steps 300] [--every 100] [--threads 1]
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import tempfile
from pathlib import Path

import pyarrow as pa
import torch

from bench.common import default_model, shared_corpus
from pipeline.corpus.segment import sentences
from pipeline.model.exported import embed
from pipeline.model.transformer import HF_DIR, load_mlm
from pipeline.tokenizer.loading import load_tokenizer
from pipeline.train.batching import collate, special_ids
from pipeline.train.config import TrainConfig
from pipeline.train.devset import read_dev
from pipeline.train.optim import make_optimizer
from pipeline.train.scorers import dev_scorer
from pipeline.train.step import make_encoder, train_step

VARIANTS = {
    "paper: [CLS], tanh head, dropout 0.1": {},
    "[CLS], no head": {"projection": "none"},
    "[CLS], dropout 0 (no noise)": {"dropout": 0.0},
    "mean pooling, tanh head": {"pooling": "mean"},
    "mean pooling, no head": {"pooling": "mean", "projection": "none"},
    "[CLS], SimCSE's lr 3e-5": {"lr": 3e-5},
}


def corpus_sentences(tokenizer, n: int) -> list[list[int]]:
    texts = [p.read_text() for p in sorted(shared_corpus().glob("*.txt"))]
    found = [s for text in texts for line in text.splitlines() for s in sentences(line) if len(s) >= 20]
    random.Random(0).shuffle(found)
    return [tokenizer(s, add_special_tokens=False)["input_ids"] for s in found[:n]]


def mean_pairwise_cosine(init: str, ids: list[list[int]], pooling: str) -> tuple[float, float]:
    """How alike the encoder's sentence embeddings are before training: the mean and the lowest cosine."""
    tokenizer = load_tokenizer(init)
    e = torch.from_numpy(
        embed(load_mlm(init).base_model.eval(), tokenizer, [tokenizer.decode(i) for i in ids], pooling, 128)
    )
    e = torch.nn.functional.normalize(e.double(), dim=-1)
    c, n = e @ e.T, len(ids)
    return float((c.sum() - n) / (n * n - n)), float(c.min())


def curve(init: str, dev_file: Path, ids: list[list[int]], settings: dict, steps: int, every: int) -> list:
    settings = dict(settings)
    dropout = settings.pop("dropout", None)
    cfg = TrainConfig(**{"objective": "simcse", "lr": 1e-3, "batch_size": 16, "max_length": 130, **settings})
    mlm = load_mlm(init)
    if dropout is not None:
        for module in mlm.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = dropout
    tokenizer = load_tokenizer(init)
    special = special_ids(tokenizer)
    torch.manual_seed(0)
    model = make_encoder(mlm, cfg)
    model.train()
    optimizer, scheduler = make_optimizer(model, cfg, steps)
    score = dev_scorer(model, tokenizer, cfg.pooling, {"subset": read_dev(dev_file), "max_length": 128})
    generator, points = torch.Generator().manual_seed(0), [(0, score(), None)]
    for step in range(1, steps + 1):
        rows = [ids[(step * cfg.batch_size + i) % len(ids)] for i in range(cfg.batch_size)]
        batch = collate(
            pa.table({"anchor_ids": rows, "positive_ids": [[r] for r in rows]}), special, cfg.max_length, True
        )
        loss = train_step(model, optimizer, scheduler, batch, cfg, special, generator)["loss"]
        if step % every == 0:
            points.append((step, score(), loss))
    return points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dev_file = shared_corpus().parents[1] / "eval" / "senteval" / "STSBenchmark" / "sts-dev.csv"
    with tempfile.TemporaryDirectory() as work:
        init = f"{default_model(work)}/{HF_DIR}"
        ids = corpus_sentences(load_tokenizer(init), args.steps * 16)
        for pooling in ("cls", "mean"):
            mean, low = mean_pairwise_cosine(init, ids[:200], pooling)
            print(
                f"initial weights, {pooling} pooling: mean pairwise cosine of 200 sentences {mean:.4f} "
                f"(lowest {low:.4f})"
            )
        steps = list(range(0, args.steps + 1, args.every))
        print(f"\nSTS-B dev Spearman x 100 (cosine) and the step's loss, {len(ids):,} sentences, batch 16\n")
        print("| variant | " + " | ".join(f"step {s}" for s in steps) + " |")
        print("|---|" + "---:|" * len(steps))
        for name, settings in VARIANTS.items():
            points = curve(init, dev_file, ids, copy.deepcopy(settings), args.steps, args.every)
            cells = [f"{100 * s:.2f}" + (f" (loss {loss:.2f})" if loss is not None else "") for _, s, loss in points]
            print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
        print("\n" + json.dumps({"steps": args.steps, "sentences": len(ids)}))


if __name__ == "__main__":
    main()
