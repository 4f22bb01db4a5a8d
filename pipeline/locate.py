"""Where a model reference (`model.base`, `cpipe evaluate --model`) is: a local model directory, or a Hugging Face
hub name, downloaded into the hub's own cache (HF_HOME, as transformers uses it).

Light on purpose: a pre-flight check imports this before torch, transformers or Prefect (see
`why_not_a_model`); only a hub name's download imports huggingface_hub.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import zipfile

from pipeline.errors import ConfigError, InputError

HUB_URL = "https://huggingface.co"
# "org/name" or a legacy top-level "name": what the hub accepts as a model id.
HUB_NAME = re.compile(r"^[\w.-]+(/[\w.-]+)?$")
# The PyTorch weights transformers reads (one file, or an index of shards).
WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
# What a hub repo may hold beside them that nothing here reads: other frameworks' weights and exported runtimes.
NOT_READ = [
    "*.h5",
    "*.msgpack",
    "*.ot",
    "*.onnx",
    "*.tflite",
    "onnx/*",
    "openvino/*",
    "coreml/*",
    "tf_model*",
    "flax_model*",
    "rust_model*",
]
HF_DIR = "hf"  # where our exports keep the Hugging Face files, beside ST_DIR
ST_DIR = "sentence-transformers"  # where they keep the sentence-transformers modules
SAFETENSORS = ("model.safetensors", "model.safetensors.index.json")  # preferred by transformers where present
# The names torch's weights-only unpickler lets a pickle use (torch.load(weights_only=True), as transformers reads a
# pytorch_model.bin), written out so that a weights file is checked before torch is imported: a file naming
# anything else (a payload's os.system, builtins.eval, ...) is refused before any work, not by a traceback later.
SAFE_GLOBALS = re.compile(
    r"_codecs\.encode|builtins\.(bytearray|complex|set)|collections\.(Counter|OrderedDict)"
    r"|torch\.(Size|Tensor|device|nn\.parameter\.Parameter|serialization\._get_layout"
    r"|_tensor\._rebuild_from_type_v2|storage\.(Typed|Untyped)Storage"
    r"|_utils\._rebuild_(tensor(_v[23])?|parameter(_with_state)?|qtensor|sparse_tensor|nested_tensor"
    r"|meta_tensor_no_storage|wrapper_subclass|device_tensor_from_(cpu_tensor|numpy))"
    r"|(cuda\.)?(sparse\.)?[A-Z][A-Za-z0-9]*(Storage|Tensor)"
    r"|u?int\d+|float\d\w*|bfloat16|complex\d+|bool|bits\w+|q(u)?int\w+|per_(tensor|channel)_\w+)"
)
ZIP_MAGIC = b"PK\x03\x04"  # how torch.load tells its zip format from the legacy one
LEGACY_PICKLES = 5  # torch's pre-zip format: magic number, protocol, system info, the object, its storages' keys


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
    try:
        pickled = _pickled_weights(path, hf)
    except InputError as e:
        return str(e)
    return _remote_code(hf) or next(filter(None, map(why_unsafe_pickle, pickled)), None)


def _remote_code(hf: str) -> str | None:
    """Why a model asking to run its own code is refused: transformers would ask on the terminal mid-run (or
    run it, trusted); it is loaded with trust_remote_code=False, so such a model is turned away at once."""
    for name in ("config.json", "tokenizer_config.json"):
        file = os.path.join(hf, name)
        try:
            with open(file, encoding="utf-8") as f:
                settings = json.load(f)
        except FileNotFoundError:
            continue
        except (ValueError, OSError) as e:
            return f"{file}: not readable JSON ({e})"
        if not isinstance(settings, dict):
            return f"{file}: not a JSON object"
        if settings.get("auto_map"):
            return (
                f"{file}: auto_map names the model's own code ({json.dumps(settings['auto_map'])[:120]}), "
                "which is never run here (trust_remote_code=False); use a model transformers implements"
            )
    return None


def _pickled_weights(path: str, hf: str) -> list[str]:
    """The pickled weights files what loads `path` would read: hf's pytorch_model.bin (or its shards) when it
    has no safetensors, and each sentence-transformers Dense module's pytorch_model.bin likewise."""
    folders = [hf] + [
        os.path.join(st, m["path"])
        for st in (os.path.join(path, ST_DIR), path)
        for m in _modules(st)
        if str(m.get("type", "")).endswith("Dense")
    ]
    files = []
    for folder in folders:
        if any(os.path.isfile(os.path.join(folder, name)) for name in SAFETENSORS):
            continue
        files.append(os.path.join(folder, "pytorch_model.bin"))
        index = os.path.join(folder, "pytorch_model.bin.index.json")
        if os.path.isfile(index):
            try:
                with open(index, encoding="utf-8") as f:
                    shards = set(json.load(f)["weight_map"].values())
            except (ValueError, OSError, KeyError, TypeError, AttributeError) as e:
                raise InputError(f"{index}: not a weights index ({e})") from None
            files += [os.path.join(folder, shard) for shard in sorted(shards)]
    return [f for f in files if os.path.isfile(f)]


def _modules(st: str) -> list[dict]:
    try:
        with open(os.path.join(st, "modules.json"), encoding="utf-8") as f:
            listed = json.load(f)
    except (OSError, ValueError):
        return []
    return (
        [m for m in listed if isinstance(m, dict) and isinstance(m.get("path"), str)]
        if isinstance(listed, list)
        else []
    )


def why_unsafe_pickle(file: str) -> str | None:
    """Why torch.load(weights_only=True) would refuse the pickled `file` (one line naming it), or None. Its
    pickles are read with every name they use checked against SAFE_GLOBALS and replaced by an inert stand-in,
    so reading them runs nothing; it costs milliseconds (the tensors' bytes are never read)."""
    try:
        with open(file, "rb") as f:
            zipped = f.read(4) == ZIP_MAGIC
        if zipped:
            with zipfile.ZipFile(file) as archive:
                # Every entry, not every name: of two entries of one name, open(name) reads the last, torch the first.
                for member in (info for info in archive.infolist() if info.filename.endswith(".pkl")):
                    with archive.open(member) as f:
                        _Scan(f).load()
        else:
            with open(file, "rb") as f:
                for _ in range(LEGACY_PICKLES):
                    _Scan(f).load()
    except _Refused as e:
        return f"{file}: refused, its pickle names {e} (weights may hold only tensors; save them as safetensors)"
    except Exception as e:  # noqa: BLE001 - whatever a malformed pickle raises, the answer is this one line
        return f"{file}: not readable as PyTorch weights ({type(e).__name__}: {_first_line(e)})"
    return None


def _first_line(e: BaseException) -> str:
    return next(iter(str(e).strip().splitlines()), "")


class _Refused(Exception):
    pass


class _Inert:
    """What an allowed name stands for while a pickle is checked: it takes any call, item or state and keeps none."""

    def __new__(cls, *args, **kwargs):
        return object.__new__(cls)

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        pass

    def __setitem__(self, key, value):
        pass

    def append(self, item):
        pass

    extend = add = append


class _Scan(pickle.Unpickler):
    """An unpickler that checks the names a pickle uses and builds nothing real (see why_unsafe_pickle)."""

    def find_class(self, module: str, name: str):
        module = "builtins" if module == "__builtin__" else module  # protocol 2, as torch.save writes
        if not SAFE_GLOBALS.fullmatch(f"{module}.{name}"):
            raise _Refused(f"{module}.{name}")
        return _Inert

    def persistent_load(self, pid):
        return _Inert()


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


def check_models(models: list[str]) -> None:
    """The pre-flight check of `cpipe evaluate --model`: each a model directory, or a hub model downloaded now
    into the hub's cache; the first that is not is an InputError of one line naming it."""
    for m in models:
        if "://" in m:
            raise InputError(f"--model {m}: a local directory or a hub name (org/name), not a URL")
        try:
            resolve(m)
        except InputError as e:
            raise InputError(f"--model {e}" if str(e).startswith(m) else f"--model {m}: {e}") from None


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
