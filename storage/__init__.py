"""Parquet datasets on any fsspec filesystem: fingerprints, atomic writes, manifests."""

from storage.lease import leased
from storage.dataset import (
    DatasetError,
    DatasetWriter,
    arrow_filesystem,
    check_writable,
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
    remove_temporaries,
    iter_batches,
    shards,
)

__all__ = [
    "DatasetError",
    "DatasetWriter",
    "arrow_filesystem",
    "check_writable",
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
    "remove_temporaries",
    "leased",
    "iter_batches",
    "shards",
]
