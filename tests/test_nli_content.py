"""NLI files judged by their content, not their names (issue 41, item 6): supervised SimCSE's and InferSent's
files may not copy a split the evaluation scores, whatever they are called (SICK's test split renamed
my_nli_train.txt), and a train file whose name holds "test" (protest_train.txt) is training data. Tiny SICK files
of made-up words in a temporary directory."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipeline.augment import stage as augment
from pipeline.augment.config import AugmentConfig
from pipeline.config import Config
from pipeline.errors import InputError
from pipeline.evaluate.config import EvaluateConfig
from pipeline.readers import nli
from pipeline.train.config import TrainConfig
from tests.conftest import WORDS
from tests.test_sts import SICK_HEADER

LABELS = ("ENTAILMENT", "CONTRADICTION", "NEUTRAL")


def nli_rows(seed: int, n: int) -> list[tuple[str, str, str]]:
    """n (premise, hypothesis, label) rows of made-up words, each premise with an entailment and a contradiction."""
    rng = np.random.default_rng(seed)
    words = lambda: " ".join(WORDS[j] for j in rng.integers(len(WORDS), size=6))
    return [(words(), words(), LABELS[i % 3]) for i in range(n)]


def write_sick_file(path, rows) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        SICK_HEADER + "\n" + "".join(f"{i}\t{a}\t{b}\t{1 + i % 5}\t{label}\n" for i, (a, b, label) in enumerate(rows))
    )
    return str(path)


@pytest.fixture
def eval_with_sick(tmp_path):
    """An evaluation directory with SICK's three splits (the test split scored as SICK-R), and the test rows."""
    sick = tmp_path / "eval" / "sick2014"
    test = nli_rows(0, 60)
    write_sick_file(sick / "SICK_test_annotated.txt", test)
    write_sick_file(sick / "SICK_trial.txt", nli_rows(1, 30))
    write_sick_file(sick / "SICK_train.txt", nli_rows(2, 60))
    return tmp_path / "eval", test


def simcse_sup_files(nli: list[str], eval_data) -> dict:
    cfg = Config(augment=AugmentConfig(simcse_sup={"nli": nli}), evaluate=EvaluateConfig(data=str(eval_data)))
    return augment.config(cfg, TrainConfig(objective="simcse-sup"))


# --- item 1: NLI files by their content, not their names ---


def test_a_renamed_test_split_is_refused_as_nli_training_data_naming_the_file_and_share(eval_with_sick, tmp_path):
    data, test = eval_with_sick
    renamed = write_sick_file(tmp_path / "my_nli_train.txt", test)
    with pytest.raises(InputError) as e:
        simcse_sup_files([renamed], data)
    message = str(e.value)
    assert message.startswith(f"augment.simcse_sup.nli: {renamed}: 60 of its 60 pairs (100% of the smaller")
    assert "test split SICKR SICK_test_annotated" in message and "\n" not in message
    dev = write_sick_file(tmp_path / "my_dev.txt", nli_rows(3, 30))
    with pytest.raises(InputError, match=f"InferSent's train file {renamed}: 60 of its 60 pairs"):
        nli.nli_files([renamed, dev], str(data))


def test_a_test_split_hidden_in_a_large_file_is_refused_too(eval_with_sick, tmp_path):
    data, test = eval_with_sick
    big = tmp_path / "snli_plus.jsonl"
    rows = nli_rows(4, 3000) + test  # the test split is 2% of the file, but all of the test split
    big.write_text(
        "".join(
            json.dumps({"sentence1": a, "sentence2": b, "gold_label": label.lower()}) + "\n" for a, b, label in rows
        )
    )
    with pytest.raises(InputError, match="60 of its 3060 pairs .100% of the smaller"):
        simcse_sup_files([str(big)], data)


def test_a_train_file_whose_name_holds_test_is_accepted(eval_with_sick, tmp_path):
    data, test = eval_with_sick
    protest = write_sick_file(tmp_path / "protest_train.txt", nli_rows(5, 60))
    assert simcse_sup_files([protest], data)["files"]["nli"] == [protest]
    dev = write_sick_file(tmp_path / "protest_dev.txt", nli_rows(6, 30))
    assert nli.nli_files([protest, dev], str(data)) == {"train": [protest], "dev": [dev]}
    # A few pairs in common are no copy (SICK's train split shares 2.1% of its pairs with its test split)
    write_sick_file(tmp_path / "protest_train.txt", nli_rows(7, 100) + test[:2])  # 2 of the 60 test pairs: 3%
    assert simcse_sup_files([protest], data)["files"]["nli"] == [protest]
    assert nli.nli_files([], str(data))["train"] == [str(data / "sick2014" / "SICK_train.txt")]
