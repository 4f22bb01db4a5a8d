"""Nothing loaded from the artifacts store or a model directory runs code: a training checkpoint is read by torch's
weights-only unpickler, and a model whose pickled weights name anything but tensors, or whose config asks for its
own code, is refused in one line before any work."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pyarrow.fs
import pytest
import torch
from safetensors.torch import load_file, save_file

from pipeline import locate
from pipeline.errors import InputError
from pipeline.model.exported import Encoder
from pipeline.model.transformer import export
from pipeline.train import loop
from pipeline.train.batching import special_ids
from pipeline.train.config import TrainConfig
from tests.conftest import ROOT
from tests.helpers import tiny_model
from tests.test_cli_errors import PROBE
from tests.test_train_step import pairs, tiny_encoder


class Payload:
    """What a planted pickle carries: unpickled, it creates `marker` (as os.system could run anything)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def one_line(call, *args, match: str) -> str:
    with pytest.raises(InputError, match=match) as e:
        call(*args)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_a_planted_checkpoint_is_refused_and_its_payload_never_runs(tmp_path):
    marker = tmp_path / "ran"
    torch.save({"step": 2, "metrics": [], "model": {"w": torch.ones(2)}, "x": Payload(marker)}, tmp_path / loop.STATE)
    path = f"{tmp_path}/{loop.STATE}"
    message = one_line(loop.load_state, str(tmp_path), match=f"^{path}: not a checkpoint that can be resumed safely")
    assert "io.open" in message  # what torch refused, not its paragraph of advice
    one_line(loop.load_state, str(tmp_path), pyarrow.fs.LocalFileSystem(), match=f"^{path}: ")  # a Ray checkpoint
    assert not marker.exists()
    torch.load(path, weights_only=False)  # the payload is live: the loader this replaced ran it
    assert marker.exists()


@pytest.mark.parametrize("content", [b"not a checkpoint", b"PK\x03\x04 half a zip", b""])
def test_an_unreadable_checkpoint_is_one_line_naming_it(tmp_path, content):
    (tmp_path / loop.STATE).write_bytes(content)
    one_line(loop.load_state, str(tmp_path), match=f"^{tmp_path}/{loop.STATE}: not a checkpoint")


def test_no_checkpoint_file_is_one_line_naming_it(tmp_path):
    one_line(loop.load_state, str(tmp_path), match=f"^{tmp_path}/{loop.STATE}: ")


def same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def test_every_part_of_a_real_checkpoint_round_trips_through_the_safe_loader(tokenizer, tmp_path):
    """MoCo's key encoder and queue, fp16's loss scale, the best weights, scores as numpy gives them (scipy's
    Spearman is a float64, which the weights-only unpickler refuses): what the unrestricted loader read back,
    the safe one reads too."""
    tiny_encoder(tokenizer).mlm_model.save_pretrained(tmp_path / "init")
    cfg = TrainConfig(
        batch_size=4,
        max_length=64,
        checkpoint_every=1,
        eval_every=1,
        torch_threads=1,
        select_by="heldout-loss",
        momentum=0.99,
        memory_bank=8,
        precision="fp16",
    )
    config = loop.WorkerConfig(
        train=cfg,
        init=str(tmp_path / "init"),
        total_steps=2,
        special=special_ids(tokenizer),
        dev={"by": "heldout-loss"},
    )
    table = pairs(tokenizer, n=8)
    reports = []

    def report(metrics, directory):
        reports.append((loop.load_state(directory), torch.load(f"{directory}/{loop.STATE}", weights_only=False)))

    scores = iter([np.float64(0.7), np.float64(0.5)])
    loop.run_loop(
        config,
        rank=0,
        world=1,
        saved=None,
        shard=lambda n: (table.slice(i, n) for i in range(0, 8, n)),
        prepare_model=lambda model, ddp: model,
        report=report,
        scorer=lambda model: (
            lambda: {
                "heldout_loss": next(scores),
                "heldout_alignment": np.float64(0),
                "heldout_uniformity": np.float64(0),
            }
        ),
    )
    assert [safe["step"] for safe, _ in reports] == [1, 2]
    safe, unsafe = reports[-1]
    assert same(safe, unsafe)
    assert safe["best"]["step"] == 2 and safe["best"]["score"] == 0.5 and type(safe["best"]["score"]) is float
    assert safe["bank"] is not None and safe["key_encoder"] is not None and safe["scaler"]
    resumed = []  # and the run resumes from what the safe loader read
    loop.run_loop(
        config,
        rank=0,
        world=1,
        saved=reports[0][0],
        shard=lambda n: (table.slice(i, n) for i in range(0, 8, n)),
        prepare_model=lambda model, ddp: model,
        report=lambda metrics, d: resumed.append(loop.load_state(d)),
        scorer=lambda model: lambda: {"heldout_loss": 0.5, "heldout_alignment": 0.0, "heldout_uniformity": 0.0},
    )
    assert [r["step"] for r in resumed] == [2]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def pickled(model_dir, tmp_path, extra: dict | None = None, **save) -> str:
    """A copy of the tiny model whose weights are a pytorch_model.bin (with `extra` entries) in place of
    model.safetensors."""
    out = tmp_path / "pickled"
    subprocess.run(["cp", "-r", str(model_dir), str(out)], check=True)
    hf = out / locate.HF_DIR
    state = load_file(hf / "model.safetensors")
    (hf / "model.safetensors").unlink()
    torch.save({**state, **(extra or {})}, hf / "pytorch_model.bin", **save)
    return str(out)


@pytest.mark.parametrize("save", [{}, {"_use_new_zipfile_serialization": False}, {"pickle_protocol": 4}])
def test_pickled_weights_naming_code_are_refused_before_any_load(model_dir, tmp_path, save):
    marker = tmp_path / "ran"
    path = pickled(model_dir, tmp_path, {"x": Payload(marker)}, **save)
    weights = f"{path}/{locate.HF_DIR}/pytorch_model.bin"
    assert locate.why_not_a_model(path) == (
        f"{weights}: refused, its pickle names io.open (weights may hold only tensors; save them as safetensors)"
    )
    one_line(locate.check_models, [path], match=f"^--model {weights}: refused")
    with pytest.raises(InputError, match="io.open"):
        Encoder(path)
    assert not marker.exists()


def test_a_payload_hidden_under_the_name_of_a_clean_pickle_in_the_zip_is_refused(model_dir, tmp_path):
    """A zip of two data.pkl entries, the payload's first: the check read the name's last entry (the clean one) and
    passed it, and torch reads the first."""
    marker = tmp_path / "ran"
    path = pickled(model_dir, tmp_path)
    weights = Path(path, locate.HF_DIR, "pytorch_model.bin")
    planted = tmp_path / "planted" / "pytorch_model.bin"  # the same name: the same prefix in the zip
    planted.parent.mkdir()
    torch.save({**load_file(model_dir / locate.HF_DIR / "model.safetensors"), "x": Payload(marker)}, planted)
    with zipfile.ZipFile(planted) as payload, zipfile.ZipFile(weights) as clean:
        entries = [(i, payload) for i in payload.infolist() if i.filename.endswith("data.pkl")]
        entries += [(i, clean) for i in clean.infolist()]
        with warnings.catch_warnings(), zipfile.ZipFile(tmp_path / "doubled.bin", "w") as doubled:
            warnings.simplefilter("ignore")  # zipfile's "Duplicate name", the point of the file
            for info, source in entries:
                doubled.writestr(info, source.read(info))
    os.replace(tmp_path / "doubled.bin", weights)
    with zipfile.ZipFile(weights) as doubled:
        pickles = [i for i in doubled.infolist() if i.filename.endswith("data.pkl")]
        assert len(pickles) == 2 and pickles[0].filename == pickles[1].filename
        assert doubled.read(pickles[0]) != doubled.read(pickles[1]) == doubled.read(pickles[0].filename)
    assert locate.why_not_a_model(path) == (
        f"{weights}: refused, its pickle names io.open (weights may hold only tensors; save them as safetensors)"
    )
    with pytest.raises(pickle.UnpicklingError, match="io.open"):  # torch reads the payload's entry
        torch.load(weights, weights_only=True)
    assert not marker.exists()


@pytest.mark.parametrize("save", [{}, {"_use_new_zipfile_serialization": False}])
def test_pickled_weights_of_tensors_only_still_load(model_dir, tmp_path, save):
    path = pickled(model_dir, tmp_path, **save)
    assert locate.why_not_a_model(path) is None
    sentences = ["a few words", "and a few more words"]
    np.testing.assert_allclose(Encoder(path).encode(sentences), Encoder(str(model_dir)).encode(sentences), rtol=1e-6)


def test_a_payload_in_a_shard_or_a_dense_module_is_refused(tokenizer, tmp_path):
    marker = tmp_path / "ran"
    out = tmp_path / "headed"
    model = tiny_encoder(tokenizer, projection="tanh")
    export(model.mlm_model, tokenizer, str(out), head=model.projection)
    dense = out / "sentence-transformers" / "2_Dense"
    weights = load_file(dense / "model.safetensors")
    (dense / "model.safetensors").unlink()
    torch.save({**weights, "x": Payload(marker)}, dense / "pytorch_model.bin")
    assert locate.why_not_a_model(str(out)).startswith(f"{dense}/pytorch_model.bin: refused, its pickle names io.open")
    hf = out / locate.HF_DIR
    state = load_file(hf / "model.safetensors")
    (hf / "model.safetensors").unlink()
    torch.save({k: v for k, v in state.items() if "layer" not in k}, hf / "pytorch_model-00001-of-00002.bin")
    torch.save(
        {**{k: v for k, v in state.items() if "layer" in k}, "x": Payload(marker)},
        hf / "pytorch_model-00002-of-00002.bin",
    )
    (hf / "pytorch_model.bin.index.json").write_text(
        json.dumps({"weight_map": {k: f"pytorch_model-0000{1 + ('layer' in k)}-of-00002.bin" for k in state}})
    )
    assert locate.why_not_a_model(str(out)).startswith(f"{hf}/pytorch_model-00002-of-00002.bin: refused")
    assert not marker.exists()


def test_the_allowed_names_are_torchs_own():
    """Every name torch's weights-only unpickler allows passes the check that runs before torch is imported;
    names that run or load code do not."""
    from torch._weights_only_unpickler import _get_allowed_globals

    assert [n for n in _get_allowed_globals() if not locate.SAFE_GLOBALS.fullmatch(n)] == []
    for name in (
        "posix.system",
        "builtins.eval",
        "builtins.getattr",
        "torch.load",
        "torch.serialization.load",
        "torch._utils._rebuild_xla_tensor",
        "torch.nn.modules.module.Module",
        "numpy.core.multiarray.scalar",
        "torch.Tensor.__reduce_ex__",
        "torch.jit.load",
    ):
        assert not locate.SAFE_GLOBALS.fullmatch(name), name


@pytest.mark.parametrize("file", ["config.json", "tokenizer_config.json"])
def test_a_model_asking_to_run_its_own_code_is_refused(model_dir, tmp_path, file):
    out = tmp_path / "custom"
    subprocess.run(["cp", "-r", str(model_dir), str(out)], check=True)
    config = out / locate.HF_DIR / file
    config.write_text(json.dumps({**json.loads(config.read_text()), "auto_map": {"AutoModel": "modeling.MyModel"}}))
    assert locate.why_not_a_model(str(out)).startswith(f"{config}: auto_map names the model's own code")
    one_line(locate.check_base, str(out), match=f"^model.base: {config}: auto_map .*trust_remote_code=False")


def no_weights(tmp_path) -> str:
    out = tmp_path / "empty"
    out.mkdir()
    (out / "config.json").write_text("{}")
    return str(out)


def payload(tmp_path) -> str:
    out = tmp_path / "model"
    out.mkdir()
    (out / "config.json").write_text(json.dumps({"model_type": "roberta"}))
    torch.save({"w": torch.ones(1), "x": Payload(tmp_path / "ran")}, out / "pytorch_model.bin")
    return str(out)


def remote_code(tmp_path) -> str:
    out = tmp_path / "model"
    out.mkdir()
    (out / "config.json").write_text(json.dumps({"model_type": "mine", "auto_map": {"AutoModel": "m.Mine"}}))
    save_file({"w": torch.ones(1)}, str(out / "model.safetensors"))
    return str(out)


@pytest.mark.slow  # a Python process
@pytest.mark.parametrize(
    "make, message",
    [
        (payload, "pytorch_model.bin: refused, its pickle names io.open"),
        (remote_code, "config.json: auto_map names the model's own code"),
        (no_weights, ": no weights file in"),
    ],
)
def test_cpipe_evaluate_refuses_a_model_in_one_line_before_any_heavy_import(tmp_path, tiny_sts, make, message):
    model = make(tmp_path)
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            PROBE,
            "evaluate",
            "--model",
            model,
            "--eval-data",
            str(tiny_sts),
            "--artifacts",
            str(tmp_path / "a"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(f"cpipe: error: --model {model}"), proc.stderr
    assert message in proc.stderr
    assert proc.stdout.strip() == "[]", f"imported before the error: {proc.stdout}"
    assert not os.path.exists(tmp_path / "ran")
