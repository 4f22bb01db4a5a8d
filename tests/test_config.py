import typing
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import yaml
from pydantic import BaseModel

from pipeline.backtranslate.stage import model_names
from pipeline.config import DEFAULT_PROFILE, Config, load_config
from pipeline.errors import ConfigError
from pipeline.evaluate import clustering
from pipeline.objectives.pairs import epoch_seed
from pipeline.repeats import SEED_LIMIT
from tests.conftest import ROOT


def test_default_profile_trains_declutr_over_three_seeds():
    cfg = load_config(ROOT / "configs/default.yaml")
    runs = cfg.run_configs()
    assert set(runs) == {"declutr"} and cfg.seeds == [0, 1, 2]
    assert runs["declutr"].contrastive and runs["declutr"].mlm
    assert cfg.model.base is None and cfg.filter.min_tokens == 2048


def test_the_ablation_the_default_profile_names_is_the_paper_table_4():
    line = next(text for text in DEFAULT_PROFILE.read_text().splitlines() if "make run SET=" in text)
    runs = load_config(None, line.split('SET="', 1)[1].rstrip('"').split()).run_configs()
    assert set(runs) == {"declutr", "contrastive-only", "mlm-only"}
    assert runs["declutr"].contrastive and runs["declutr"].mlm
    assert not runs["contrastive-only"].mlm and runs["contrastive-only"].contrastive
    assert not runs["mlm-only"].contrastive and runs["mlm-only"].mlm


def test_cert_profile_back_translates_through_german_with_the_wmt19_models():
    cfg = load_config(ROOT / "configs/cert.yaml")
    assert {r.objective for r in cfg.run_configs().values()} == {"declutr", "cert"}
    assert model_names(cfg.backtranslate, "de") == ("facebook/wmt19-en-de", "facebook/wmt19-de-en")


def test_declutr_small_profile_follows_the_paper():
    cfg = load_config(ROOT / "configs/declutr-small.yaml")
    assert cfg.model.base == "distilroberta-base"
    assert (cfg.augment.min_length, cfg.augment.max_length) == (32, 512)
    assert cfg.train.lr == 5e-5 and cfg.train.temperature == 0.05 and cfg.train.weight_decay == 0.1


def test_declutr_base_extends_declutr_small_with_roberta_base():
    base, small = load_config(ROOT / "configs/declutr-base.yaml"), load_config(ROOT / "configs/declutr-small.yaml")
    assert base.model.base == "roberta-base"
    assert base.model_copy(update={"model": small.model}).model_dump() == small.model_dump()


def test_a_profile_extends_another_section_by_section(tmp_path):
    (tmp_path / "parent.yaml").write_text(
        "seeds: [0, 1]\ntrain: {lr: 0.01, batch_size: 8}\ncorpus: {sources: [a.txt, b.txt]}\n"
    )
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub/child.yaml").write_text("extends: ../parent.yaml\ntrain: {lr: 0.02}\ncorpus: {sources: [c.txt]}\n")
    cfg = load_config(tmp_path / "sub/child.yaml", ["train.batch_size=4"])
    assert cfg.seeds == [0, 1]  # kept from the parent
    assert (cfg.train.lr, cfg.train.batch_size) == (0.02, 4)  # a section merges key by key; --set last
    assert [Path(s).name for s in cfg.corpus.sources] == ["c.txt"]  # a list replaces the parent's


@pytest.mark.parametrize(
    "text, message",
    [
        ("extends: self.yaml\n", "self.yaml: extends self.yaml, which extends it in turn"),
        ("extends: gone.yaml\n", "config file not found: .*gone.yaml \\(extended by .*self.yaml\\)"),
        ("extends: [a.yaml]\n", "self.yaml: extends: expected the path of another profile"),
    ],
)
def test_a_bad_extends_is_one_line_naming_the_profile(tmp_path, text, message):
    (tmp_path / "self.yaml").write_text(text)
    with pytest.raises(ConfigError, match=message) as e:
        load_config(tmp_path / "self.yaml")
    assert "\n" not in str(e.value)


def test_set_overrides_nested_values_and_parses_yaml_scalars():
    cfg = load_config(
        ROOT / "configs/default.yaml", ["filter.min_tokens=1024", "filter.dedup=false", "runs.declutr.max_steps=7"]
    )
    assert cfg.filter.min_tokens == 1024 and cfg.filter.dedup is False
    assert cfg.run_configs()["declutr"].max_steps == 7


@pytest.mark.parametrize(
    "override, message",
    [
        ("filter.min_tokenz=3", "unknown key 'filter.min_tokenz'"),
        ("bogus=1", "unknown key 'bogus'"),
        ("filter.min_tokens=many", "filter.min_tokens"),
        ("train.temperature=-1", "train.temperature"),
        ("runs.declutr.lr_typo=1", "unknown key 'runs.declutr.lr_typo'"),
        ("runs.declutr.mlm=false", None),
    ],
)
def test_bad_keys_and_values_name_the_key(override, message):
    overrides = [override] + (["runs.declutr.contrastive=false"] if message is None else [])
    with pytest.raises(ConfigError) as e:
        load_config(ROOT / "configs/default.yaml", overrides)
    assert (message or "runs.declutr") in str(e.value)


def test_batch_must_hold_whole_documents():
    with pytest.raises(ConfigError, match="multiple of augment.num_anchors"):
        load_config(None, ["train.batch_size=5"])


def test_an_error_names_where_its_value_came_from_the_profile_a_set_or_an_option(tmp_path):
    """A bad value given by --set was said to be the profile's: 'config error: configs/default.yaml: tracking...'."""
    profile = tmp_path / "p.yaml"
    profile.write_text("filter: {min_tokens: many}\n")

    def error(path, overrides, **replace) -> str:
        with pytest.raises(ConfigError) as e:
            load_config(path, overrides, **replace)
        return str(e.value)

    mixed = error(profile, ["train.lr=abc"])
    assert mixed.startswith(f"config error: {profile}: filter.min_tokens: Input should be a valid integer, ")
    assert "; --set train.lr=abc: train.lr: Input should be a valid number, " in mixed
    # the last --set that gave the key (here, its section) a value; a run's settings are checked with the config whole
    assert error(None, ["filter.min_tokens=3", "filter={min_tokens: x}"]).startswith(
        "config error: --set filter={min_tokens: x}: filter.min_tokens: "
    )
    assert error(None, ["runs.declutr.lr=x"]).startswith("config error: --set runs.declutr.lr=x: runs.declutr.lr: ")
    assert error(None, [], **{"corpus.sources": [5]}).startswith("config error: --corpus: corpus.sources.0: ")
    credentials = error(None, ["tracking.mlflow.uri=https://user:secret@mlflow.example"])
    assert credentials.startswith("config error: --set tracking.mlflow.uri=https://***@mlflow.example: ")
    assert "secret" not in credentials


def test_missing_file_and_malformed_set(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="key=value"):
        load_config(None, ["filter.min_tokens"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("filter: [1, 2")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_the_sections_defaults_are_declutr_smalls_recipe():
    cfg = Config()
    assert (
        cfg.augment.epochs,
        cfg.augment.num_anchors,
        cfg.augment.num_positives,
        cfg.augment.min_length,
        cfg.augment.max_length,
    ) == (1, 2, 2, 32, 512)
    assert (cfg.train.lr, cfg.train.weight_decay, cfg.train.max_length, cfg.train.temperature) == (5e-5, 0.1, 512, 0.05)
    assert cfg.filter.min_tokens == 2048 and cfg.model.base is None
    # From scratch, DistilRoBERTa-base's shape (DeCLUTR-small's encoder).
    m = cfg.model
    assert (m.hidden_size, m.num_layers, m.num_heads, m.intermediate_size, m.max_position_embeddings) == (
        768,
        6,
        12,
        3072,
        514,
    )


def test_the_default_profile_holds_only_what_the_demo_changes():
    written = yaml.safe_load(DEFAULT_PROFILE.read_text())
    defaults = Config().model_dump()
    settings = {
        (section, key): value
        for section, values in written.items()
        if isinstance(values, dict) and section != "runs"
        for key, value in values.items()
    }
    settings.update(
        {
            (section,): value
            for section, value in written.items()
            if (section,) not in settings and not (isinstance(value, dict) and section != "runs")
        }
    )
    unchanged = [
        ".".join(k) for k, v in settings.items() if (defaults[k[0]] if len(k) == 1 else defaults[k[0]][k[1]]) == v
    ]
    assert not unchanged, f"configs/default.yaml repeats these defaults: {unchanged}"


def test_default_paths_are_made_absolute_as_written_ones_are(tmp_path, monkeypatch):
    """Ray workers and served deployments run in other directories: a default path must not stay relative."""
    monkeypatch.chdir(tmp_path)
    profile = tmp_path / "p.yaml"
    profile.write_text("runs: {declutr: {}}\n")
    cfg = load_config(profile)
    assert cfg.artifacts == str(tmp_path / "artifacts") and cfg.corpus.download_dir == str(tmp_path / "downloads")


def _keys(model: type[BaseModel], keep, prefix: str = "") -> list[str]:
    """The dotted keys of `model`'s settings, its sections' included, whose (name, annotation) `keep` keeps."""
    out = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out += _keys(ann, keep, f"{prefix}{name}.")
        elif keep(name, ann):
            out.append(prefix + name)
    return out


FLOAT_KEYS = _keys(Config, lambda name, ann: ann is float or float in typing.get_args(ann))
SEED_KEYS = _keys(Config, lambda name, ann: name == "seed" or name.endswith("_seed"))


def test_the_walks_find_the_settings():
    assert {"train.lr", "train.temperature", "backtranslate.temperature", "evaluate.baselines.infersent.lr"} <= set(
        FLOAT_KEYS
    )
    assert {"train.seed", "model.seed", "augment.seed", "evaluate.seed", "evaluate.baselines.infersent.seed"} <= set(
        SEED_KEYS
    )


@pytest.mark.parametrize("key", FLOAT_KEYS)
def test_no_float_setting_takes_inf_or_nan(key):
    """train.lr=.inf trained on NaN losses from step 2 and published them; every float setting is refused there."""
    for value in (".inf", "-.inf", ".nan"):
        with pytest.raises(ConfigError) as e:
            load_config(None, [f"{key}={value}"])
        assert f": {key}: Input should be a finite number" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("key", [*SEED_KEYS, "runs.declutr.seed", "evaluate.baselines.postprocess"])
def test_every_seed_is_one_the_rngs_take_with_the_offsets_added(key):
    """99999999999999999999999 passed the config check and died at augment in an OverflowError traceback."""
    at = "evaluate.baselines.postprocess[0].seed" if key.endswith("postprocess") else key

    def overrides(seed: int) -> list[str]:
        if key.endswith("postprocess"):
            return [f"evaluate.baselines.postprocess=[{{model: untrained, kind: whitening, seed: {seed}}}]"]
        return [f"{key}={seed}"]

    load_config(None, overrides(SEED_LIMIT - 1))
    for seed in (SEED_LIMIT, -1, 99999999999999999999999):
        with pytest.raises(ConfigError) as e:
            load_config(None, overrides(seed))
        assert f": {at.replace('[0]', '.0')}: {seed} is no seed: " in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("where", ["seeds", "runs.declutr.seeds"])
def test_a_seed_list_is_bounded_as_every_seed(where):
    load_config(None, [f"{where}=[0, {SEED_LIMIT - 1}]"])
    with pytest.raises(ConfigError, match=r"\.seeds: 99999999999999999999999 is no seed: ") as e:
        load_config(None, [f"{where}=[0, 99999999999999999999999]"])
    assert "\n" not in str(e.value)


def test_the_largest_seeds_sums_fit_the_rngs():
    """A repeat's seed is added to model.seed and augment.seed (sums of two seeds, below 2**32), the k-means runs
    to evaluate.seed (numpy's legacy RandomState, as scikit-learn's random_state); the pairs' epoch seed multiplies
    augment's sum and is kept in an int64 column: the largest of each still fits where it goes."""
    top = SEED_LIMIT - 1
    np.random.RandomState(top + clustering.RUNS - 1)
    np.random.RandomState(top + top)
    pa.array([epoch_seed(top + top, 10**6)], pa.int64())
