"""`Encoder.encode` against sentence-transformers' `SentenceTransformer.encode`, and what length sorting buys.

One model (configs/default.yaml's: 2 layers x 128 hidden, byte-level BPE of 8,192
tokens trained on the shared corpus, as the init stage exports it), the STS-B
test and dev sentences of the shared data, one batch size and max length for
every side. sentence-transformers loads the export's `sentence-transformers/`
directory; ours loads the same export. The sorting gain compares our encoder
with a private copy of its loop that keeps the input order. Target: ours / ST >= 1.0.

    .venv/bin/python -m bench.encode_throughput [--repeats 15] [--batch-size 128] [--max-length 128] [--threads 1]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile

import numpy as np
import torch
from sentence_transformers import SentenceTransformer

from bench.common import alternate, default_model, ratio_report, shared_corpus
from pipeline.model.exported import Encoder
from pipeline.model.transformer import ST_DIR, pool
from pipeline.readers.sts import find_sts


def stsb_sentences() -> list[str]:
    subsets, _ = find_sts(shared_corpus().parents[1] / "eval" / "senteval")
    return list(dict.fromkeys(s for sub in subsets if sub.task == "STSB" for s in (*sub.sent1, *sub.sent2)))


@torch.inference_mode()
def encode_unsorted(encoder: Encoder, sentences: list[str], batch_size: int) -> np.ndarray:
    """Encoder.encode's loop with batches in input order: the baseline for its length sorting."""
    out = np.empty((len(sentences), encoder.model.config.hidden_size), dtype=np.float32)
    for i in range(0, len(sentences), batch_size):
        enc = encoder.tokenizer(
            sentences[i : i + batch_size],
            padding=True,
            truncation=True,
            max_length=encoder.max_length,
            return_tensors="pt",
        ).to(encoder.device)
        hidden = encoder.model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
        out[i : i + batch_size] = pool(hidden, enc["attention_mask"], encoder.pooling).float().cpu().numpy()
    return out


def padded_tokens(lengths: list[int], batch_size: int) -> int:
    return sum(
        max(lengths[i : i + batch_size]) * len(lengths[i : i + batch_size]) for i in range(0, len(lengths), batch_size)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--max-length", type=int, default=128)
    # On a loaded machine torch's threads wait on each other at the end of every op, which hides the
    # padding saved by sorting; one thread measures the work itself.
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's, one per core)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    work = tempfile.mkdtemp(prefix="bench-encode-")
    try:
        model_dir = default_model(work)
        sentences = stsb_sentences()
        ours = Encoder(model_dir, max_length=args.max_length, device="cpu")
        st = SentenceTransformer(f"{model_dir}/{ST_DIR}", device="cpu")
        st.max_seq_length = args.max_length
        bs = args.batch_size

        # Same numbers from every side, or the comparison is of different work.
        reference = ours.encode(sentences, bs)
        np.testing.assert_allclose(st.encode(sentences, batch_size=bs), reference, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(encode_unsorted(ours, sentences, bs), reference, rtol=1e-4, atol=1e-4)

        def run_ours() -> None:
            ours.encode(sentences, bs)

        def run_st() -> None:
            st.encode(sentences, batch_size=bs, convert_to_numpy=True, show_progress_bar=False)

        def run_unsorted() -> None:
            encode_unsorted(ours, sentences, bs)

        t_ours, t_st = alternate(run_ours, run_st, args.repeats)
        t_sorted, t_unsorted = alternate(run_ours, run_unsorted, args.repeats)

        enc = ours.tokenizer(sentences, truncation=True, max_length=args.max_length)
        lengths = [len(ids) for ids in enc["input_ids"]]
        real, n = sum(lengths), len(sentences)
        padded_sorted, padded_input = padded_tokens(sorted(lengths, reverse=True), bs), padded_tokens(lengths, bs)
        print(
            f"{n:,} STS-B sentences, {real:,} tokens; batch {bs}, max length {args.max_length}, "
            f"{torch.get_num_threads()} torch threads; {args.repeats} alternating pairs each"
        )
        print(
            f"padded tokens: length-sorted {padded_sorted:,} ({padded_sorted / real:.2f}x real), "
            f"input order {padded_input:,} ({padded_input / real:.2f}x real)"
        )
        print(ratio_report("Encoder.encode", t_ours, "SentenceTransformer.encode", t_st, n, "sentences"))
        print(
            ratio_report("Encoder.encode (sorted)", t_sorted, "Encoder loop, input order", t_unsorted, n, "sentences")
        )

        def ratios(a: list[float], b: list[float]) -> str:
            r = sorted(y / x for x, y in zip(a, b))
            return f"**{statistics.median(r):.3f}** (min {r[0]:.3f}, max {r[-1]:.3f})"

        med = statistics.median
        print()
        print("| | median | sentences/s | throughput ratio |")
        print("|---|---|---|---|")
        print(f"| `Encoder.encode` (length-sorted) | {med(t_ours):.3f} s | {n / med(t_ours):,.0f} | |")
        print(
            f"| `SentenceTransformer.encode` | {med(t_st):.3f} s | {n / med(t_st):,.0f} | "
            f"ours / ST {ratios(t_ours, t_st)} |"
        )
        print(f"| `Encoder.encode` (length-sorted, 2nd pairing) | {med(t_sorted):.3f} s | {n / med(t_sorted):,.0f} | |")
        print(
            f"| our loop, batches in input order | {med(t_unsorted):.3f} s | {n / med(t_unsorted):,.0f} | "
            f"sorted / input order {ratios(t_sorted, t_unsorted)} |"
        )
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
