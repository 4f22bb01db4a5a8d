"""Parquet datasets on any fsspec filesystem: fingerprints, atomic writes, manifests."""

from storage.dataset import (
    DatasetError,
    DatasetWriter,
    arrow_filesystem,
    complete,
    dataset_path,
    fingerprint,
    is_local,
    list_datasets,
    local_copy,
    put_file,
    read_manifest,
    read_table,
    remove,
    iter_batches,
    shards,
)

__all__ = [
    "DatasetError",
    "DatasetWriter",
    "arrow_filesystem",
    "complete",
    "dataset_path",
    "fingerprint",
    "is_local",
    "list_datasets",
    "local_copy",
    "put_file",
    "read_manifest",
    "read_table",
    "remove",
    "iter_batches",
    "shards",
]
