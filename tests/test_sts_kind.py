"""STS as a kind declaration (pipeline.evaluate.sts.KIND): its tasks group find_sts's subsets, its columns are typed
per protocol, and the leaderboard's intervals take how to recompute each STS column from that type, not from the
column's name. It stays out of the file kinds (kinds.KINDS, kinds.find_all), which pipeline.train reads."""

from __future__ import annotations

import pandas as pd

from pipeline.decontaminate.evalsets import eval_texts
from pipeline.evaluate import kinds, resampled, sts
from pipeline.leaderboard.intervals import Spec, spec, typed_from
from pipeline.readers.sts import find_sts
from tests.conftest import write_sts


def test_sts_is_a_declared_kind_apart_from_the_file_kinds(tmp_path):
    data = write_sts(tmp_path / "eval", n_pairs=6)
    assert kinds.kind("sts") is sts.KIND
    assert "sts" not in kinds.KINDS and [k.name for k in kinds.every_kind()][0] == "sts"
    assert kinds.find_all(data) == []
    found = sts.KIND.find(data)
    assert [t.name for t in found] == ["STS12", "STSB"]
    subsets = find_sts(data)[0]
    assert [s.split for s in found[1].data] == [s.split for s in subsets if s.task == "STSB"]


def test_its_columns_are_typed_per_protocol():
    assert [(c.name, c.kept_as or c.protocol, c.statistic) for c in sts.KIND.task_columns("STS12")] == [
        ("STS12 senteval", "cosine", resampled.mean_spearman),
        ("STS12 simcse", "cosine", resampled.pooled_spearman),
    ]
    assert [c.name for c in sts.KIND.task_columns("SICKR")] == ["SICKR cosine", "SICKR senteval"]
    assert [c.name for c in sts.KIND.task_columns("mine")] == ["mine cosine"]
    # a transfer task's "senteval" items are not STS's
    assert sts.kept_columns("SICKE", "senteval") == [] and sts.kept_columns("SICKR", "senteval")


def test_intervals_recompute_a_column_by_its_type_not_its_name():
    items = {"m": pd.DataFrame({"task": ["STS12", "STSB", "mine"], "protocol": ["cosine", "senteval", "cosine"]})}
    typed = typed_from(items)
    assert spec("STS12 senteval", typed) == Spec("STS12", "cosine", resampled.mean_spearman)
    assert spec("STSB senteval", typed) == Spec("STSB", "senteval", resampled.pooled_spearman)
    assert spec("mine cosine", typed) == Spec("mine", "cosine", resampled.pooled_spearman)
    assert spec("STS12 senteval") is None  # a bare name is not parsed


def test_decontamination_reads_sts_texts_from_the_declaration(tmp_path):
    data = write_sts(tmp_path / "eval", n_pairs=6)
    texts = eval_texts(str(data), transfer=False, dev_sets=[])
    stsb = [s for s in find_sts(data)[0] if s.task == "STSB"]
    assert texts["STSB"] == [x for s in stsb if s.split != "train" for x in (*s.sent1, *s.sent2)]
    assert list(texts) == ["STS12", "STSB"]
