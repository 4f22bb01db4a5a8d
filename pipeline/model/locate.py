"""Where a model reference (`model.base`, `cpipe evaluate --model`) is: a local model directory, or a Hugging Face
hub name, downloaded into the hub's own cache (HF_HOME, as transformers uses it).

Light on purpose: a pre-flight check imports this before torch, transformers or Prefect (see
`why_not_a_model`); only a hub name's download imports huggingface_hub.
"""

from __future__ import annotations

import json
import os
import re

from pipeline.errors import ConfigError, InputError

HUB_URL = "https://huggingface.co"
# "org/name" or a legacy top-level "name": what the hub accepts as a model id.
HUB_NAME = re.compile(r"^[\w.-]+(/[\w.-]+)?$")
# The PyTorch weights transformers reads (one file, or an index of shards).
WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
# What a hub repo may hold beside them that nothing here reads: other frameworks' weights and exported runtimes.
NOT_READ = ["*.h5", "*.msgpack", "*.ot", "*.onnx", "*.tflite", "onnx/*", "openvino/*", "coreml/*",
            "tf_model*", "flax_model*", "rust_model*"]
HF_DIR = "hf"  # where our exports keep the Hugging Face files, beside sentence-transformers/


def is_hub_name(ref: str) -> bool:
    """A reference no local path answers to, shaped as a hub model id."""
    return not ref.startswith((".", "~", "/")) and bool(HUB_NAME.match(ref)) and not os.path.exists(ref)


def hf_dir(path: str) -> str:
    """Where a model directory's Hugging Face files are: our exports' `hf/`, the Transformer module's folder
    that a sentence-transformers directory's modules.json names (the root itself, or e.g. 0_Transformer), else
    the directory itself."""
    if os.path.isdir(os.path.join(path, HF_DIR)):
        return os.path.join(path, HF_DIR)
    modules = os.path.join(path, "modules.json")
    if not os.path.isfile(modules):
        return path
    try:
        with open(modules, encoding="utf-8") as f:
            folders = [m["path"] for m in json.load(f) if m["type"].rsplit(".", 1)[-1] == "Transformer"]
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise InputError(f"{modules}: not a sentence-transformers module list ({e})") from None
    if not folders:
        raise InputError(f"{modules} lists no Transformer module")
    return os.path.join(path, folders[0])


def why_not_a_model(path: str) -> str | None:
    """Why the local `path` is no model directory (one line naming it), or None: it holds a config.json that is
    JSON and a weights file. Reads only the file system, so it costs milliseconds."""
    if not os.path.exists(path):
        return f"{path}: no such directory"
    if not os.path.isdir(path):
        return f"{path}: not a directory (a model is a directory holding config.json and its weights)"
    try:
        hf = hf_dir(path)
    except InputError as e:
        return str(e)
    config = os.path.join(hf, "config.json")
    if not os.path.isfile(config):
        return f"{path}: not a model directory (no config.json in {hf})"
    try:
        with open(config, encoding="utf-8") as f:
            json.load(f)
    except (ValueError, OSError) as e:
        return f"{config}: not readable JSON ({e})"
    if not any(os.path.isfile(os.path.join(hf, name)) for name in WEIGHTS):
        return f"{path}: no weights file in {hf} (one of {', '.join(WEIGHTS)})"
    return None


def resolve(ref: str) -> str:
    """The local model directory `ref` names: `ref` itself when it is a path (an fsspec URL is left to
    storage.local_copy), else the hub model's snapshot in the hub's cache, downloaded if need be. Anything
    else is an InputError of one line naming the reference (and, for a hub name, its URL)."""
    if "://" in ref:
        return ref
    if not is_hub_name(ref):
        if why := why_not_a_model(ref):
            raise InputError(why)
        return ref
    path = _download(ref)
    if why := why_not_a_model(path):
        raise InputError(f"{ref} ({HUB_URL}/{ref}): {why}")
    return path


def check_base(base: str | None) -> None:
    """The pre-flight check of `model.base`: a model directory, or a hub model, downloaded now (into the hub's
    cache, where the stages then find it), so that a bad or unreachable base stops the run before any work."""
    if base:
        try:
            resolve(base)
        except InputError as e:
            raise ConfigError(f"model.base: {e}") from None


def _download(name: str) -> str:
    import huggingface_hub
    from huggingface_hub import errors

    url = f"{HUB_URL}/{name}"
    try:
        return huggingface_hub.snapshot_download(name, ignore_patterns=NOT_READ)
    except errors.RepositoryNotFoundError:
        why = "no such model on the hub (or it is private or gated: log in with `hf auth login`)"
    except errors.LocalEntryNotFoundError:
        why = "the hub cannot be reached and the model is not in the hub's cache; pass a local directory"
    except (OSError, ValueError, errors.HTTPError) as e:
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    raise InputError(f"{name}: no such local directory, and it cannot be downloaded from {url}: {why}")
