import os
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from pipeline.baselines.vectors import RandomEncoder
from pipeline.errors import InputError
from pipeline.evaluate.config import EvaluateConfig
from pipeline.evaluate.logreg import Settings
from pipeline.evaluate.transfer import averages, score_transfer
from pipeline.readers.transfer import (
    TRANSFER_TASKS,
    Examples,
    TransferDataError,
    TransferTask,
    find_transfer,
    transfer_data_hash,
)
from tests.test_sts import SICK_TEST, SICK_TRIAL, write_sick

SHARED = os.environ.get("CPIPE_SHARED_DATA")


def write(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


MRPC_HEADER = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\r\n"


@pytest.fixture
def transfer_dir(tmp_path: Path) -> Path:
    """Every task in the layout of the shared data: harvardnlp's files, msr-para-*.tsv, sick2014/."""
    cls = tmp_path / "senteval-classification"
    # Windows-1252 bytes, as in MR: SentEval decodes Latin-1, so 0x85 (an ellipsis) becomes U+0085 and
    # splitlines() breaks the line there; 0xe9 is an e-acute either way.
    write(cls / "MR" / "rt-polarity.pos", b"a gem of a film \x85 truly \n  moving   and warm \n")
    write(cls / "MR" / "rt-polarity.neg", b"dull and long \r\nflat caf\xe9\r\n")
    write(cls / "CR" / "custrev.pos", "great player .\n\nworks fine\n\n")  # blank lines as CR has them
    write(cls / "CR" / "custrev.neg", "broke in a week\n")
    write(cls / "SUBJ" / "subj.objective", "the film opens in 1920 .\n")
    write(cls / "SUBJ" / "subj.subjective", "a delight .\nsmug .\n")
    write(cls / "MPQA" / "mpqa.pos", "support\n")
    write(cls / "MPQA" / "mpqa.neg", "complaining\nfailing to support\n")
    sst2 = {"train": "1 a fine film\n0 a bore\n", "dev": "0 tedious\n", "test": "1 lovely\n0 awful\n"}
    for split, lines in sst2.items():
        write(cls / "SST2" / f"stsa.binary.{split}", lines)
    write(cls / "TREC" / "train_5500.label", b"NUM:dist How far is it ?\r\nHUM:ind Who was he ?\r\n")
    write(cls / "TREC" / "TREC_10.label", "LOC:city What city is it in ?\n")
    write(tmp_path / "msrp" / "msr-para-train.tsv", MRPC_HEADER + "1\t1\t2\tA said it.\tIt was said by A.\r\n")
    write(tmp_path / "msrp" / "msr-para-val.tsv", MRPC_HEADER[1:] + "0\t3\t4\tB left.\tC stayed.\r\n")
    write(tmp_path / "msrp" / "msr-para-test.tsv", MRPC_HEADER + "1\t5\t6\tD won.\tD was the winner.\r\n")
    write_sick(tmp_path / "sick2014")
    return tmp_path


def test_find_transfer_reads_every_layout(transfer_dir):
    tasks, absent = find_transfer(transfer_dir)
    assert absent == []
    by_name = {t.name: t for t in tasks}
    assert list(by_name) == list(TRANSFER_TASKS)
    assert by_name["MR"].path == transfer_dir / "senteval-classification" / "MR"
    # Every split in SentEval's order: a stable sort by (number of words, label).
    mr = by_name["MR"].splits["all"]
    assert mr.text == ["truly", "flat caf\u00e9", "dull and long", "moving and warm", "a gem of a film"]
    assert mr.labels.tolist() == [1, 0, 0, 1, 1] and mr.pair is None
    cr = by_name["CR"].splits["all"]  # blank lines are kept as empty samples
    assert cr.text == ["", "", "works fine", "great player .", "broke in a week"]
    assert cr.labels.tolist() == [1, 1, 1, 1, 0]
    subj = by_name["SUBJ"]
    assert subj.classes == ("subjective", "objective") and subj.splits["all"].labels.tolist() == [0, 0, 1]
    mpqa = by_name["MPQA"].splits["all"]
    assert mpqa.text == ["complaining", "support", "failing to support"] and mpqa.labels.tolist() == [0, 1, 0]
    sst2 = by_name["SST2"].splits
    assert set(sst2) == {"train", "dev", "test"}
    assert sst2["train"].text == ["a bore", "a fine film"] and sst2["train"].labels.tolist() == [0, 1]
    trec = by_name["TREC"]
    assert trec.splits["train"].text == ["Who was he ?", "How far is it ?"]
    assert [trec.classes[i] for i in trec.splits["train"].labels] == ["HUM", "NUM"]
    assert trec.splits["test"].labels.tolist() == [trec.classes.index("LOC")]
    mrpc = by_name["MRPC"].splits
    assert set(mrpc) == {"train", "test"}  # msr-para's val file goes back into train, as in SentEval's 4076
    # Sorted after the val file's pairs joined train's, by (words of the first, words of the second, label).
    assert mrpc["train"].text == ["B left.", "A said it."] and mrpc["train"].pair == ["C stayed.", "It was said by A."]
    assert mrpc["train"].labels.tolist() == [0, 1] and mrpc["test"].labels.tolist() == [1]
    sick = by_name["SICKE"]
    assert [len(sick.splits[s].text) for s in ("train", "dev", "test")] == [1, len(SICK_TRIAL), len(SICK_TEST)]
    expected = sorted(SICK_TEST, key=lambda r: (len(r[1].split()), len(r[2].split()), sick.classes.index(r[4])))
    assert [sick.classes[i] for i in sick.splits["test"].labels] == [r[4] for r in expected]
    assert sick.splits["test"].pair == [" ".join(r[2].split()) for r in expected]


def test_senteval_layout_for_sst2_and_mrpc(tmp_path):
    sst = tmp_path / "downstream" / "SST" / "binary"
    for split in ("train", "dev", "test"):
        write(sst / f"sentiment-{split}", "a fine film\t1\na\tbore\t0\n")
    header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    write(tmp_path / "downstream" / "MRPC" / "msr_paraphrase_train.txt", header + "1\t1\t2\tx y\tx  z\n")
    write(tmp_path / "downstream" / "MRPC" / "msr_paraphrase_test.txt", header + "0\t3\t4\tp\tq\n")
    tasks, absent = find_transfer(tmp_path)
    assert absent == ["MR", "CR", "SUBJ", "MPQA", "TREC", "SICKE"]
    sst2, mrpc = tasks
    assert sst2.splits["dev"].text == ["a bore", "a fine film"] and sst2.splits["dev"].labels.tolist() == [0, 1]
    assert mrpc.splits["train"].pair == ["x z"] and mrpc.splits["test"].labels.tolist() == [0]


@pytest.mark.parametrize(
    "relpath, data, where, message",
    [
        ("TREC/TREC_10.label", "LOC:city Where ?\nPLACE:city Where else ?\n", 2, "label 'PLACE' is not one of ABBR"),
        ("TREC/TREC_10.label", "no colon here\n", 1, "is not one of"),
        ("SST2/stsa.binary.dev", "1 good\n2 very good\n", 2, "label '2' is not one of 0, 1"),
        ("msrp/msr-para-test.tsv", MRPC_HEADER + "1\t5\t6\tonly one sentence\r\n", 2, "expected 5 tab-separated"),
        ("msrp/msr-para-test.tsv", "1\t5\t6\ta\tb\r\n", 1, "expected the header Quality"),
    ],
)
def test_malformed_files_name_file_and_line(transfer_dir, relpath, data, where, message):
    path = next(transfer_dir.rglob(Path(relpath).name))
    write(path, data)
    with pytest.raises(TransferDataError) as err:
        find_transfer(transfer_dir)
    assert f"{path}:{where}:" in str(err.value) and message in str(err.value)


def test_data_hash_tracks_content(transfer_dir):
    first = transfer_data_hash(find_transfer(transfer_dir)[0])
    assert first == transfer_data_hash(find_transfer(transfer_dir)[0]) and len(first) == 16
    write(transfer_dir / "senteval-classification" / "MPQA" / "mpqa.pos", "supports\n")
    assert transfer_data_hash(find_transfer(transfer_dir)[0]) != first


def test_missing_partner_file_is_named(transfer_dir):
    missing = transfer_dir / "senteval-classification" / "CR" / "custrev.neg"
    missing.unlink()
    with pytest.raises(InputError, match=f"CR in .*missing {missing}"):
        find_transfer(transfer_dir)


def test_missing_directory_is_named(tmp_path):
    with pytest.raises(InputError, match=str(tmp_path / "nope")):
        find_transfer(tmp_path / "nope")


# --- the protocol, on synthetic embeddings ---------------------------------------------------------

QUICK = Settings(max_epoch=40)  # SentEval's classifier with fewer epochs at most, for tests of behaviour only


def table_encoder(vectors: dict[str, np.ndarray]):
    return lambda sentences: np.stack([vectors[s] for s in sentences])


def synthetic(name: str, sizes: dict[str, int], separable: bool, seed: int, classes: int = 2, dim: int = 5):
    """A task whose sentences embed near their class's mean (means ~4 apart), or with separable=False,
    all around one mean; returns (task, sentence -> vector)."""
    rng = np.random.default_rng(seed)
    means = rng.normal(size=(classes, dim)) * 4 if separable else np.zeros((classes, dim))
    splits, vectors = {}, {}
    for split, n in sizes.items():
        labels = np.arange(n) % classes
        text = [f"{name}-{split}-{i}" for i in range(n)]
        vectors.update({s: means[y] + rng.normal(size=dim) for s, y in zip(text, labels)})
        splits[split] = Examples(text, None, labels)
    return TransferTask(name, Path("."), tuple("abc"[:classes]), splits), vectors


def by_key(rows):
    return {(r["task"], r["split"], r["metric"]): r for r in rows}


@pytest.mark.parametrize("protocol", ["senteval", "sklearn"])
@pytest.mark.parametrize("separable", [True, False])
def test_every_scheme_separates_what_is_separable_and_nothing_else(separable, protocol):
    tasks, vectors = [], {}
    for task, table in (
        synthetic("MR", {"all": 120}, separable, seed=1),
        synthetic("TREC", {"train": 120, "test": 300}, separable, seed=2, classes=3),
        synthetic("SST2", {"train": 120, "dev": 60, "test": 300}, separable, seed=3),
    ):
        tasks.append(task)
        vectors.update(table)
    rows = by_key(score_transfer(table_encoder(vectors), tasks, k=5, protocol=protocol, settings=QUICK))
    assert {r["protocol"] for r in rows.values()} == {protocol}
    # SentEval's classifier takes Adam steps of 1e-3 from a random start and stops after six checks without gain:
    # on 120 samples that is too few steps to reach what is separable, so only the row counts are checked there.
    for name in ("MR", "TREC", "SST2") if protocol == "sklearn" else ():
        accuracy = rows[(name, "test", "accuracy")]["value"]
        chance = 1 / 3 if name == "TREC" else 1 / 2
        if separable:
            assert accuracy >= 0.97, name
        else:
            assert abs(accuracy - chance) < 0.15, name
    assert rows[("MR", "test", "accuracy")]["n"] == 120
    assert rows[("TREC", "test", "accuracy")]["n"] == 300 and rows[("TREC", "dev", "accuracy")]["n"] == 120
    assert rows[("SST2", "dev", "accuracy")]["n"] == 60


def test_same_seed_same_scores_and_the_seed_matters():
    task, vectors = synthetic("MR", {"all": 60}, False, seed=11)
    encode = table_encoder(vectors)
    first = score_transfer(encode, [task], seed=1, k=3, settings=QUICK)
    assert score_transfer(encode, [task], seed=1, k=3, settings=QUICK) == first
    assert any(score_transfer(encode, [task], seed=s, k=3, settings=QUICK) != first for s in (2, 3, 4))


def test_protocol_is_checked_where_it_is_set():
    task, vectors = synthetic("MR", {"all": 30}, True, seed=1)
    with pytest.raises(ValueError, match="'liblinear' is not one of senteval, sklearn"):
        score_transfer(table_encoder(vectors), [task], protocol="liblinear")
    assert EvaluateConfig().transfer_protocol == "senteval"
    with pytest.raises(ValidationError, match="transfer_protocol"):
        EvaluateConfig(transfer_protocol="liblinear")


def test_mrpc_uses_pair_features_and_reports_f1():
    """Paraphrase iff the two sentences embed alike: only [|u-v|, u*v] can see that, not u or v alone."""
    rng = np.random.default_rng(0)
    vectors, splits = {}, {}
    for split, n in (("train", 100), ("test", 200)):
        text, pair, labels = [], [], []
        for i in range(n):
            u = rng.normal(size=4)
            label = int(rng.random() < 0.6)
            v = u + rng.normal(size=4) * 0.05 if label else rng.normal(size=4)
            a, b = f"{split}-{i}-a", f"{split}-{i}-b"
            vectors[a], vectors[b] = u, v
            text.append(a)
            pair.append(b)
            labels.append(label)
        splits[split] = Examples(text, pair, np.array(labels))
    task = TransferTask("MRPC", Path("."), ("different", "paraphrase"), splits)
    # sklearn: SentEval's classifier needs more than 100 pairs to get far from its random start (see above).
    rows = by_key(score_transfer(table_encoder(vectors), [task], protocol="sklearn"))
    accuracy, f1 = rows[("MRPC", "test", "accuracy")]["value"], rows[("MRPC", "test", "f1")]["value"]
    assert accuracy > 0.9 and f1 > 0.9
    assert rows[("MRPC", "test", "accuracy_f1_mean")]["value"] == pytest.approx((accuracy + f1) / 2)
    assert rows[("MRPC", "dev", "accuracy")]["n"] == 100 and rows[("MRPC", "test", "f1")]["n"] == 200
    assert {r["protocol"] for r in rows.values()} == {"sklearn"}
    assert all(r["subset"] == "all" and type(r["value"]) is float for r in rows.values())


def test_encode_sees_each_distinct_sentence_once():
    calls = []
    text = ["x", "y", "x", "z"] * 5

    def encode(sentences):
        calls.append(list(sentences))
        return np.array([[ord(s[0]), 1.0] for s in sentences])

    task = TransferTask(
        "SICKE",
        Path("."),
        ("a", "b"),
        {s: Examples(text, text[::-1], np.arange(20) % 2) for s in ("train", "dev", "test")},
    )
    score_transfer(encode, [task], settings=QUICK)
    assert calls == [["x", "y", "z"]]


def test_averages_count_mrpc_as_mean_of_accuracy_and_f1():
    def row(task, split, metric, value):
        return {
            "task": task,
            "subset": "all",
            "split": split,
            "metric": metric,
            "protocol": "senteval",
            "value": value,
            "n": 10,
        }

    rows = [
        row("MR", "test", "accuracy", 0.8),
        row("MR", "dev", "accuracy", 0.7),
        row("MRPC", "test", "accuracy", 0.7),
        row("MRPC", "test", "f1", 0.8),
        row("MRPC", "test", "accuracy_f1_mean", 0.75),
        row("MRPC", "dev", "accuracy", 0.6),
        row("SICKE", "test", "accuracy", 0.5),
        # Not a transfer task, and not this protocol: both ignored.
        row("STSB", "test", "accuracy", 0.0),
        {**row("CR", "test", "accuracy", 0.0), "protocol": "other"},
    ]
    got = {r["split"]: r for r in averages(rows)}
    assert got["test"]["value"] == pytest.approx((0.8 + 0.75 + 0.5) / 3) and got["test"]["n"] == 3
    assert got["dev"]["value"] == pytest.approx((0.7 + 0.6) / 2) and got["dev"]["n"] == 2
    assert got["test"]["task"] == "transfer" and got["test"]["protocol"] == "declutr"
    assert averages([]) == []


# --- the shared data ------------------------------------------------------------------------------


@pytest.mark.skipif(not SHARED, reason="CPIPE_SHARED_DATA is not set (path to the team's shared data directory)")
def test_real_transfer_data():
    tasks, absent = find_transfer(Path(SHARED) / "eval")
    assert absent == []
    sizes = {t.name: {s: len(ex.text) for s, ex in t.splits.items()} for t in tasks}
    # SentEval's counts: Latin-1, splitlines() (which also breaks at 0x85), blank lines kept.
    assert sizes == {
        "MR": {"all": 10685},
        "CR": {"all": 3775},
        "SUBJ": {"all": 10021},
        "MPQA": {"all": 10606},
        "SST2": {"train": 6920, "dev": 872, "test": 1821},
        "TREC": {"train": 5452, "test": 500},
        "MRPC": {"train": 4076, "test": 1725},
        "SICKE": {"train": 4500, "dev": 500, "test": 4927},
    }
    by_name = {t.name: t for t in tasks}
    assert by_name["MR"].splits["all"].labels.sum() == 5344 and by_name["CR"].splits["all"].text.count("") == 4
    assert by_name["MRPC"].splits["train"].labels.sum() == 2753 and by_name["MRPC"].splits["test"].labels.sum() == 1147
    assert all(s == " ".join(s.split()) for t in tasks for ex in t.splits.values() for s in ex.text)
    for t in tasks:  # sorted as SentEval sorts, by words then label
        for ex in t.splits.values():
            keys = [
                (len(s.split()), *((len(p.split()),) if ex.pair else ()), int(y))
                for s, p, y in zip(ex.text, ex.pair or ex.text, ex.labels)
            ]
            assert keys == sorted(keys), t.name

    enc = RandomEncoder(dim=32, seed=0)
    rows = by_key(
        score_transfer(enc.encode, [by_name["MRPC"]], protocol="sklearn")
        + score_transfer(enc.encode, [by_name["SICKE"]])
    )
    # Majority classes: 66.5% of MRPC test pairs are paraphrases, 56.7% of SICK test pairs neutral.
    assert 0.6 < rows[("MRPC", "test", "accuracy")]["value"] < 0.8
    assert 0.75 < rows[("MRPC", "test", "f1")]["value"] < 0.85
    assert 0.55 < rows[("SICKE", "test", "accuracy")]["value"] < 0.85
