"""The evaluate stage's settings (`evaluate:`): the data models are scored on, how, and the baselines."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import Field, field_validator

from pipeline.baselines.config import Baselines
from pipeline.baselines.fasttext.config import FastTextBaseline
from pipeline.config_base import Strict, absolute, unusable_name
from pipeline.readers.names import SICK_TASK, STS_TASKS, is_pair_column, pair_suffix, rankable_columns
from pipeline.readers.registry import is_kind_column
from pipeline.repeats import Seed


class BaselineRow(NamedTuple):
    """A leaderboard row the evaluate section adds beside the runs (EvaluateConfig.baseline_rows): its name, the
    setting that makes it, the kind of encoder it scores (pipeline.evaluate.encoders) and what that encoder is made
    from where a setting names it (a vectors file, a ModelBaseline, a USE directory; None where a stage builds it)."""

    name: str
    key: str
    kind: str
    source: Any = None


class EvaluateConfig(Strict):
    data: str | dict[str, str] | None = Field(
        None,
        description=(
            "directory holding SentEval-layout tasks (STS, transfer, SICK, MRPC) and/or STS pair files (sentence1, "
            "sentence2, score columns: .csv, .tsv, .jsonl[.gz], .parquet) and/or tasks of other kinds (retrieval in "
            "BEIR's layout, pairclass/ files: pipeline.evaluate.kinds), or one pair file; or {task: path or URL} "
            "of pair files, each downloaded once into corpus.download_dir and scored as that task"
        ),
    )
    batch_size: int = Field(128, ge=1)
    max_length: int = Field(128, ge=8)
    transfer: bool = Field(True, description="score the transfer tasks found in data")
    analysis: bool = Field(
        True,
        description=(
            "alignment, uniformity, sentence-level anisotropy and Ethayarajh's token-level anisotropy on STS-B"
        ),
    )
    seed: Seed = Field(
        1111,
        description=(
            "SentEval's seed: the transfer classifiers' folds and initialisation, the STS-B/SICK-R relatedness "
            "regressor's initialisation and shuffling, and the token pairs sampled for anisotropy"
        ),
    )
    kfold: int = Field(10, ge=2)
    transfer_protocol: Literal["senteval", "sklearn"] = Field(
        "senteval",
        description=(
            "the transfer tasks' classifier, named in each score row: senteval is SentEval's PyTorch logistic "
            "regression (Adam, batch 64, tenacity 5, epoch size 4, L2 in 1e-5..1e-2), as DeCLUTR and SimCSE ran it; "
            "sklearn is scikit-learn's LogisticRegression (SentEval's usepytorch=False)"
        ),
    )
    workers: int = Field(
        1,
        ge=1,
        description=(
            "above 1, models are scored as Ray tasks and each model's STS tasks, transfer tasks and analysis as "
            "Ray tasks of their own, up to 2 * workers of each in flight (Ray's CPUs bound how many run); "
            "the scores, and their cache, are the same as with 1"
        ),
    )
    rank_by: str | None = Field(
        None,
        description=(
            "the leaderboard column models are ranked by, e.g. 'avg STS (SimCSE 7)', 'avg STS (SentEval)', "
            "'avg transfer (SentEval)', 'STSB cosine', a task kind's 'avg retrieval' or '<task> nDCG@10' "
            "(pipeline.evaluate.kinds); null: the first of those averages that some model has, "
            "else the first score column with a value"
        ),
    )
    compare_to: str | None = Field(
        None,
        description=(
            "the leaderboard row every other row is compared with (a paired bootstrap over the same test items; "
            "cells whose difference is significant are marked); null: the encoder the runs start from (the "
            "untrained row, or the base model's row with model.base), when the leaderboard has it"
        ),
    )
    results_dir: str | None = Field(
        None,
        description=(
            "where MTEB's result files of every scored model go, <model>/<fingerprint>/<task>.json as mteb writes "
            "them (pipeline.evaluate.mteb_results); null: mteb-results/ under the artifacts directory"
        ),
    )
    untrained: bool = True
    fasttext: FastTextBaseline = Field(default_factory=FastTextBaseline)
    baselines: Baselines = Field(default_factory=Baselines)

    def baseline_rows(self, initial: str) -> list[BaselineRow]:
        """The rows beside the runs, in the leaderboard's order, each over several seeds once (the post-processed
        rows, made of these and the runs, apart); `initial`: the untrained encoder's row name
        (pipeline.config.Config.initial_name). The one list pipeline.config.Config.rows names and checks, and the
        evaluate stage scores (pipeline.evaluate.stage.pipeline_rows); InferSent's is here when enabled, though the
        stage leaves it out without NLI data to train on."""
        base = self.baselines
        return [
            *([BaselineRow(initial, "evaluate.untrained", "untrained")] if self.untrained else []),
            *([BaselineRow("fasttext-bow", "evaluate.fasttext.enabled", "fasttext")] if self.fasttext.enabled else []),
            *(
                [BaselineRow("infersent", "evaluate.baselines.infersent.enabled", "infersent")]
                if base.infersent.enabled
                else []
            ),
            *([BaselineRow("random", "evaluate.baselines.random", "random")] if base.random else []),
            *(
                BaselineRow(f"vectors-{Path(p).stem}", f"evaluate.baselines.vectors[{i}]", "vectors", p)
                for i, p in enumerate(base.vectors)
            ),
            *(
                BaselineRow(m.name, f"evaluate.baselines.models[{i}].name", "model", m)
                for i, m in enumerate(base.models)
            ),
            *([BaselineRow("use", "evaluate.baselines.use", "use", base.use.path)] if base.use is not None else []),
        ]

    @field_validator("data")
    @classmethod
    def _absolute_data(cls, v: str | dict[str, str] | None) -> str | dict[str, str] | None:
        if not isinstance(v, dict):
            return None if v is None else absolute(v)
        for task, spec in v.items():
            if why := unusable_name(task):  # it names MTEB's result file of the task
                raise ValueError(f"{task!r} is no usable task name: {why}")
            if task.startswith(".") or task in (*STS_TASKS, SICK_TASK):
                raise ValueError(f"{task!r}: a task name must be a file name, not a SentEval task's name")
            if not pair_suffix(spec):
                raise ValueError(
                    f"{task}: {spec} does not end in an STS pair file's suffix "
                    "(.csv, .tsv, .jsonl, .parquet; the text ones optionally .gz)"
                )
        return {task: absolute(spec) for task, spec in v.items()}

    @field_validator("results_dir")
    @classmethod
    def _absolute_results(cls, v: str | None) -> str | None:
        return None if v is None else absolute(v)

    @field_validator("rank_by")
    @classmethod
    def _known_column(cls, v: str | None) -> str | None:
        if v is not None and v not in rankable_columns() and not is_pair_column(v) and not is_kind_column(v):
            raise ValueError(f"{v!r} is not a leaderboard column; one of: {', '.join(rankable_columns())}")
        return v
