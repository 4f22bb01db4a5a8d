"""Back-translation throughput: Translator.translate against bare transformers, and what length sorting gains.

All runs translate the same State of the Union sentences (cut by pipeline.corpus.segment,
in corpus order) with the same FSMT model, batch size and generation settings.
The reference is the loop one writes with transformers alone (tokenize a batch,
model.generate, batch_decode) over the same length-sorted batches, so the ratio
is the Translator's own overhead. Target: >= 0.9. Then the same bare loop over
batches in input order against length-sorted ones: the gain of sorting.

The model has random weights (none can be downloaded here), so it rarely emits
</s> and every sentence decodes max_new_tokens tokens; the sorting gain measured
here is the encoder's and cross-attention's share only, and larger on a trained
model, whose output lengths follow the input's.

    .venv/bin/python -m bench.translate_throughput [--sentences 256] [--batch-size 32] [--repeats 3] [--threads 1]
    .venv/bin/python -m bench.translate_throughput --device cuda --real-size   # WMT19 en-de size, bf16
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from pathlib import Path

import numpy as np
import torch

from bench.common import alternate, ratio_report, shared_corpus
from pipeline.backtranslate.translate import load_translator
from pipeline.corpus.segment import sentences
from tests.translation_models import build_fsmt, parallel_sentences

SMALL = dict(
    d_model=256,
    encoder_layers=3,
    decoder_layers=3,
    encoder_ffn_dim=1024,
    decoder_ffn_dim=1024,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    max_position_embeddings=256,
)
# facebook/wmt19-en-de: transformer big with 8192-wide feed-forward layers and a joint 42k BPE vocabulary,
# initialised at the usual scale (the tests' large one is for telling outputs apart, not for speed).
WMT19_EN_DE = dict(
    d_model=1024,
    encoder_layers=6,
    decoder_layers=6,
    encoder_ffn_dim=8192,
    decoder_ffn_dim=8192,
    encoder_attention_heads=16,
    decoder_attention_heads=16,
    max_position_embeddings=1024,
    src_vocab_size=42024,
    tgt_vocab_size=42024,
    init_std=0.02,
)


def ratio(t_a: list[float], t_b: list[float]) -> float:
    """a's throughput over b's, as ratio_report reports it."""
    return statistics.median(b / a for a, b in zip(t_a, t_b))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--num-beams", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--threads", type=int, default=0, help="CPU threads for torch (0: its default); 1 is steadier on a busy machine"
    )
    parser.add_argument("--real-size", action="store_true", help="the size of facebook/wmt19-en-de, in bf16")
    args = parser.parse_args()
    if args.real_size and not args.device.startswith("cuda"):
        parser.error("--real-size needs --device cuda")
    if args.threads:
        torch.set_num_threads(args.threads)

    docs = sorted(shared_corpus().glob("*.txt"))
    pool = [s for doc in docs[-40:] for s in sentences(doc.read_text(encoding="utf-8"))]
    texts = pool[: args.sentences]
    work = Path(tempfile.mkdtemp(prefix="bench-translate-"))
    try:
        en, de = parallel_sentences(1000)
        config = WMT19_EN_DE if args.real_size else SMALL
        dtype = torch.bfloat16 if args.real_size else torch.float32
        model_dir = build_fsmt(work / "fsmt", en + pool[:2000], de, bpe_vocab=8000, dtype=dtype, **config)
        translator = load_translator(
            "hf",
            str(model_dir),
            device=args.device,
            num_beams=args.num_beams,
            max_new_tokens=args.max_new_tokens,
            batch_size=args.batch_size,
        )
        tok, model = translator.tokenizer, translator.model
        lengths = [len(ids) for ids in tok(texts, verbose=False)["input_ids"]]
        by_length = np.argsort([-n for n in lengths], kind="stable")

        def batches(order) -> list[list[str]]:
            ordered = [texts[i] for i in order]
            return [ordered[i : i + args.batch_size] for i in range(0, len(ordered), args.batch_size)]

        sorted_batches, input_batches = batches(by_length), batches(range(len(texts)))

        @torch.inference_mode()
        def bare(batch_list: list[list[str]]) -> list[str]:
            out = []
            for batch in batch_list:
                enc = tok(
                    batch, padding=True, truncation=True, max_length=translator.max_input_tokens, return_tensors="pt"
                ).to(translator.device)
                out += tok.batch_decode(model.generate(**enc, **translator.generate_kwargs), skip_special_tokens=True)
            return out

        # Same model, same batches, same decoding: the outputs must agree before the times mean anything.
        restored = dict(zip(by_length.tolist(), bare(sorted_batches)))
        ours = translator.translate(texts)
        agree = sum(ours[i] == restored[i] for i in range(len(texts)))
        if translator.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()

        t_ours, t_bare = alternate(lambda: translator.translate(texts), lambda: bare(sorted_batches), args.repeats)
        t_input, t_sorted = alternate(lambda: bare(input_batches), lambda: bare(sorted_batches), args.repeats)

        n_params = sum(p.numel() for p in model.parameters())
        print(
            f"{len(texts)} sentences ({statistics.mean(lengths):.1f} tokens on average, max {max(lengths)}), "
            f"FSMT {n_params / 1e6:.1f}M parameters, {model.dtype}, {translator.device}, batch {args.batch_size}, "
            f"num_beams {args.num_beams}, max_new_tokens {args.max_new_tokens}, {torch.get_num_threads()} threads, "
            f"{sum(n > translator.max_input_tokens for n in lengths)} truncated"
        )
        print(f"outputs identical to the bare loop's: {agree}/{len(texts)}")
        print(
            ratio_report(
                "Translator.translate", t_ours, "bare generate (sorted batches)", t_bare, len(texts), "sentences"
            )
        )
        print(
            ratio_report(
                "bare generate (sorted batches)",
                t_sorted,
                "bare generate (input order)",
                t_input,
                len(texts),
                "sentences",
            )
        )
        print("\n| comparison | throughput ratio (median of pairs) | target |\n|---|---|---|")
        print(f"| Translator.translate / bare generate, same batches | {ratio(t_ours, t_bare):.3f} | >= 0.9 |")
        print(f"| bare generate, length-sorted / input-order batches | {ratio(t_sorted, t_input):.3f} | > 1 |")
        if translator.device.type == "cuda":
            print(f"GPU peak memory: {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
