"""`cpipe export MODEL --onnx OUT`: one ONNX graph from token ids to the sentence embedding, whose onnxruntime
embeddings are sentence-transformers' own (computed here independently), with a tokenizer transformers loads."""

from __future__ import annotations

import json
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


def _onnx_embeddings(out: Path, sentences: list[str]) -> np.ndarray:
    import onnxruntime
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(out))
    session = onnxruntime.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    batch = tokenizer(sentences, padding=True, truncation=True, return_tensors="np")
    feeds = {k: batch[k].astype(np.int64) for k in ("input_ids", "attention_mask")}
    return session.run(["sentence_embedding"], feeds)[0]


def _matches_sentence_transformers(out: Path, st_dir: Path) -> None:
    from sentence_transformers import SentenceTransformer

    want = SentenceTransformer(str(st_dir), device="cpu").encode(SENTENCES, convert_to_numpy=True)
    # the whole batch, and batches of other sizes and widths: both axes are dynamic
    for got in (
        _onnx_embeddings(out, SENTENCES),
        np.concatenate([_onnx_embeddings(out, SENTENCES[:1]), _onnx_embeddings(out, SENTENCES[1:])]),
    ):
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= 1e-4


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return tiny_model(tmp_path_factory.mktemp("export") / "model")


@pytest.mark.slow  # a cpipe process
def test_cli_exports_a_graph_that_embeds_as_sentence_transformers_does(model, tmp_path):
    out = tmp_path / "onnx"
    proc = subprocess.run(
        [sys.executable, "-m", "flows.cpipe", "export", str(model), "--onnx", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith(f"cpipe: exported {model} to {out}")
    _matches_sentence_transformers(out, model / ST_DIR)
    described = json.loads((out / "export.json").read_text())
    assert described["pooling"] == "mean" and described["output"] == "sentence_embedding"
    assert [p.name for p in tmp_path.iterdir()] == ["onnx"]  # no temporary directory left beside it


def test_a_kept_head_cls_pooling_and_normalize_are_in_the_graph(tmp_path):
    """Supervised SimCSE's export ([CLS] and the kept MLP head), and a Normalize module after them."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Normalize

    from pipeline.model.onnx_export import export_onnx
    from pipeline.model.transformer import build_model, export, projection_head
    from tests.helpers import MAX_LENGTH, tiny_tokenizer

    tokenizer = tiny_tokenizer()
    encoder = build_model(
        {
            "base": None,
            "hidden_size": 32,
            "num_layers": 1,
            "num_heads": 2,
            "intermediate_size": 64,
            "dropout": 0.0,
            "max_position_embeddings": MAX_LENGTH + 2,
            "seed": 0,
        },
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
