"""Everything a run needs is checked before Prefect or Ray start: one line naming the path, line or key."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.pipeline_flows import resolve
from pipeline.config import DEFAULT_PROFILE, Config, load_config
from pipeline.errors import ConfigError, InputError
from storage import DatasetError


def test_no_config_means_the_default_profile():
    assert load_config(None) == load_config(DEFAULT_PROFILE)
    cfg = load_config(None, ["runs.declutr.max_steps=20"])
    assert cfg.run_configs()["declutr"].max_steps == 20 and set(cfg.runs) == {"declutr"}  # the profile's run
    assert cfg.seeds == [0, 1, 2]  # and the profile's other settings


def test_a_yaml_syntax_error_names_line_and_column(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  lr: 0.1\n  batch_size: [16\n")
    with pytest.raises(ConfigError, match=rf"^{bad}:4:1: not valid YAML: "):
        load_config(bad)


def test_artifacts_under_a_regular_file_fail_before_any_work(tmp_path, tiny_corpus):
    (tmp_path / "file").write_text("")
    with pytest.raises(DatasetError, match=rf"artifacts {tmp_path}/file/sub: cannot write there \(NotADirectoryError"):
        resolve(corpus=str(tiny_corpus), artifacts=str(tmp_path / "file" / "sub"), until="corpus")


def test_a_malformed_transfer_file_fails_before_any_work(tmp_path, tiny_corpus, tiny_sts):
    eval_dir = tmp_path / "eval"
    (eval_dir / "MRPC").mkdir(parents=True)
    for s in ("STS12-en-test", "STSBenchmark"):
        (eval_dir / s).symlink_to(Path(tiny_sts) / s)
    header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    (eval_dir / "MRPC" / "msr_paraphrase_train.txt").write_text(header + "1\t1\t2\tA cat.\tA cat sat.\n")
    (eval_dir / "MRPC" / "msr_paraphrase_test.txt").write_text(header + "1\t3\n")
    with pytest.raises(InputError, match=r"msr_paraphrase_test.txt:2: expected 5 tab-separated columns"):
        resolve(corpus=str(tiny_corpus), eval_data=str(eval_dir), artifacts=str(tmp_path / "a"))


def test_a_corpus_whose_every_file_is_not_utf8_says_so(tmp_path):
    from pipeline.corpus import stage as corpus
    from pipeline.corpus.config import CorpusConfig
    from pipeline.stage import run_stage

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_bytes(b"\xff\xfe caf\xe9")
    (docs / "b.txt").write_bytes(b"plain \xff")
    config = corpus.config(Config(corpus=CorpusConfig(sources=[str(docs)])))
    with pytest.raises(InputError, match=r": 2 skipped \(2 not_utf8; first: .*a\.txt: not UTF-8"):
        run_stage(corpus.STAGE, config, {}, str(tmp_path / "artifacts"))
