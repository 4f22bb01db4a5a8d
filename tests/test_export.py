"""`cpipe export MODEL --onnx OUT`: a sentence-transformers directory with its encoder as onnx/model.onnx, where
sentence-transformers' ONNX backend finds it; onnxruntime's token embeddings, pooled as the directory declares
(computed here independently, in numpy), are sentence-transformers' own embeddings of the PyTorch model."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipeline.locate import HF_DIR, ST_DIR
from tests.conftest import ROOT
from tests.helpers import tiny_model

# Not the sentences the command checks itself with; of several lengths, so that batches are padded.
SENTENCES = ["the garden behind the house was green", "we walked", "small", "a house and a garden and friends " * 6]
ACTIVATIONS = {"Tanh": np.tanh, "Identity": lambda x: x}


def _token_embeddings(out: Path, sentences: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """onnxruntime's last_hidden_state of onnx/model.onnx for `sentences`, and their attention mask."""
    import onnxruntime
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(out))
    session = onnxruntime.InferenceSession(str(out / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["input_ids", "attention_mask"]
    assert [o.name for o in session.get_outputs()] == ["last_hidden_state"]
    batch = tokenizer(sentences, padding=True, truncation=True, return_tensors="np")
    feeds = {k: batch[k].astype(np.int64) for k in ("input_ids", "attention_mask")}
    return session.run(["last_hidden_state"], feeds)[0], feeds["attention_mask"]


def _onnx_embeddings(out: Path, sentences: list[str]) -> np.ndarray:
    """The graph's token embeddings through the modules out/modules.json lists after the Transformer, in numpy."""
    from safetensors.numpy import load_file

    x, mask = _token_embeddings(out, sentences)
    modules = json.loads((out / "modules.json").read_text())
    assert modules[0]["type"].endswith(".Transformer") and modules[0]["path"] == ""  # where onnx/ is looked for
    for module in modules[1:]:
        kind, folder = module["type"].rsplit(".", 1)[-1], out / module["path"]
        config = json.loads((folder / "config.json").read_text()) if kind != "Normalize" else {}
        if kind == "Pooling" and config["pooling_mode"] == "cls":
            x = x[:, 0]
        elif kind == "Pooling" and config["pooling_mode"] == "mean":
            x = (x * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
        elif kind == "Dense":
            weights = load_file(folder / "model.safetensors")
            x = ACTIVATIONS[config["activation_function"].rsplit(".", 1)[-1]](
                x @ weights["linear.weight"].T + weights["linear.bias"]
            )
        elif kind == "Normalize":
            x = x / np.linalg.norm(x, axis=1, keepdims=True)
        else:
            raise AssertionError(f"a module the export does not write: {module}")
    return x


def _matches_sentence_transformers(out: Path, st_dir: Path) -> None:
    from sentence_transformers import SentenceTransformer

    want = SentenceTransformer(str(st_dir), device="cpu").encode(SENTENCES, convert_to_numpy=True)
    # the whole batch, and batches of other sizes and widths: both axes are dynamic
    for got in (
        _onnx_embeddings(out, SENTENCES),
        np.concatenate([_onnx_embeddings(out, SENTENCES[:1]), _onnx_embeddings(out, SENTENCES[1:])]),
        SentenceTransformer(str(out), device="cpu").encode(SENTENCES, convert_to_numpy=True),  # its PyTorch weights
    ):
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= 1e-4


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return tiny_model(tmp_path_factory.mktemp("export") / "model")


@pytest.mark.slow  # a cpipe process
def test_cli_exports_a_sentence_transformers_directory_whose_graph_embeds_as_it_does(model, tmp_path):
    from sentence_transformers.backend import backend_should_export

    out = tmp_path / "onnx"
    proc = subprocess.run(
        [sys.executable, "-m", "flows.cpipe", "export", str(model), "--onnx", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=lambda: os.umask(0o022),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith(f"cpipe: exported {model} to {out}")
    files = {str(p.relative_to(out)): stat.S_IMODE(p.stat().st_mode) for p in out.rglob("*") if p.is_file()}
    assert {
        "modules.json",
        "config_sentence_transformers.json",
        "1_Pooling/config.json",
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "onnx/model.onnx",
        "export.json",
    } <= files.keys()
    assert set(files.values()) == {0o644}, files  # the umask's, the 0600 safetensors writes included
    _matches_sentence_transformers(out, model / ST_DIR)
    # sentence-transformers' ONNX backend takes onnx/model.onnx as it is, and exports nothing itself
    assert backend_should_export(out, True, {}, "model.onnx", "*.onnx", "ONNX") == (
        False,
        {"subfolder": "onnx", "file_name": "model.onnx"},
    )
    described = json.loads((out / "export.json").read_text())
    assert described["onnx"] == "onnx/model.onnx" and described["output"] == "last_hidden_state"
    assert [p.name for p in tmp_path.iterdir()] == ["onnx"]  # no temporary directory left beside it


def test_a_kept_head_cls_pooling_and_normalize_are_modules_of_the_directory(tmp_path):
    """Supervised SimCSE's export ([CLS] and the kept MLP head), and a Normalize module after them."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Normalize

    from pipeline.model.onnx_export import export_onnx
    from pipeline.model.transformer import build_model, export, projection_head
    from tests.helpers import tiny_model_config, tiny_tokenizer

    tokenizer = tiny_tokenizer()
    encoder = build_model(
        tiny_model_config(),
        tokenizer,
    )
    export(encoder, tokenizer, str(tmp_path / "sup"), pooling="cls", head=projection_head("tanh", 32, 16))
    st = SentenceTransformer(str(tmp_path / "sup" / ST_DIR), device="cpu")
    st.append(Normalize())
    st.save(str(tmp_path / "normalized"))
    for source in (tmp_path / "sup", tmp_path / "normalized"):
        out = tmp_path / f"{source.name}-onnx"
        export_onnx(str(source), str(out))
        _matches_sentence_transformers(out, source / ST_DIR if (source / ST_DIR).is_dir() else source)
        assert _onnx_embeddings(out, SENTENCES).shape == (len(SENTENCES), 16)
    norms = np.linalg.norm(_onnx_embeddings(tmp_path / "normalized-onnx", SENTENCES), axis=1)
    assert np.allclose(norms, 1, atol=1e-5)


def test_the_exported_tokenizers_are_a_class_transformers_4_and_5_load(model, tmp_path):
    from transformers import AutoTokenizer

    from pipeline.model.onnx_export import export_onnx

    export_onnx(str(model), str(tmp_path / "onnx"))
    # transformers 5 writes "TokenizersBackend" for a tokenizer.json-only tokenizer; transformers 4 has no such class
    for folder in (tmp_path / "onnx", model / HF_DIR, model / ST_DIR):
        config = json.loads((folder / "tokenizer_config.json").read_text())
        assert config["tokenizer_class"] == "PreTrainedTokenizerFast", folder
        loaded = AutoTokenizer.from_pretrained(str(folder))
        reference = AutoTokenizer.from_pretrained(str(model / HF_DIR))
        assert loaded(SENTENCES)["input_ids"] == reference(SENTENCES)["input_ids"]


def test_a_graph_off_by_more_than_the_tolerance_writes_nothing_and_exits_1(model, tmp_path, monkeypatch, capsys):
    from flows.cli import main
    from pipeline.model import onnx_export

    monkeypatch.setattr(onnx_export, "TOLERANCE", -1.0)  # any graph is now "off": the failure path itself
    assert main(["export", str(model), "--onnx", str(tmp_path / "onnx")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"cpipe: error: {tmp_path / 'onnx'}: the ONNX graph's embeddings")
    assert list(tmp_path.iterdir()) == []


def test_a_usage_mistake_is_one_line_before_any_work(model, tmp_path, capsys):
    from flows.cli import main

    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file").write_text("kept")
    assert main(["export", str(model), "--onnx", str(tmp_path / "taken")]) == 2
    assert (
        capsys.readouterr().err == f"cpipe: error: {tmp_path / 'taken'}: exists and is not an empty directory; "
        "name a new one\n"
    )
    assert (tmp_path / "taken" / "file").read_text() == "kept"
    assert main(["export", str(tmp_path / "nothing"), "--onnx", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.startswith(f"cpipe: error: {tmp_path / 'nothing'}: no such directory")
    # a module whose output the check cannot pool
    shutil.copytree(model / ST_DIR, tmp_path / "layers")
    listed = json.loads((tmp_path / "layers" / "modules.json").read_text())
    listed.insert(1, {"idx": 1, "name": "1", "path": "", "type": "sentence_transformers.models.WeightedLayerPooling"})
    (tmp_path / "layers" / "modules.json").write_text(json.dumps(listed))
    assert main(["export", str(tmp_path / "layers"), "--onnx", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err == (
        f"cpipe: error: {tmp_path / 'layers'}/modules.json: module WeightedLayerPooling cannot be checked on the "
        "ONNX graph's output (it takes Transformer, Pooling, Dense, Normalize)\n"
    )
    assert not (tmp_path / "o").exists()


def test_an_output_path_that_is_a_symbolic_link_is_one_line_before_any_work(model, tmp_path, capsys):
    """A link, to nothing, to a file or to an empty directory, is no new directory: the export, renamed into place
    after the work, failed on a dangling one with NotADirectoryError."""
    from flows.cli import main

    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("kept")
    for target in ("nowhere", "file", "empty"):
        link = tmp_path / f"to-{target}"
        link.symlink_to(tmp_path / target)
        for out in (str(link), f"{link}/"):
            assert main(["export", str(model), "--onnx", out]) == 2
            assert capsys.readouterr().err == (
                f"cpipe: error: {out}: a symbolic link (to {tmp_path / target}); name a new directory\n"
            )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "file", "to-empty", "to-file", "to-nowhere"]
    assert (tmp_path / "file").read_text() == "kept" and not list((tmp_path / "empty").iterdir())
