"""Per-item test outputs, kept beside a model's scores so the leaderboard can bootstrap over the test items.

One record per scored test item, in the order the scorer saw the items (the same for every model scored on the
same data, so two models' items pair up by position):

- STS tasks: `prediction` the pair's similarity (cosine, protocol "cosine") or the relatedness regressor's
  predicted score (protocol "senteval"), `gold` its gold score; `stratum` the STS12-16 subset, else "all".
- transfer tasks: `prediction` the predicted class, `gold` the label (correct where they agree; MRPC's F1 from
  both); `stratum` the outer cross-validation fold ("fold 0", ...) for the tasks scored by k-fold, else "all".
- other task kinds whose main metric is a mean over queries (retrieval's nDCG@10, reranking's MAP): `protocol`
  the kind, `prediction` the query's value of that metric, `gold` 0; `stratum` "all" (pipeline.evaluate.kinds).
- pair classification: `prediction` the pair's cosine, `gold` its label (0/1); `stratum` "all".
- clustering: `prediction` the sentence's cluster in one k-means run, `gold` its label's code within its set;
  `stratum` "set S run R" (`run_stratum`): the runs of one set cluster the same sentences, so the bootstrap draws
  them once per set (`run_group`).

The records go to ITEMS in the evaluate dataset's directory, beside its score shards (which `read_table` reads;
this file it does not). Its leading "_" keeps it out of `pd.read_parquet(<evaluate dir>)` and any pyarrow dataset
discovery, which would otherwise read the items in place of the scores; `read` still finds OLD_ITEMS, the name
datasets written before kept them under.
"""

from __future__ import annotations

from typing import NamedTuple

import fsspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from storage import verify

ITEMS = "_items.parquet"
OLD_ITEMS = "items.parquet"
SCHEMA = pa.schema(
    [
        ("task", pa.string()),
        ("protocol", pa.string()),
        ("stratum", pa.string()),
        ("prediction", pa.float64()),
        ("gold", pa.float64()),
    ]
)
WHOLE = "all"


class Items(NamedTuple):
    """One stratum's test items of one task under one protocol."""

    task: str
    protocol: str
    stratum: str
    prediction: np.ndarray
    gold: np.ndarray


def fold(i: int) -> str:
    return f"fold {i}"


def run_stratum(group: int, run: int) -> str:
    return f"set {group} run {run}"


def run_group(stratum: str) -> str:
    """The set a run's stratum belongs to (the stratum itself for any other)."""
    return stratum.rsplit(" run ", 1)[0]


def to_table(items: list[Items]) -> pa.Table:
    columns = {name: [] for name in SCHEMA.names}
    for it in items:
        n = len(it.gold)
        columns["task"] += [it.task] * n
        columns["protocol"] += [it.protocol] * n
        columns["stratum"] += [it.stratum] * n
        columns["prediction"].append(np.asarray(it.prediction, dtype=np.float64))
        columns["gold"].append(np.asarray(it.gold, dtype=np.float64))
    for key in ("prediction", "gold"):
        columns[key] = np.concatenate(columns[key]) if columns[key] else np.zeros(0)
    return pa.table(columns, schema=SCHEMA)


def write(items: list[Items], directory: str) -> None:
    pq.write_table(to_table(items), f"{directory}/{ITEMS}")


def read(dataset: str) -> pd.DataFrame | None:
    """A finished evaluate dataset's items, or None for one written before they were kept."""
    verify(dataset)  # a missing or changed items file is a damaged dataset (its manifest's "files")
    fs, root = fsspec.core.url_to_fs(dataset.rstrip("/"))
    for name in (ITEMS, OLD_ITEMS):
        if fs.exists(f"{root}/{name}"):
            with fs.open(f"{root}/{name}", "rb") as f:
                return pq.read_table(f).to_pandas()
    return None
