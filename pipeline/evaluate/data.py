"""Evaluation data named file by file (`evaluate.data: {task: path or URL}`), made one local directory.

The default profile names public STS pair files (MTEB's copies on the Hugging Face hub) by URL. Each is fetched
once into the download cache (resumably, pipeline.corpus.download) and copied into a directory named by the mapping's
hash as `<task><format suffix>`, so the evaluation reads it like any directory of STS pair files and scores each
file as the task it was named.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from pipeline.corpus.download import LOCAL_COPIES, fetch
from pipeline.readers.names import pair_suffix


def local_eval_data(data: str | dict[str, str] | None, download_dir: str) -> str | None:
    """A directory (or file) the evaluation can read: `data` itself unless it maps task names to files or URLs."""
    if not isinstance(data, dict):
        return data
    key = hashlib.sha256(json.dumps(sorted(data.items())).encode()).hexdigest()[:16]
    target = Path(download_dir) / f"eval-{key}"
    target.mkdir(parents=True, exist_ok=True)
    for task, spec in data.items():
        dest = target / f"{task}{pair_suffix(spec)}"
        fetched = fetch(spec, download_dir, hint=LOCAL_COPIES)
        partial = dest.with_name(dest.name + ".part")
        shutil.copyfile(fetched, partial)
        os.replace(partial, dest)  # copied every time, so an edited local file is what is scored
    return str(target)
