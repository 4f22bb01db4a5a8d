"""filter stage: count tokens, keep documents with n_tokens >= min_tokens, drop exact duplicates."""

from __future__ import annotations

import hashlib
import logging

import pyarrow as pa
from tqdm import tqdm

from pipeline.corpus import SCHEMA as CORPUS_SCHEMA
from pipeline.errors import InputError
from pipeline.tokenizer import load_tokenizer
from storage import iter_batches, read_manifest

NAME, VERSION = "filter", "1"
SCHEMA = CORPUS_SCHEMA.append(pa.field("n_tokens", pa.int32()))
log = logging.getLogger("cpipe")


class FilterError(InputError):
    pass


def text_key(text: str) -> bytes:
    """Exact-duplicate key: case and whitespace differences do not make a new document."""
    return hashlib.sha1(" ".join(text.lower().split()).encode()).digest()


def count_tokens(backend, texts: list[str]) -> list[int]:
    """Token counts without special tokens, in the tokenizer's parallel Rust batch path."""
    encode = getattr(backend, "encode_batch_fast", backend.encode_batch)
    return [len(e.ids) for e in encode(texts, add_special_tokens=False)]


def run(config: dict, inputs: dict, out) -> None:
    backend = load_tokenizer(inputs["tokenizer"]).backend_tokenizer
    seen_keys: set[bytes] = set()
    total, longest, kept = read_manifest(inputs["corpus"])["rows"], 0, 0
    with tqdm(total=total, desc="filter", unit="doc", mininterval=2) as bar:
        for batch in iter_batches(inputs["corpus"], batch_size=256):
            texts = batch.column("text").to_pylist()
            counts = count_tokens(backend, texts)
            keep = [n >= config["min_tokens"] for n in counts]
            out.count("too_short", keep.count(False))
            if config["dedup"]:
                for i, text in enumerate(texts):
                    if keep[i]:
                        key = text_key(text)
                        keep[i] = key not in seen_keys
                        out.count("duplicate", not keep[i])
                        seen_keys.add(key)
            table = pa.Table.from_batches([batch]).append_column("n_tokens", pa.array(counts, pa.int32()))
            out.write(table.filter(pa.array(keep)))
            kept += sum(keep)
            longest = max(longest, *counts)
            bar.update(len(texts))
    out.count("kept", kept)
    if kept == 0:
        raise FilterError(
            f"no document has at least {config['min_tokens']} tokens: saw {total} documents, "
            f"the longest has {longest} tokens (lower filter.min_tokens?)")
