"""`cpipe export MODEL --onnx OUT`: a model as one ONNX graph from token ids to the sentence embedding.

The graph is the encoder, its pooling (mean or cls, as the model declares) and the Dense head and Normalize
module where its sentence-transformers modules list them, so a runtime needs only the tokenizer and the graph:
inputs `input_ids` and `attention_mask` (int64, [batch, sequence], both axes dynamic), output
`sentence_embedding` ([batch, dimension]). OUT also holds the tokenizer (loadable by transformers 4 and 5), the
encoder's config.json and export.json, which says the above. The graph is checked before OUT appears: a few
sentences embedded by onnxruntime and by the PyTorch model (pipeline.model.exported.Encoder, as the evaluate
stage reads the model) agree within TOLERANCE, or nothing is written.
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
from pipeline.locate import resolve
from pipeline.model.exported import Encoder, st_dir
from pipeline.model.hf_files import portable_tokenizer
from pipeline.model.pooling import pool

if TYPE_CHECKING:  # torch and transformers are imported by the export itself: its argument checks answer at once
    from torch import nn

ONNX_FILE = "model.onnx"
INPUTS = ("input_ids", "attention_mask")
OUTPUT = "sentence_embedding"
DESCRIPTION = "export.json"
TOLERANCE = 1e-4  # float32 kernels of two runtimes differ by ~1e-6 on these; a wrong graph by far more
# The modules a sentence-transformers model may list that the graph reproduces; any other would be left out.
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


def sentence_graph(encoder: Encoder, normalize: bool) -> nn.Module:
    """What the ONNX graph computes: the encoder's last layer, pooled, through the kept head, normalised where the
    model lists Normalize."""
    from torch import nn

    class SentenceGraph(nn.Module):
        def __init__(self):
            super().__init__()
            self.model, self.head = encoder.model, encoder.head

        def forward(self, input_ids, attention_mask):
            hidden = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            pooled = pool(hidden, attention_mask, encoder.pooling)
            out = self.head(pooled) if self.head is not None else pooled
            return nn.functional.normalize(out, p=2, dim=1) if normalize else out

    return SentenceGraph().eval()


def _modules(path: str) -> tuple[bool, int | None]:
    """(whether the model's sentence-transformers modules end in Normalize, their max_seq_length or None); an
    InputError naming modules.json for a module the graph cannot reproduce."""
    folder = st_dir(path)
    if folder is None:
        return False, None
    with open(f"{folder}/modules.json", encoding="utf-8") as f:
        kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in json.load(f)]
    if other := [k for k in kinds if k not in MODULES]:
        raise InputError(
            f"{folder}/modules.json: module {other[0]} has no place in the ONNX graph (it takes {', '.join(MODULES)})"
        )
    length = None
    if os.path.isfile(config := f"{folder}/sentence_bert_config.json"):
        with open(config, encoding="utf-8") as f:
            length = json.load(f).get("max_seq_length")
    return "Normalize" in kinds, length


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


def _export_graph(graph: nn.Module, encoder: Encoder, file: str) -> None:
    import torch

    example = encoder.tokenizer(CHECK_SENTENCES[:2], padding=True, return_tensors="pt")
    batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence")
    axes = {name: {0: batch, 1: sequence} for name in INPUTS}
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


def max_difference(folder: str, encoder: Encoder, normalize: bool) -> float:
    """The largest absolute difference between onnxruntime's embeddings of CHECK_SENTENCES, from the graph and
    tokenizer in `folder`, and the PyTorch model's (`encoder`, normalised where the model lists Normalize)."""
    import onnxruntime
    from transformers import AutoTokenizer

    session = onnxruntime.InferenceSession(f"{folder}/{ONNX_FILE}", providers=["CPUExecutionProvider"])
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
    batch = tokenizer(CHECK_SENTENCES, padding=True, truncation=True, return_tensors="np")
    got = session.run([OUTPUT], {name: batch[name].astype(np.int64) for name in INPUTS})[0]
    want = encoder.encode(CHECK_SENTENCES)
    if normalize:
        want = want / np.maximum(np.linalg.norm(want, axis=1, keepdims=True), 1e-12)
    return float(np.abs(got - want).max())


def check_export(model: str, out: str) -> str:
    """The checks that need neither torch nor transformers (the CLI's, before it imports them): `out` can become
    the export, `model` is a model directory or hub name (downloaded now). Returns the model's local directory."""
    check_target(out)
    if "://" in model:
        raise InputError(f"{model}: a local directory or a hub name (org/name), not a URL")
    return resolve(model)


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

    normalize, length = _modules(local)
    encoder = Encoder(local, device="cpu", max_length=1 << 30)  # the model's own limit, cut to length below
    if length:
        encoder.max_length = min(encoder.max_length, length)
    encoder.model.float()
    if encoder.head is not None:
        encoder.head.float()
    graph = sentence_graph(encoder, normalize)
    parent = os.path.dirname(os.path.abspath(out))
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(os.path.abspath(out))}.tmp-", dir=parent)
    try:
        _export_graph(graph, encoder, f"{tmp}/{ONNX_FILE}")
        # truncation=True then cuts where the PyTorch model (and sentence-transformers) cut
        encoder.tokenizer.model_max_length = encoder.max_length
        encoder.tokenizer.save_pretrained(tmp)
        portable_tokenizer(tmp)
        encoder.model.config.save_pretrained(tmp)
        difference = max_difference(tmp, encoder, normalize)
        if not difference <= TOLERANCE:  # NaN fails too
            raise ExportMismatch(
                f"{out}: the ONNX graph's embeddings differ from the PyTorch model's by up to "
                f"{difference:.3g} (more than {TOLERANCE:g}); nothing written"
            )
        _describe(tmp, model, encoder, normalize, difference)
        if os.path.isdir(out):
            os.rmdir(out)  # empty (checked above)
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp's 0700, widened as a plain mkdir would
        os.rename(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return difference


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _describe(folder: str, model: str, encoder: Encoder, normalize: bool, difference: float) -> None:
    description = {
        "model": conceal(model),
        "inputs": list(INPUTS),
        "output": OUTPUT,
        "pooling": encoder.pooling,
        "head": encoder.head is not None,
        "normalize": normalize,
        "dimension": encoder.dimension,
        "max_length": encoder.max_length,
        "checked_max_abs_difference": difference,
    }
    with open(f"{folder}/{DESCRIPTION}", "w", encoding="utf-8") as f:
        json.dump(description, f, indent=2)
        f.write("\n")
