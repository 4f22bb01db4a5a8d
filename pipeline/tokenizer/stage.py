"""tokenizer stage: a byte-level BPE with RoBERTa's special tokens trained on the corpus, or the base model's
own tokenizer, saved as a Hugging Face tokenizer directory with CLEAR's deletion token added
(pipeline.tokenizer.loading says how every later stage reads it). The init stage grows a base model's
embedding table to match.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

from tokenizers import ByteLevelBPETokenizer
from tokenizers.processors import RobertaProcessing

from pipeline.locate import check_base
from pipeline.stage import Stage, stage_config
from pipeline.tokenizer.config import TokenizerConfig
from pipeline.tokenizer.loading import SPECIAL, add_deletion_token, base_path, untruncated
from storage import DatasetWriter, iter_batches

if TYPE_CHECKING:
    from pipeline.config import Config

log = logging.getLogger("cpipe")


def _texts(corpus: str):
    for batch in iter_batches(corpus, columns=["text"]):
        yield from batch.column("text").to_pylist()


class TokenizerSettings(TokenizerConfig):
    """The tokenizer stage's config: its section, and the base model (model.base) whose tokenizer it takes when
    there is one."""

    base: str | None = None


def config(cfg: Config, key: None = None) -> dict:
    return stage_config(TokenizerSettings(**cfg.tokenizer.model_dump(), base=cfg.model.base))


def inputs(cfg: Config, done: dict[str, str], key: None = None) -> dict[str, str]:
    """A tokenizer trained from scratch reads the corpus; a base model's comes with it."""
    return {"corpus": done["corpus"]} if cfg.model.base is None else {}


def run(settings: TokenizerSettings, inputs: dict[str, str], out: DatasetWriter) -> None:
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if settings.base:
        tok = AutoTokenizer.from_pretrained(base_path(settings.base), trust_remote_code=False)
        untruncated(tok.backend_tokenizer)
        log.info("tokenizer: using %s's tokenizer (%d tokens), without truncation or padding", settings.base, len(tok))
    else:
        bpe = ByteLevelBPETokenizer()
        bpe.train_from_iterator(
            _texts(inputs["corpus"]),
            vocab_size=settings.vocab_size,
            min_frequency=settings.min_frequency,
            special_tokens=list(SPECIAL.values()),
            show_progress=sys.stderr.isatty(),  # off a terminal its bars are blank lines in the log
        )
        bpe._tokenizer.post_processor = RobertaProcessing(
            ("</s>", bpe.token_to_id("</s>")), ("<s>", bpe.token_to_id("<s>"))
        )
        tok = PreTrainedTokenizerFast(
            tokenizer_object=bpe._tokenizer,
            cls_token="<s>",
            sep_token="</s>",
            model_max_length=settings.max_length,
            **SPECIAL,
        )
        log.info("tokenizer: trained byte-level BPE with %d tokens", len(tok))
    add_deletion_token(tok)
    tok.save_pretrained(out.local_dir)
    out.extra["vocab_size"] = len(tok)


def check(cfg: Config) -> None:
    check_base(cfg.model.base)


STAGE = Stage(
    name="tokenizer",
    version="3",
    flow="data",
    section="tokenizer",
    config=config,
    inputs=inputs,
    run=run,
    settings=TokenizerSettings,
    check=check,
)
