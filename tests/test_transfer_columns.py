"""The transfer tasks' leaderboard columns are typed (pipeline.evaluate.transfer.columns): the bootstrap recomputes
each from its declaration, not from its name parsed back, and the transfer average counts MRPC by its declared
mean of accuracy and F1."""

from __future__ import annotations

import pandas as pd

from pipeline.evaluate import resampled, transfer
from pipeline.leaderboard.intervals import Spec, averages, spec, typed_from


def _items(*keys: tuple[str, str]) -> dict[str, pd.DataFrame]:
    tasks, protocols = zip(*keys)
    return {"m": pd.DataFrame({"task": tasks, "protocol": protocols, "stratum": "all", "prediction": 0, "gold": 0})}


def test_each_transfer_column_is_recomputed_as_declared():
    typed = typed_from(_items(("MR", "senteval"), ("MRPC", "sklearn")))
    assert spec("MR senteval", typed) == Spec("MR", "senteval", resampled.mean_accuracy)
    assert spec("MRPC sklearn", typed) == Spec("MRPC", "sklearn", resampled.mean_accuracy)
    assert spec("MRPC F1 sklearn", typed) == Spec("MRPC", "sklearn", resampled.pooled_f1)
    assert spec("MRPC accuracy+F1 sklearn", typed) == Spec("MRPC", "sklearn", resampled.accuracy_f1)
    assert spec("MR sklearn", typed) is None  # no items under that protocol: no column typed
    assert spec("MR senteval") is None  # a bare name is not parsed


def test_the_transfer_average_counts_mrpc_by_accuracy_and_f1():
    typed = {c.name: c for t in ("MR", "MRPC") for c in transfer.columns(t, "senteval")}
    columns = ["MR senteval", "MRPC senteval", "MRPC F1 senteval", "avg transfer (SentEval)"]
    assert averages(columns, typed) == {"avg transfer (SentEval)": ["MR senteval", "MRPC accuracy+F1 senteval"]}
    assert [c.metric for c in transfer.columns("MRPC", "senteval")] == ["accuracy", "f1", "accuracy_f1"]
