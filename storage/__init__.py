"""Parquet datasets on any fsspec filesystem: fingerprints, atomic writes, manifests."""

from storage.dataset import (
    DatasetError,
    DatasetWriter,
    complete,
    dataset_path,
    fingerprint,
    list_datasets,
    read_manifest,
    read_table,
    iter_batches,
)

__all__ = [
    "DatasetError",
    "DatasetWriter",
    "complete",
    "dataset_path",
    "fingerprint",
    "list_datasets",
    "read_manifest",
    "read_table",
    "iter_batches",
]
