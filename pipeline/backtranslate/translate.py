"""Machine translation for CERT's positives: text -> pivot language -> back, one direction per Translator.

Backends: `hf` (default) runs transformers seq2seq models, FSMT (the port of
fairseq's own WMT19 models, facebook/wmt19-*) and Marian (Helsinki-NLP/opus-mt-*);
`fairseq` runs the original models through torch.hub where fairseq imports
(not on Python 3.11: `check_backend` says so before any work starts).
"""

from __future__ import annotations

import abc
import logging
import re
from collections import Counter
from pathlib import Path

import torch

from pipeline.backtranslate.config import Generation
from pipeline.errors import InputError
from pipeline.model.hf_files import no_file_bars

log = logging.getLogger("cpipe")

BACKENDS = ("hf", "fairseq")
# fairseq hub names -> transformers' FSMT ports of the same WMT19 weights.
FAIRSEQ_TO_HF = {
    f"transformer.wmt19.{pair}{suffix}": f"facebook/wmt19-{pair}"
    for pair in ("en-de", "de-en", "en-ru", "ru-en")
    for suffix in ("", ".single_model")
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
HUB_ID = re.compile(r"[\w.-]+(/[\w.-]+)?")


class Translator(abc.ABC):
    """One direction (src -> tgt). `counts` tallies inputs that were truncated or empty."""

    max_input_tokens: int

    def __init__(self, generation: Generation):
        self.generation = generation
        self.counts: Counter[str] = Counter()

    @torch.inference_mode()
    def translate(self, texts: list[str]) -> list[str]:
        """Translations in input order; a blank text translates to ""."""
        out = [""] * len(texts)
        todo = [i for i, t in enumerate(texts) if t.strip()]
        self.counts["empty"] += len(texts) - len(todo)
        self.counts["translated"] += len(todo)
        if not todo:
            return out
        if self.generation.do_sample:
            torch.manual_seed(self.generation.seed)
        for i, text in zip(todo, self._translate([texts[i] for i in todo])):
            out[i] = text
        return out

    @abc.abstractmethod
    def _translate(self, texts: list[str]) -> list[str]:
        """Non-blank texts -> translations, in order."""

    def _truncate(self, ids: list[int]) -> list[int]:
        # Every backend ends a source with one </s> (FSMT, Marian, fairseq alike); keep it.
        if len(ids) <= self.max_input_tokens:
            return ids
        self.counts["truncated"] += 1
        return ids[: self.max_input_tokens - 1] + ids[-1:]


class HFTranslator(Translator):
    def __init__(
        self, model: str, device: str | None = None, dtype: str = "auto", generation: Generation = Generation()
    ):
        # Imported here: config validation imports this module for check_backend only.
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

        super().__init__(generation)
        path = Path(model).expanduser()
        if not path.is_dir() and (path.exists() or not HUB_ID.fullmatch(model)):
            raise InputError(f"translation model directory {model} does not exist")
        self.device, torch_dtype = _placement(device, dtype)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(model, trust_remote_code=False)
            with no_file_bars():
                self.model = AutoModelForSeq2SeqLM.from_pretrained(model, dtype=torch_dtype, trust_remote_code=False)
        except (OSError, ValueError) as e:
            raise InputError(f"cannot load translation model {model}: {' '.join(str(e).split())}") from None
        self.model.to(self.device).eval()
        # FSMT configs carry max_length=200, which generate() reports as a clash with max_new_tokens.
        self.model.generation_config.max_length = None
        limits = (
            generation.max_input_tokens,
            self.tokenizer.model_max_length,
            getattr(self.model.config, "max_position_embeddings", None),
        )
        self.max_input_tokens = min(n for n in limits if n)
        log.info(
            "translation model %s (%s) on %s in %s, inputs up to %d tokens",
            model,
            type(self.model).__name__,
            self.device,
            self.model.dtype,
            self.max_input_tokens,
        )

    @property
    def generate_kwargs(self) -> dict:
        """What model.generate() gets; read from `generation` each time, which callers may replace."""
        g = self.generation
        kwargs = dict(num_beams=g.num_beams, do_sample=g.do_sample, max_new_tokens=g.max_new_tokens)
        if g.do_sample:  # given to greedy or beam search, transformers warns that they are unused
            kwargs.update(top_k=g.top_k, temperature=g.temperature)
        return kwargs

    def _translate(self, texts: list[str]) -> list[str]:
        out = [""] * len(texts)
        ids = [self._truncate(x) for x in self.tokenizer(texts, verbose=False)["input_ids"]]
        # Length-sorted batches pad little; a stable sort keeps runs reproducible.
        order = sorted(range(len(ids)), key=lambda k: -len(ids[k]))
        for start in range(0, len(order), self.generation.batch_size):
            batch = order[start : start + self.generation.batch_size]
            for k, text in zip(batch, self._generate([ids[k] for k in batch])):
                out[k] = text
        return out

    def _generate(self, batch: list[list[int]]) -> list[str]:
        # Padded on the right: Marian numbers positions from the first column.
        input_ids = torch.full((len(batch), max(map(len, batch))), self.tokenizer.pad_token_id)
        mask = torch.zeros_like(input_ids)
        for row, ids in enumerate(batch):
            input_ids[row, : len(ids)] = torch.tensor(ids)
            mask[row, : len(ids)] = 1
        generated = self.model.generate(
            input_ids=input_ids.to(self.device), attention_mask=mask.to(self.device), **self.generate_kwargs
        )
        return self.tokenizer.batch_decode(generated, skip_special_tokens=True)


class FairseqTranslator(Translator):
    def __init__(
        self, model: str, device: str | None = None, dtype: str = "auto", generation: Generation = Generation()
    ):
        super().__init__(generation)
        # The plain WMT19 names are 4-model ensembles; `.single_model` is one checkpoint.
        ensemble = (
            {} if model.endswith(".single_model") else {"checkpoint_file": "model1.pt:model2.pt:model3.pt:model4.pt"}
        )
        self.hub = torch.hub.load("pytorch/fairseq", model, tokenizer="moses", bpe="fastbpe", **ensemble)
        device_, torch_dtype = _placement(device, dtype)
        self.hub.to(device=device_, dtype=torch_dtype).eval()
        self.hub.cfg.dataset.batch_size = generation.batch_size
        self.max_input_tokens = min(n for n in (generation.max_input_tokens, self.hub.max_positions[0]) if n)

    def _translate(self, texts: list[str]) -> list[str]:
        g = self.generation
        tokens = [torch.tensor(self._truncate(self.hub.encode(t).tolist())) for t in texts]
        # fairseq batches by length itself and returns hypotheses in input order.
        hypos = self.hub.generate(
            tokens,
            beam=g.num_beams,
            sampling=g.do_sample,
            sampling_topk=g.top_k or -1,
            temperature=g.temperature,
            max_len_a=0,
            max_len_b=g.max_new_tokens,
        )
        return [self.hub.decode(h[0]["tokens"]) for h in hypos]


def check_backend(backend: str, model: str) -> None:
    """Raise InputError, with the fix, when `backend` cannot run `model` here. Cheap: for config validation."""
    if backend not in BACKENDS:
        raise InputError(f"unknown translation backend {backend!r} (one of: {', '.join(BACKENDS)})")
    if backend == "hf":
        if model in FAIRSEQ_TO_HF:
            raise InputError(f"{model} is a fairseq hub name; with backend 'hf' use {FAIRSEQ_TO_HF[model]}")
        return
    try:
        import fairseq  # noqa: F401
    # fairseq 0.12.2 fails on Python 3.11 with a ValueError from its dataclasses, not an ImportError.
    except Exception as e:
        hf = FAIRSEQ_TO_HF.get(model) or "facebook/wmt19-en-de"
        names = ", ".join(sorted(set(FAIRSEQ_TO_HF.values())))
        raise InputError(
            f"translation backend 'fairseq' is unavailable: fairseq is missing or broken here "
            f"({type(e).__name__}: {e}). Use backend 'hf' with model {hf}: transformers' FSMT port of the "
            f"same WMT19 weights (one per direction: {names})"
        ) from None


def load_translator(
    backend: str, model: str, device: str | None = None, dtype: str = "auto", **generation
) -> Translator:
    """A Translator for `model` (hub name or local directory); `generation` holds Generation's fields."""
    check_backend(backend, model)
    unknown = set(generation) - set(Generation.model_fields)
    if unknown:
        raise InputError(
            f"unknown generation option(s) {', '.join(sorted(unknown))} (known: {', '.join(Generation.model_fields)})"
        )
    cls = HFTranslator if backend == "hf" else FairseqTranslator
    return cls(model, device, dtype, Generation(**generation))


def _placement(device: str | None, dtype: str) -> tuple[torch.device, torch.dtype]:
    """The device (default: CUDA when there is one) and dtype ("auto": bf16 where CUDA has it, else fp32)."""
    where = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if dtype == "auto":
        return where, torch.bfloat16 if where.type == "cuda" and torch.cuda.is_bf16_supported() else torch.float32
    if dtype not in DTYPES:
        raise InputError(f"unknown dtype {dtype!r} (auto, {', '.join(DTYPES)})")
    return where, DTYPES[dtype]
