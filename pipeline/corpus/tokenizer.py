"""tokenizer stage: a byte-level BPE with RoBERTa's special tokens trained on the corpus,
or the base model's own tokenizer, saved as a Hugging Face tokenizer directory.

Either way the tokenizer gains CLEAR's deletion token (DEL_TOKEN) as a special token of its own, so a
deleted run is one id that is neither the mask token nor an MLM target; the init stage grows a base
model's embedding table to match. The saved tokenizer neither truncates nor pads, whatever the base's
files said (published sentence-transformers models often truncate at 128 and pad), and every reader
switches both off again (`untruncated`), so documents are counted and cut by their true length.

transformers is imported only where a function needs it: the filter's worker processes import this
module for `encode_whole` alone.
"""

from __future__ import annotations

import json
import logging
import os

from tokenizers import AddedToken, ByteLevelBPETokenizer, Tokenizer
from tokenizers.processors import RobertaProcessing

from pipeline.config import Config
from pipeline.errors import InputError
from pipeline.stage import Stage
from storage import DatasetWriter, iter_batches, local_copy

SPECIAL = {"bos_token": "<s>", "pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>", "mask_token": "<mask>"}
DEL_TOKEN = "<del>"
log = logging.getLogger("cpipe")


def untruncated(backend: Tokenizer) -> Tokenizer:
    """The fast tokenizer with truncation and padding off, whatever its files say."""
    backend.no_truncation()
    backend.no_padding()
    return backend


def encode_whole(backend: Tokenizer, texts: list[str]) -> list[list[int]]:
    """Every text's whole token ids, without special tokens, in the tokenizer's parallel Rust batch path."""
    encode = getattr(untruncated(backend), "encode_batch_fast", backend.encode_batch)
    return [e.ids for e in encode(texts, add_special_tokens=False)]


def base_path(base: str) -> str:
    """Where a base model's Hugging Face files are: a sentence-transformers directory (it holds
    modules.json) keeps them in its Transformer module's folder, the root itself or e.g. 0_Transformer."""
    modules = os.path.join(base, "modules.json")
    if not os.path.isfile(modules):
        return base  # a hub name or a plain Hugging Face directory
    with open(modules, encoding="utf-8") as f:
        folders = [m["path"] for m in json.load(f) if m["type"].rsplit(".", 1)[-1] == "Transformer"]
    if not folders:
        raise InputError(f"{modules} lists no Transformer module to train")
    return os.path.join(base, folders[0])


def load_tokenizer(path: str):
    """Any fsspec URL: a tokenizer is read whole into memory, so a remote one's local copy can go."""
    from transformers import AutoTokenizer

    with local_copy(path) as local:
        tok = AutoTokenizer.from_pretrained(local)
    untruncated(tok.backend_tokenizer)
    return tok


def add_deletion_token(tok) -> None:
    """DEL_TOKEN as a special token; lstrip takes the space before it, so " <del>" is that one id."""
    tok.add_special_tokens({"additional_special_tokens": [
        AddedToken(DEL_TOKEN, lstrip=True, rstrip=False, normalized=False, special=True)]})


def _texts(corpus: str):
    for batch in iter_batches(corpus, columns=["text"]):
        yield from batch.column("text").to_pylist()


def config(cfg: Config, key: None = None) -> dict:
    return {"base": cfg.model.base, **cfg.tokenizer.model_dump()}


def inputs(cfg: Config, done: dict[str, str], key: None = None) -> dict[str, str]:
    """A tokenizer trained from scratch reads the corpus; a base model's comes with it."""
    return {"corpus": done["corpus"]} if cfg.model.base is None else {}


def run(config: dict, inputs: dict[str, str], out: DatasetWriter) -> None:
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if config["base"]:
        tok = AutoTokenizer.from_pretrained(base_path(config["base"]))
        untruncated(tok.backend_tokenizer)
        log.info("tokenizer: using %s's tokenizer (%d tokens), without truncation or padding", config["base"],
                 len(tok))
    else:
        bpe = ByteLevelBPETokenizer()
        bpe.train_from_iterator(_texts(inputs["corpus"]), vocab_size=config["vocab_size"],
                                min_frequency=config["min_frequency"], special_tokens=list(SPECIAL.values()))
        bpe._tokenizer.post_processor = RobertaProcessing(
            ("</s>", bpe.token_to_id("</s>")), ("<s>", bpe.token_to_id("<s>")))
        tok = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, cls_token="<s>", sep_token="</s>",
                                      model_max_length=config["max_length"], **SPECIAL)
        log.info("tokenizer: trained byte-level BPE with %d tokens", len(tok))
    add_deletion_token(tok)
    tok.save_pretrained(out.local_dir)
    out.extra["vocab_size"] = len(tok)


STAGE = Stage(name="tokenizer", version="3", flow="data", section="tokenizer", config=config, inputs=inputs, run=run)
