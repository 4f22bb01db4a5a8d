"""The stage contract (pipeline.stage): every stage module builds its own config and inputs, and declares the
settings that do not change its output, which the fingerprint leaves out."""

from __future__ import annotations

import inspect
import sys
import types

import numpy as np
import pyarrow as pa
import pytest
from pydantic import Field

import flows.cli
import flows.pipeline_flows as flow
from pipeline import config, registry
from pipeline.config import Config, load_config
from pipeline.config_base import Strict
from pipeline.errors import ConfigError
from pipeline.init import stage as init
from pipeline.stage import AT_RUNTIME, Stage, run_stage, runtime, stage_config
from pipeline.train import stage as train
from storage import read_manifest, read_table
from tests.conftest import make_document, write_sts


def test_every_registered_stage_declares_the_contract():
    assert len(set(registry.NAMES)) == len(registry.NAMES)
    flows = [stage.flow for stage in registry.stages()]
    assert flows == sorted(flows, key=("data", "train", "evaluate").index), "the registry orders stages by flow"
    for name in registry.NAMES:
        stage = registry.stage(name)
        assert isinstance(stage, Stage) and stage.name == name and isinstance(stage.version, str), name
        assert stage.section == registry.STAGES[name].section, f"{name}: its registry line names another section"
        assert stage.section in Config.model_fields, f"{name}: no config section {stage.section!r}"
        assert list(inspect.signature(stage.config).parameters)[0] == "cfg", name
        assert list(inspect.signature(stage.inputs).parameters)[:2] == ["cfg", "done"], name
        given = "settings" if stage.settings is not None else "config"
        assert list(inspect.signature(stage.run).parameters) == [given, "inputs", "out"], name
        if stage.instances is not None:
            assert list(inspect.signature(stage.instances).parameters) == ["cfg", "done"], name


def test_every_stage_is_a_valid_until():
    parser = flows.cli.build_parser()
    for name in registry.NAMES:
        assert parser.parse_args(["run", "--until", name]).until == name
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "--until", "no-such-stage"])


class _WordsConfig(Strict):
    """The toy stage's own config section, `words:`."""

    min_words: int = Field(1, ge=1)


def _words(settings: _WordsConfig, inputs: dict[str, str], out) -> None:
    for row in read_table(inputs["documents"], columns=["doc_id", "text"]).to_pylist():
        if (n := len(row["text"].split())) >= settings.min_words:
            out.write([{"doc_id": row["doc_id"], "words": n}])


def test_a_stage_is_one_module_and_one_registry_line(tmp_path, monkeypatch):
    """A toy stage after the filter, with a config section of its own, declared in a module of its own and named
    in the registry: a profile and --set write its section, a bad key of it is named, and the data flow's build()
    builds it from the filter's documents, like any other stage."""
    toy = types.ModuleType("toy_stage")
    toy.WordsConfig = _WordsConfig
    toy.STAGE = Stage(
        name="words",
        version="1",
        flow="data",
        section="words",
        settings=_WordsConfig,
        run=_words,
        config=lambda cfg, key=None: stage_config(cfg.words),
        inputs=lambda cfg, done, key=None: {"documents": done["filter"]},
        schema=pa.schema([("doc_id", pa.string()), ("words", pa.int64())]),
    )
    monkeypatch.setitem(sys.modules, "toy_stage", toy)
    lines = list(registry.STAGES.items())
    at = registry.NAMES.index("filter") + 1
    lines.insert(at, ("words", registry.Line("toy_stage", "words", "toy_stage.WordsConfig")))
    monkeypatch.setattr(registry, "STAGES", dict(lines))
    monkeypatch.setattr(registry, "NAMES", tuple(dict(lines)))
    monkeypatch.setattr(config, "Config", config.composed())

    art = str(tmp_path / "artifacts")
    profile = tmp_path / "words.yaml"
    profile.write_text("tokenizer: {vocab_size: 300}\nfilter: {min_tokens: 10}\nwords: {min_words: 2}\n")
    (tmp_path / "docs").mkdir()
    rng = np.random.default_rng(0)
    for i, n in enumerate((200, 300, 500, 600)):
        (tmp_path / "docs" / f"d{i}.txt").write_text(make_document(rng, n))
    given = {"artifacts": art, "corpus.sources": [str(tmp_path / "docs")]}
    assert load_config(profile, **given).words.min_words == 2
    cfg = load_config(profile, ["words.min_words=400"], **given)
    with pytest.raises(ConfigError, match=r"--set words\.x=1: unknown key 'words\.x'$"):
        load_config(profile, ["words.x=1"], **given)
    done: dict[str, str] = {}
    direct = lambda stage, config, inputs, label: run_stage(stage, config, inputs, art)  # noqa: E731
    assert flow.build(cfg, registry.stages(last="words"), done, until="words", run_one=direct)
    assert list(done) == ["corpus", "tokenizer", "filter", "words"]
    assert read_manifest(done["words"])["config"] == {"min_words": 400}
    words = read_table(done["words"]).column("words").to_pylist()
    documents = read_table(done["filter"], columns=["text"]).column("text").to_pylist()
    assert words == [n for n in (len(t.split()) for t in documents) if n >= 400] and len(words) == 2


class _Counting(Strict):
    upto: int
    step: int = 1
    workers: int = Field(1, json_schema_extra=AT_RUNTIME)


def _count(settings: _Counting, inputs: dict[str, str], out) -> None:
    out.write([{"n": n} for n in range(0, settings.upto, settings.step)])
    out.extra["workers"] = settings.workers


def test_run_receives_its_typed_settings_and_the_manifest_the_dict(tmp_path):
    """`run` reads attributes of its stage's typed model; the fingerprint, the manifest (and Prefect, Ray) keep the
    dict, runtime settings under "runtime", outside the fingerprint."""
    stage = Stage(
        name="count",
        version="1",
        flow="data",
        section="filter",
        config=lambda cfg, key=None: {},
        run=_count,
        settings=_Counting,
        schema=pa.schema([("n", pa.int64())]),
    )
    assert stage.runtime == {"workers": 1}
    config = stage_config(_Counting(upto=7, step=3, workers=4))
    assert config == {"upto": 7, "step": 3, "runtime": {"workers": 4}}
    assert stage.fingerprint(config, {}) == stage.fingerprint(stage_config(_Counting(upto=7, step=3)), {})
    path = run_stage(stage, config, {}, str(tmp_path))
    assert read_table(path).column("n").to_pylist() == [0, 3, 6]
    assert read_manifest(path)["config"] == config and read_manifest(path)["workers"] == 4
    assert stage.settings_of({"upto": 2}) == _Counting(upto=2)  # a hand-written config: the defaults
    with pytest.raises(Exception, match="workrs"):
        stage.settings_of({"upto": 2, "runtime": {"workrs": 2}})


def _train_fingerprint(*overrides: str, eval_data: str | None = None) -> str:
    cfg = Config(train=dict(o.split("=") for o in overrides), evaluate={"data": eval_data})
    return train.STAGE.fingerprint(train.config(cfg, "declutr"), {"pairs": "a/augment/1", "init": "a/init/2"})


def test_logging_and_checkpointing_leave_the_train_fingerprint_but_the_learning_rate_does_not():
    base = _train_fingerprint()
    assert _train_fingerprint("log_every=5") == base
    assert _train_fingerprint("checkpoint_every=7") == base
    assert _train_fingerprint("max_failures=0", "torch_threads=1", "cpus_per_worker=2") == base
    assert _train_fingerprint("lr=0.001") != base
    assert _train_fingerprint("num_workers=2") != base  # the workers split each batch


def test_checkpoint_every_leaves_the_fingerprint_of_a_selected_run_too(tiny_sts, tmp_path):
    """Scoring keeps its own clock (eval_every) and the best step's weights, so checkpoints change no export."""
    # tiny_sts's STS-B dev is a copy of its test split: a dev set of other pairs
    dev = f"dev_set={write_sts(tmp_path, seed=2) / 'STSBenchmark' / 'sts-dev.csv'}"
    selected = _train_fingerprint("eval_every=5", "checkpoint_every=7", dev, eval_data=str(tiny_sts))
    assert selected == _train_fingerprint("eval_every=5", dev, eval_data=str(tiny_sts))
    assert selected != _train_fingerprint("eval_every=10", dev, eval_data=str(tiny_sts))


def test_runtime_reads_defaults_and_refuses_unknown_keys():
    config = train.config(Config(train={"log_every": 3}), "declutr")
    assert runtime(config, train.RUNTIME)["log_every"] == 3
    assert runtime({}, train.RUNTIME) == train.RUNTIME
    try:
        runtime({"runtime": {"log_evry": 3}}, train.RUNTIME)
    except Exception as e:
        assert "log_evry" in str(e)
    else:
        raise AssertionError("an unknown runtime key was accepted")


def test_a_base_models_init_fingerprint_leaves_the_from_scratch_sizes_out():
    sized = init.config(Config(model={"base": "/models/m", "hidden_size": 64, "num_heads": 2}))
    assert sized == init.config(Config(model={"base": "/models/m"})) == {"base": "/models/m", "seed": 0}
    assert init.config(Config(model={"hidden_size": 64, "num_heads": 2}))["hidden_size"] == 64  # from scratch
