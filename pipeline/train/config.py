"""The train stage's settings (`train:`, and each of `runs:` over it): one run's training."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from pipeline import objectives
from pipeline.config_base import Strict, absolute
from pipeline.objectives.clear_names import unknown_augmentation
from pipeline.repeats import StrictSeed
from pipeline.train.losses import LOSSES
from pipeline.train.splits import why_test_split

# train.select_by's values beside a task's name.
STS_DEV, HELDOUT_LOSS = "sts-dev", "heldout-loss"

# The recipe keys with a value of their own in TrainConfig (the library's: torch's AdamW, or the value every
# objective used before presets carried it), so a key is the objective's unless set explicitly; for the
# other keys, null means the objective's.
RECIPE_KEYS = (
    "lr",
    "batch_size",
    "max_length",
    "weight_decay",
    "optimizer",
    "adam_eps",
    "correct_bias",
    "sgd_momentum",
    "projection_dim",
)


# How a setting enters the train stage's fingerprint, declared on its field (pipeline.stage.declared_settings reads
# them). RUNTIME: it changes how the model is trained (how often to log and checkpoint, how many failures to
# survive, threads and CPUs), not the model, so it stays out. num_workers and use_gpu stay in: the workers split
# each batch (and seed and shard by rank), and a GPU computes other floats; checkpoint_every is out, scored
# steps keep their own weights whatever it is.
RUNTIME = {"runtime": True}


def added_at(value: Any) -> dict:
    """A setting added after version 5 at `value`, the one every run trained with before it: left out of the
    fingerprint at that value, so that runs it leaves as they were keep their datasets."""
    return {"fingerprint_omits": value}


def uneven_batch(batch_size: int, num_workers: int) -> str:
    """Why batch_size cannot be split among num_workers, and the nearest values that can: each worker takes
    batch_size / num_workers rows a step, so a remainder would be dropped from every step, unsaid."""
    lower, upper = batch_size // num_workers * num_workers, -(-batch_size // num_workers) * num_workers
    batches = " or ".join(str(b) for b in (lower, upper) if b >= 2)
    divisors = [w for w in range(1, batch_size + 1) if batch_size % w == 0]
    workers = " or ".join(
        str(w)
        for w in sorted(
            {
                max((w for w in divisors if w < num_workers), default=1),
                min((w for w in divisors if w > num_workers), default=batch_size),
            }
        )
    )
    return (
        f"batch_size {batch_size} is not a multiple of num_workers {num_workers}: each worker would take "
        f"{batch_size // num_workers} pairs, {lower} a step in all; set batch_size to {batches}, "
        f"or num_workers to {workers}"
    )


class TrainConfig(Strict):
    """One run's training. The settings its objective's paper fixes (its declaration's `defaults`, in
    pipeline/objectives/<name>.py: loss, head, pooling, MLM, temperature, learning rate, batch size, max length,
    weight decay, optimizer, schedule) take the paper's values unless set here or in a run, where they win."""

    objective: str = Field(
        "declutr",
        description="declutr: spans of one document; cert: two "
        "back-translations of a sentence; simcse: a sentence twice (dropout); "
        "clear: two augmented views of a sentence; tsdae: a sentence with 60% of "
        "its tokens deleted, and the original its decoder rebuilds; simcse-sup: "
        "NLI premise, entailment and contradiction (hard negative)",
    )
    augmentation: str | None = Field(
        None,
        description="clear only: del-word, del-span, reorder, subs, or two "
        "joined by '+' (subs needs synonyms); null = del-span+reorder",
    )
    contrastive: bool = True
    init_from: str | None = Field(
        None,
        description=(
            "another run's name: this run starts from that run's exported model instead of the init stage's "
            "(e.g. an MLM-only run first, as the papers start from a pretrained LM); null = the init stage's"
        ),
    )
    mlm: bool | None = Field(
        None,
        description="add masked language modelling (15%, 80/10/10): on the anchors "
        "(declutr), on the original sentence (clear); null = the objective's default",
    )
    loss: str | None = Field(
        None,
        description=(
            "nt-xent: symmetric, 2N-2 negatives (SimCLR; DeCLUTR, CLEAR); info-nce: one direction, N-1 negatives "
            "(SimCSE's cl_forward); with momentum: moco (MoCo's builder, CERT: each query against its own key and "
            "the queue only) or moco-inbatch (against all N keys and the queue, which starts empty); denoising: "
            "TSDAE's reconstruction, tsdae's only; null = the objective's default, moco with momentum"
        ),
    )
    batch_size: int = Field(
        16, ge=2, description="anchors per step (N documents x A anchors); the objective's paper's unless set"
    )
    max_steps: int | None = Field(None, ge=1, description="cap on optimizer steps; null = one pass over the pairs")
    lr: float = Field(5e-5, gt=0, description="the peak learning rate; the objective's paper's unless set")
    weight_decay: float = Field(0.1, ge=0, description="the objective's paper's unless set")
    optimizer: Literal["adamw", "sgd"] = Field(
        "adamw",
        json_schema_extra=added_at("adamw"),
        description=(
            "adamw (decoupled weight decay, biases and LayerNorm undecayed, as BERT) or sgd (with sgd_momentum, "
            "weight decay on every weight: CERT's MOCO.py); the objective's paper's unless set"
        ),
    )
    adam_eps: float = Field(1e-8, gt=0, json_schema_extra=added_at(1e-8), description="AdamW's epsilon (DeCLUTR: 1e-6)")
    correct_bias: bool = Field(
        True,
        json_schema_extra=added_at(True),
        description=(
            "AdamW's bias correction; false is the HF AdamW's correct_bias=False that DeCLUTR's configs train with"
        ),
    )
    sgd_momentum: float = Field(
        0.0, ge=0, lt=1, json_schema_extra=added_at(0.0), description="sgd's momentum (CERT: 0.9)"
    )
    tie_decoder: bool = Field(
        True,
        json_schema_extra=added_at(False),
        description=(
            "tsdae: the decoder's transformer is the encoder's, weight for weight (the paper's, and sentence-"
            "transformers' tie_encoder_decoder=True); false: a copy of it sharing only the embedding matrix"
        ),
    )
    schedule: Literal["slanted-triangular", "linear", "cosine", "allennlp-lazy", "constant"] | None = Field(
        None,
        description=(
            "the learning rate's course: slanted-triangular (ULMFiT's: up for cut_frac of the steps, then down to "
            "lr / lr_ratio; DeCLUTR), linear (from lr down to 0, no warmup: the HF Trainer's default, SimCSE's), "
            "cosine (half a cosine from lr to 0: MoCo v2's, CERT's), allennlp-lazy (lr for the first step, then "
            "lr / lr_ratio: what AllenNLP 1.1's slanted triangle does when its lazy reader gives it no step count, "
            "as DeCLUTR's shipped configs ran), constant (TSDAE's); null = the objective's default"
        ),
    )
    cut_frac: float = Field(0.1, gt=0, lt=1)
    lr_ratio: float = Field(32.0, ge=1, description="slanted-triangular max/min learning-rate ratio")
    grad_clip: float = Field(1.0, gt=0)
    temperature: float | None = Field(None, gt=0, description="null = the objective's default (0.05; cert 0.07)")
    mlm_probability: float = Field(0.15, gt=0, lt=1)
    max_length: int = Field(
        512, ge=8, description="truncate spans to this many tokens (model limit); the objective's paper's unless set"
    )
    pooling: Literal["mean", "cls"] | None = Field(
        None, description="mean (DeCLUTR) or cls (SimCSE, CERT); the export records it; null = the objective's default"
    )
    projection: Literal["none", "linear", "tanh", "mlp"] | None = Field(
        None,
        description=(
            "a head on the embeddings in training only, dropped at export: mlp (SimCLR's Linear-ReLU-Linear; CLEAR, "
            "CERT), tanh (SimCSE's Linear+Tanh), linear, none; null = the objective's default"
        ),
    )
    keep_head: bool | None = Field(
        None,
        description=(
            "export the projection head after the pooling (a Dense module of the sentence-transformers export), so "
            "that evaluation embeds through it: supervised SimCSE's `cls` pooler; null = the objective's default "
            "(simcse-sup: true; the others drop it)"
        ),
    )
    hard_negative_weight: float = Field(
        0.0,
        description=(
            "simcse-sup: added to the logit of each anchor's own hard negative (SimCSE's --hard_negative_weight, "
            "a log-space weight; 0 as its scripts)"
        ),
    )
    projection_dim: int | None = Field(
        None,
        ge=1,
        json_schema_extra=added_at(None),
        description=("the head's output width (CERT's moco-dim: 128); null = the encoder's hidden size"),
    )
    momentum: float | None = Field(
        None,
        gt=0,
        lt=1,
        description=(
            "MoCo: a key encoder kept as this exponential moving average of the trained one embeds the positives "
            "without gradient, and memory_bank becomes MoCo's queue of its keys (CERT: 0.999); null = off"
        ),
    )
    memory_bank: int = Field(
        0,
        ge=0,
        description="earlier batches' positives kept as extra negatives: XBM, or with momentum MoCo's queue of keys",
    )
    grad_cache: int | None = Field(
        None,
        ge=1,
        description="GradCache: encode this many rows at a time; "
        "same gradients as the whole batch, in a chunk's memory",
    )
    grad_accumulation: int = Field(
        1,
        ge=1,
        description="micro-batches of batch_size per optimizer step "
        "(an effective batch k x batch_size); contrastive negatives still come from one "
        "micro-batch: grad_cache gives negatives from a whole large batch in small memory",
    )
    precision: Literal["fp32", "bf16", "fp16"] = Field(
        "fp32",
        description="the encoder's forward under autocast (fp16 with loss scaling); weights and losses stay float32",
    )
    num_workers: int = Field(1, ge=1)
    scale_fix: bool = Field(
        True,
        json_schema_extra=added_at(True),
        description=(
            "with num_workers > 1, the contrastive gradient is the global batch's, as with one worker; false "
            "scales it by 1 / num_workers against MLM's, as DeCLUTR's multi-GPU runs did (its scale_fix: false)"
        ),
    )
    use_gpu: bool = False
    compile: bool = Field(
        False,
        description=(
            "run the encoder's transformer under torch.compile (dynamic shapes: every step's blocks of rows differ); "
            "pays its compilation in the first steps, for faster steps on a GPU; on CPU it needs a C++ compiler"
        ),
    )
    block_tokens: int | None = Field(
        None,
        ge=0,
        description=(
            "encode a step's rows in length-sorted blocks, each padded to its own longest row, a row joining a block "
            "while it holds fewer than this many slots (or when the row is within 1/8 of its width); less padding "
            "computed, more kernel launches: on an H100 in bf16, eager, 4096 made DeCLUTR's step 1.32x slower than "
            "null (BENCHMARKS.md). null: every row padded to the longest"
        ),
    )
    packing: bool = Field(
        False,
        description=(
            "encode a step's rows packed end to end with per-row (variable-length) attention, computing no padding; "
            "Flash attention's varlen kernel on a GPU. Off: rows encode in length-sorted blocks each padded to its "
            "longest row. Same mathematics either way; needs a model on transformers' attention interface"
        ),
    )
    cpus_per_worker: int = Field(1, ge=1, json_schema_extra=RUNTIME)
    torch_threads: int | None = Field(
        None, ge=1, json_schema_extra=RUNTIME, description="null = every core of the machine"
    )
    checkpoint_every: int = Field(100, ge=1, json_schema_extra=RUNTIME)
    eval_every: int | None = Field(
        None,
        ge=1,
        description=(
            "model selection (SimCSE's load_best_model_at_end): every this many steps and at the last, score the "
            "model by select_by and export the best-scoring step's weights, not the last; checkpoints for resuming "
            "keep their own clock (checkpoint_every); null = off, the last is exported"
        ),
    )
    select_by: str | None = Field(
        None,
        description=(
            "what eval_every scores: sts-dev (Spearman of cosine on an STS-B-format dev file, dev_set), "
            "heldout-loss (the run's contrastive loss on the pairs of the documents augment.heldout_fraction holds "
            "out; lower is better), or the name of a task of another kind (retrieval, clustering, pairclass, "
            "reranking) found in dev_set, scored by its main metric; null = sts-dev"
        ),
    )
    dev_set: str | None = Field(
        None,
        description=(
            "the dev data eval_every scores (never a test split): for sts-dev an STS-B-format file (null = "
            "sts-dev.csv, STS-B dev, under evaluate.data); for a task, a directory in --eval-data's layouts "
            "holding it (null = evaluate.data, for a retrieval task's dev qrels)"
        ),
    )
    dev_split: str = Field(
        "dev",
        description="select_by a retrieval task: the qrels read, qrels/<dev_split>.tsv "
        "(BEIR's dev queries); never test",
    )
    max_failures: int = Field(2, ge=0, json_schema_extra=RUNTIME, description="worker failures Ray Train recovers from")
    log_every: int = Field(10, ge=1, json_schema_extra=RUNTIME)
    seed: StrictSeed = 0

    @field_validator("objective", mode="before")
    @classmethod
    def _registered(cls, v: Any) -> str:
        # What Literal[names] said, read from the registry when validating (an objective may be registered later).
        if v not in objectives.names():
            *first, last = (repr(n) for n in objectives.names())
            raise PydanticCustomError(
                "literal_error", "Input should be {expected}", {"expected": f"{', '.join(first)} or {last}"}
            )
        return v

    @field_validator("loss", mode="before")
    @classmethod
    def _declared_loss(cls, v: Any) -> str | None:
        # What Literal[names] said, read from pipeline.train.losses when validating (a test may declare one).
        if v is not None and v not in LOSSES:
            *first, last = (repr(n) for n in LOSSES)
            raise PydanticCustomError(
                "literal_error", "Input should be {expected}", {"expected": f"{', '.join(first)} or {last}"}
            )
        return v

    @field_validator("dev_set")
    @classmethod
    def _not_a_test_split(cls, v: str | None) -> str | None:
        if v is not None and (why := why_test_split(v)):
            raise ValueError(
                f"{v} is a test split ({why}): selecting on it would leak the test set into the "
                "reported scores; use a dev split such as STS-B's sts-dev.csv"
            )
        return None if v is None else absolute(v)

    @model_validator(mode="after")
    def _objective(self) -> TrainConfig:
        # Written past validate_assignment so that the fields stay unset: a run built from this config's
        # explicit settings (Config.run_configs) then takes its own objective's defaults.
        # MoCo's loss is MoCo's wherever momentum is on and the loss unset.
        if self.momentum is not None and self.loss is None:
            self.__dict__["loss"] = "moco"
        declared = objectives.objective(self.objective)
        for name, value in declared.defaults.items():
            if getattr(self, name) is None or (name in RECIPE_KEYS and name not in self.model_fields_set):
                self.__dict__[name] = value
        if (declared.decoder is not None) != (self.loss == "denoising"):  # the denoising loss is a decoder's
            raise ValueError(
                f"loss {self.loss!r} does not fit objective {self.objective!r}: loss denoising "
                "(TSDAE's decoder) trains on tsdae's pairs only, and tsdae on it only"
            )
        if self.keep_head is None:
            self.__dict__["keep_head"] = False
        if why := declared.check(self):
            raise ValueError(why)
        if self.hard_negative_weight and not declared.hard_negatives:
            raise ValueError(
                f"hard_negative_weight is simcse-sup's setting; objective {self.objective!r} has no hard negatives"
            )
        if self.keep_head and self.projection == "none":
            raise ValueError("keep_head: true needs a projection head to keep (projection: none)")
        if self.batch_size % self.num_workers:
            raise ValueError(uneven_batch(self.batch_size, self.num_workers))
        if self.select_by is not None and self.eval_every is None:
            raise ValueError(f"select_by {self.select_by!r} chooses what eval_every scores: set eval_every too")
        if self.select_by == HELDOUT_LOSS and not self.contrastive:
            raise ValueError(
                "select_by heldout-loss is the contrastive loss on held-out pairs, and this run has "
                "contrastive: false: give it select_by sts-dev or a task, or eval_every: null"
            )
        if self.dev_split == "test":
            raise ValueError("dev_split test: selecting on the test split would leak it into the reported scores")
        if not (self.contrastive or self.mlm):
            raise ValueError("at least one of contrastive and mlm must be true")
        if self.momentum is not None and not self.contrastive:
            raise ValueError("momentum (MoCo's key encoder) needs the contrastive loss")
        if self.loss in ("moco", "moco-inbatch") and self.momentum is None:
            raise ValueError(f"loss {self.loss} scores queries against MoCo's keys: set momentum (CERT: 0.999)")
        if self.loss == "moco" and not self.memory_bank:
            raise ValueError(
                "loss moco scores each query against its own key and MoCo's queue only: set "
                "memory_bank to the queue's size (CERT: 6720), or use loss moco-inbatch"
            )
        if self.loss == "info-nce" and self.momentum is not None:
            raise ValueError(
                "with momentum, loss is moco (each query against its own key and the queue, MoCo's "
                "builder) or moco-inbatch (against every key of the batch and the queue)"
            )
        if self.projection == "none" and self.projection_dim is not None:
            if "projection_dim" in self.model_fields_set:
                raise ValueError("projection_dim sets the head's width: projection none has no head")
            self.__dict__["projection_dim"] = None  # the objective's head width, for a run that dropped the head
        if self.augmentation is not None:
            if declared.views is None:
                raise ValueError(f"augmentation is CLEAR's setting; objective {self.objective!r} takes none")
            if why := unknown_augmentation(self.augmentation):  # the rule clear_operations.operations applies
                raise ValueError(why)
        return self

    def inert(self) -> set[str]:
        """The settings this run's fingerprint leaves out whatever their value (pipeline.stage.declared_settings):
        init_from, whose parent's dataset is an input (so its fingerprint is the child's, and renaming the parent
        rebuilds nothing), and the settings that select nothing here (select_by without eval_every, tie_decoder
        without a decoder, dev_split but for a task), so that runs configured before them keep their datasets."""
        task = self.eval_every and self.select_by not in (None, STS_DEV, HELDOUT_LOSS)
        return {
            "init_from",
            *(() if self.eval_every else ("select_by",)),
            *(() if self.loss == "denoising" else ("tie_decoder",)),
            *(() if task else ("dev_split",)),
        }

    @property
    def views(self) -> str | None:
        """The CLEAR augmentation this run trains on."""
        default = objectives.objective(self.objective).views
        return (self.augmentation or default) if default is not None else None

    def recipe(self) -> str:
        """The hyperparameters that tell runs apart, for the leaderboard's row: always the loss, head and pooling."""
        head = "no head" if self.projection == "none" else f"{self.projection} head"
        width = f" to {self.projection_dim}" if self.projection_dim else ""
        parts = [
            f"batch {self.batch_size}",
            f"{self.max_steps or 'all'} steps",
            f"lr {self.lr:g} {self.schedule}",
            self.optimizer_recipe(),
            f"weight decay {self.weight_decay:g}",
            f"max length {self.max_length}",
        ]
        if self.loss == "denoising":
            parts += [f"denoising decoder{'' if self.tie_decoder else ' (untied)'}", head]
        elif self.contrastive:
            parts += [f"{self.loss} tau {self.temperature:g}", head + width + (" kept" if self.keep_head else "")]
            if objectives.objective(self.objective).hard_negatives:
                parts.append(f"hard negatives (weight {self.hard_negative_weight:g})")
        parts.append(f"{self.pooling} pooling")
        bank = f"{'MoCo queue' if self.momentum else 'XBM'} {self.memory_bank}"
        parts += [
            label
            for on, label in (
                (not self.contrastive, "no contrastive"),
                (self.mlm, "+MLM"),
                (self.momentum, f"MoCo m {self.momentum}"),
                (self.memory_bank, bank),
                (self.grad_cache, f"grad cache {self.grad_cache}"),
                (self.grad_accumulation > 1, f"grad accumulation {self.grad_accumulation}"),
                (self.precision != "fp32", self.precision),
                (
                    not self.scale_fix and self.num_workers > 1,
                    f"contrastive gradient / {self.num_workers} (scale_fix false)",
                ),
            )
            if on
        ]
        return ", ".join(parts)

    def optimizer_recipe(self) -> str:
        if self.optimizer == "sgd":
            return f"SGD momentum {self.sgd_momentum:g}"
        return f"AdamW eps {self.adam_eps:g}" + ("" if self.correct_bias else " no bias correction")

    @property
    def pairs(self) -> str:
        """Names the augment dataset this run trains on: runs with the same name share it."""
        return f"{self.objective}-{self.views}" if self.views else self.objective
