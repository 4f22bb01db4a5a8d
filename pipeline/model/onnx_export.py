"""`cpipe export MODEL --onnx OUT`: the model as a sentence-transformers directory whose encoder is also ONNX.

OUT is the model's sentence-transformers directory, as sentence-transformers saves it: modules.json, the
Transformer module at its root (config.json, the tokenizer, the PyTorch weights), 1_Pooling/, the kept head's
Dense modules and a Normalize module where the model lists them; a plain Hugging Face model becomes one with mean
pooling, as sentence-transformers (and pipeline.model.exported.Encoder) read it. Beside them, onnx/model.onnx is
the encoder alone, where sentence-transformers' ONNX backend looks for it: inputs `input_ids` and
`attention_mask` (int64, [batch, sequence], both axes dynamic), output `last_hidden_state` ([batch, sequence,
hidden]), the token embeddings the directory's modules pool. export.json says where the graph is and how it was
checked. The graph is checked before OUT appears: a few sentences, embedded by onnxruntime and pooled as the
directory declares, and embedded by sentence-transformers from the directory's PyTorch weights, agree within
TOLERANCE, or nothing is written.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import warnings
from typing import TYPE_CHECKING

import numpy as np

from pipeline.corpus.credentials import conceal
from pipeline.errors import InputError
from pipeline.locate import hf_dir, resolve
from pipeline.model.exported import eval_length, export_pooling, st_dir
from pipeline.model.head import load_head
from pipeline.model.hf_files import portable_tokenizer, quiet_transformers
from pipeline.model.pooling import pool
from storage.modes import follow_umask

if TYPE_CHECKING:  # torch and transformers are imported by the export itself: its argument checks answer at once
    from sentence_transformers import SentenceTransformer
    from torch import nn

ONNX_FILE = "onnx/model.onnx"  # sentence-transformers' ONNX backend: <Transformer module>/onnx/model.onnx
INPUTS = ("input_ids", "attention_mask")
OUTPUT = "last_hidden_state"  # the output optimum's ORTModelForFeatureExtraction reads
DESCRIPTION = "export.json"
TOLERANCE = 1e-4  # float32 kernels of two runtimes differ by ~1e-6 on these; a wrong graph by far more
# The modules a sentence-transformers model may list that the check pools as the directory declares.
MODULES = ("Transformer", "Pooling", "Dense", "Normalize")
# Short and long, so that a batch is padded; the last one runs past every model's length limit (truncated).
CHECK_SENTENCES = [
    "A man is playing a guitar.",
    "Hi.",
    "The quick brown fox jumps over the lazy dog while the band plays on in the park nearby.",
    " ".join(["Long documents are truncated to the model's limit, and so is this one."] * 80),
]


class ExportMismatch(Exception):
    """The ONNX graph's embeddings are not the PyTorch model's (the CLI's exit 1)."""


def token_graph(model: nn.Module) -> nn.Module:
    """What the ONNX graph computes: the encoder's last layer, the token embeddings a Pooling module reads."""
    from torch import nn

    class TokenGraph(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    return TokenGraph().eval()


def _kinds(folder: str) -> list[str]:
    """The kinds of module a sentence-transformers directory lists, in order; none for a plain model."""
    if not os.path.isfile(modules := f"{folder}/modules.json"):
        return []
    with open(modules, encoding="utf-8") as f:
        return [str(m.get("type", "")).rsplit(".", 1)[-1] for m in json.load(f)]


def _check_modules(path: str) -> None:
    """An InputError naming modules.json for a module the check cannot reproduce, or a pooling it does not take."""
    if (folder := st_dir(path)) and (other := [k for k in _kinds(folder) if k not in MODULES]):
        raise InputError(
            f"{folder}/modules.json: module {other[0]} cannot be checked on the ONNX graph's output "
            f"(it takes {', '.join(MODULES)})"
        )
    export_pooling(path)


def check_target(out: str) -> None:
    """An InputError unless `out` can become the export: a new (or empty) directory in an existing one. A symbolic
    link is neither, wherever it points: the export, renamed into place at the end, replaces no link."""
    if os.path.islink(named := os.path.abspath(out)):  # abspath: "link/" names the link too
        raise InputError(f"{out}: a symbolic link (to {os.readlink(named)}); name a new directory")
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise InputError(f"{out}: exists and is not an empty directory; name a new one")
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        raise InputError(f"{out}: its parent directory {parent} does not exist")


def _export_graph(graph: nn.Module, tokenizer, file: str) -> None:
    import torch

    example = tokenizer(CHECK_SENTENCES[:2], padding=True, return_tensors="pt")
    batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence")
    axes = {name: {0: batch, 1: sequence} for name in INPUTS}
    os.makedirs(os.path.dirname(file), exist_ok=True)
    # The exporter's progress lines, and warnings about optional operators (torchvision's) and axis names,
    # say nothing about this graph.
    exporter_log = logging.getLogger("torch.onnx")
    level = exporter_log.level
    exporter_log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), torch.inference_mode(False), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                graph,
                tuple(example[name] for name in INPUTS),
                file,
                input_names=list(INPUTS),
                output_names=[OUTPUT],
                dynamic_shapes=axes,
                dynamo=True,
                verbose=False,
                external_data=_large(graph),
            )
    finally:
        exporter_log.setLevel(level)


def _large(graph: nn.Module) -> bool:
    """Whether the weights go beside the graph (model.onnx.data): protobuf cannot hold a file over 2 GB."""
    return sum(p.numel() * p.element_size() for p in graph.parameters()) > 1.8e9


def sentence_embeddings(folder: str, tokens: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    """The graph's token embeddings made sentence embeddings as `folder`'s modules declare: its pooling, its
    Dense head, Normalize."""
    import torch

    with torch.no_grad():
        out = pool(torch.from_numpy(tokens), torch.from_numpy(attention_mask), export_pooling(folder))
        if (head := load_head(folder)) is not None:
            out = head(out)
        if "Normalize" in _kinds(folder):
            out = torch.nn.functional.normalize(out, p=2, dim=1)
    return out.numpy()


def max_difference(folder: str, model: SentenceTransformer) -> float:
    """The largest absolute difference between the embeddings of CHECK_SENTENCES by onnxruntime (the graph and
    tokenizer in `folder`, pooled as its modules declare) and by `model`, the same directory in PyTorch."""
    import onnxruntime
    from transformers import AutoTokenizer

    session = onnxruntime.InferenceSession(f"{folder}/{ONNX_FILE}", providers=["CPUExecutionProvider"])
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
    batch = tokenizer(CHECK_SENTENCES, padding=True, truncation=True, return_tensors="np")
    mask = batch["attention_mask"].astype(np.int64)
    tokens = session.run([OUTPUT], {"input_ids": batch["input_ids"].astype(np.int64), "attention_mask": mask})[0]
    got = sentence_embeddings(folder, tokens, mask)
    want = model.encode(CHECK_SENTENCES, convert_to_numpy=True)
    return float(np.abs(got - want).max()) if got.shape == want.shape else float("inf")


def check_export(model: str, out: str) -> str:
    """The checks that need neither torch nor transformers (the CLI's, before it imports them): `out` can become
    the export, `model` is a model directory or hub name (downloaded now) whose modules the check reproduces.
    Returns the model's local directory."""
    check_target(out)
    if "://" in model:
        raise InputError(f"{model}: a local directory or a hub name (org/name), not a URL")
    local = resolve(model)
    _check_modules(local)
    return local


def _load(local: str) -> SentenceTransformer:
    """The model as sentence-transformers loads it, in float32 (the graph's type), cut at its length limit."""
    from sentence_transformers import SentenceTransformer

    # A plain model's MLM head and pooler, unused here, are in transformers' load report as if faults.
    with quiet_transformers():
        model = SentenceTransformer(st_dir(local) or hf_dir(local), device="cpu", trust_remote_code=False)
    model.float()
    transformer = model[0].auto_model
    limit = eval_length(transformer.config, model.tokenizer, model.max_seq_length or model.tokenizer.model_max_length)
    # sentence-transformers 6 keeps the limit in the tokenizer, 5 beside it: onnxruntime's users read the tokenizer's
    model.max_seq_length = model.tokenizer.model_max_length = limit
    return model


def export_onnx(model: str, out: str) -> float:
    """Write the ONNX export of `model` (a train dataset, a sentence-transformers or Hugging Face directory, or a
    hub name) to the new directory `out`; returns the check's largest difference. ExportMismatch, and nothing at
    `out`, when it exceeds TOLERANCE."""
    local = check_export(model, out)
    try:
        import onnxruntime  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError as e:
        raise InputError(
            f"cpipe export --onnx needs the `onnx` extra ({e.name} is not installed): "
            "pip install 'contrastive-pipeline[onnx]'"
        ) from None

    st = _load(local)
    parent = os.path.dirname(os.path.abspath(out))
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(os.path.abspath(out))}.tmp-", dir=parent)
    try:
        with quiet_transformers():
            st.save(tmp)
        portable_tokenizer(tmp)
        _export_graph(token_graph(st[0].auto_model), st.tokenizer, f"{tmp}/{ONNX_FILE}")
        difference = max_difference(tmp, st)
        if not difference <= TOLERANCE:  # NaN fails too
            raise ExportMismatch(
                f"{out}: the ONNX graph's embeddings differ from the PyTorch model's by up to "
                f"{difference:.3g} (more than {TOLERANCE:g}); nothing written"
            )
        _describe(tmp, model, difference)
        if os.path.isdir(out):
            os.rmdir(out)  # empty (checked above)
        follow_umask(tmp)  # mkdtemp's 0700 and safetensors' 0600, as the umask gives a new file
        os.rename(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return difference


def _describe(folder: str, model: str, difference: float) -> None:
    description = {
        "model": conceal(model),
        "onnx": ONNX_FILE,
        "inputs": list(INPUTS),
        "output": OUTPUT,
        "checked_max_abs_difference": difference,
    }
    with open(f"{folder}/{DESCRIPTION}", "w", encoding="utf-8") as f:
        json.dump(description, f, indent=2)
        f.write("\n")
