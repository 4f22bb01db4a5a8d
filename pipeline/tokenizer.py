"""tokenizer stage: a byte-level BPE with RoBERTa's special tokens trained on the corpus,
or the base model's own tokenizer, saved as a Hugging Face tokenizer directory.

Either way the tokenizer gains CLEAR's deletion token (DEL_TOKEN) as a special token of its own, so a
deleted run is one id that is neither the mask token nor an MLM target; the init stage grows a base
model's embedding table to match."""

from __future__ import annotations

import logging

from tokenizers import AddedToken, ByteLevelBPETokenizer
from tokenizers.processors import RobertaProcessing
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from storage import iter_batches, local_copy

NAME, VERSION = "tokenizer", "2"
SCHEMA = None
SPECIAL = {"bos_token": "<s>", "pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>", "mask_token": "<mask>"}
DEL_TOKEN = "<del>"
log = logging.getLogger("cpipe")


def load_tokenizer(path: str):
    """Any fsspec URL: a tokenizer is read whole into memory, so a remote one's local copy can go."""
    with local_copy(path) as local:
        return AutoTokenizer.from_pretrained(local)


def add_deletion_token(tok) -> None:
    """DEL_TOKEN as a special token; lstrip takes the space before it, so " <del>" is that one id."""
    tok.add_special_tokens({"additional_special_tokens": [
        AddedToken(DEL_TOKEN, lstrip=True, rstrip=False, normalized=False, special=True)]})


def _texts(corpus: str):
    for batch in iter_batches(corpus, columns=["text"]):
        yield from batch.column("text").to_pylist()


def run(config: dict, inputs: dict, out) -> None:
    if config["base"]:
        tok = AutoTokenizer.from_pretrained(config["base"])
        log.info("tokenizer: using %s's tokenizer (%d tokens)", config["base"], len(tok))
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
