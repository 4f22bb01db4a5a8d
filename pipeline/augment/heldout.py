"""Documents held out of training (augment.heldout_fraction), whose pairs score a run by its held-out loss
(train.select_by: heldout-loss) without any labelled dev set.

A document is held out by its doc_id's hash alone: the same documents whatever the seed, the epoch or the
objective, so no epoch trains on a document another epoch held out, and runs of every objective and seed are
selected on the same documents. The pair makers write as usual; `HeldOutSplit` stands between them and the
dataset, sending a held-out document's pairs to `heldout.parquet` beside the shards (the first epoch's only:
later epochs redraw the same documents' pairs, and one fixed set keeps the score comparable step to step)
and every other pair to the shards the train stage reads. A held-out pair is never in a shard.
"""

from __future__ import annotations

import hashlib

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.errors import InputError

HELDOUT = "heldout.parquet"  # beside a pairs dataset's shards
MIN_PAIRS = 2  # a contrastive loss needs a negative


def held_out(doc_id: str, fraction: float) -> bool:
    """Whether the document is held out: the first 8 bytes of sha256(doc_id), as a fraction of 2^64, below
    `fraction`."""
    return int.from_bytes(hashlib.sha256(doc_id.encode()).digest()[:8], "big") < fraction * 2**64


class HeldOutSplit:
    """A DatasetWriter for the pair makers that holds out `fraction` of the documents; `close` writes the
    held-out pairs and counts them in the manifest (`heldout_pairs`, and the pairs of later epochs left out of
    both, `heldout_later_epochs`)."""

    def __init__(self, out, fraction: float, schema: pa.Schema):
        self.out, self.fraction, self.schema = out, fraction, schema
        self.kept: list[dict] = []
        self.documents: set[str] = set()

    def write(self, rows: list[dict]) -> None:
        train = []
        for row in rows:
            if not held_out(row["doc_id"], self.fraction):
                train.append(row)
            elif row["epoch"] == 0:
                self.kept.append(row)
                self.documents.add(row["doc_id"])
            else:
                self.out.count("heldout_later_epochs")
        if train:
            self.out.write(train)

    def __getattr__(self, name: str):
        return getattr(self.out, name)  # count, extra, local_dir: the dataset's own

    def close(self) -> None:
        # Too few to score a run by is the error of a run that selects by held-out loss (read_heldout), not of the
        # pairs: every objective's pairs hold the same documents out, whichever runs score on them.
        pq.write_table(pa.Table.from_pylist(self.kept, schema=self.schema), f"{self.out.local_dir}/{HELDOUT}")
        self.out.count("heldout_pairs", len(self.kept))
        self.out.extra["heldout"] = {
            "fraction": self.fraction,
            "documents": len(self.documents),
            "pairs": len(self.kept),
        }


def read_heldout(pairs: str, columns: list[str] | None = None) -> pa.Table:
    """A pairs dataset's held-out pairs; an InputError naming the dataset when it holds none."""
    try:
        with fsspec.open(f"{pairs.rstrip('/')}/{HELDOUT}", "rb") as f:
            table = pq.read_table(f, columns=columns)
    except FileNotFoundError:
        raise InputError(
            f"train: {pairs} holds no {HELDOUT}; rebuild it with augment.heldout_fraction above 0"
        ) from None
    if table.num_rows < MIN_PAIRS:
        raise InputError(
            f"train: {pairs} holds {table.num_rows} held-out pair(s); the held-out loss needs at "
            f"least {MIN_PAIRS}: raise augment.heldout_fraction"
        )
    return table
