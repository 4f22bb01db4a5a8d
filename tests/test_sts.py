import os
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from pipeline.evaluate.sts import score_sts
from pipeline.readers.names import STS_TASKS
from pipeline.readers.sts import EvalDataError, StsDataError, StsSubset, data_hash, find_sts

SHARED = os.environ.get("CPIPE_SHARED_DATA")

# Subset "A": the third pair has an empty gold line and must be skipped.
# "a man is playing a guitar ." appears in both subsets and in STS-B, so it must be embedded once.
STS12_A = [
    ("a man is playing a guitar .", "a man plays the guitar .", "4.8"),
    ("the cat sits on the mat .", "a dog runs in the park .", "0.4"),
    ("this pair has no gold score .", "it is skipped .", ""),
    ("stocks fell sharply today .", "markets dropped today .", "3.6"),
]
STS12_B = [
    ("a woman slices an onion .", "a woman is cutting an onion .", "4.2"),
    ("a man is playing a guitar .", "a boy sings a song .", "1.0"),
    ("the sky is blue .", "the grass is green .", "0.8"),
]
STSB_TEST = [
    ("main-captions", "MSRvid", "2012test", "0001", "5.000", "a man is playing a guitar .", "a man plays guitar ."),
    ("main-news", "headlines", "2015", "0002", "1.200", 'he said "no" loudly .', "she left early ."),
    (
        "main-forums",
        "deft-forum",
        "2014",
        "0003",
        "2.500",
        "the plane took off .",
        "an airplane is taking off .",
        "an-extra-column",
    ),
    ("main-captions", "images", "2015", "0004", "0.000", "a red bus .", "two dogs swim ."),
]
STSB_DEV = [
    ("main-captions", "MSRvid", "2012dev", "0001", "4.000", "kids play football .", "children play soccer ."),
    ("main-captions", "MSRvid", "2012dev", "0002", "0.500", "a cat eats .", "a man drives a car ."),
    ("main-captions", "MSRvid", "2012dev", "0003", "2.000", "a woman dances .", "a woman is singing ."),
]
STSB_TRAIN = [("main-captions", "MSRvid", "2012train", "0001", "3.000", "train only one .", "train only two .")]


def _write_sts(task_dir: Path, name: str, pairs) -> None:
    task_dir.mkdir(parents=True, exist_ok=True)
    (task_dir / f"STS.input.{name}.txt").write_text("".join(f"{a}\t{b}\n" for a, b, _ in pairs))
    (task_dir / f"STS.gs.{name}.txt").write_text("".join(f"{g}\n" for _, _, g in pairs))


def _write_stsb(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join("\t".join(r) + "\n" for r in rows))


@pytest.fixture
def sts_dir(tmp_path: Path) -> Path:
    _write_sts(tmp_path / "STS12-en-test", "A", STS12_A)
    _write_sts(tmp_path / "STS12-en-test", "B", STS12_B)
    _write_stsb(tmp_path / "STSBenchmark" / "sts-test.csv", STSB_TEST)
    _write_stsb(tmp_path / "STSBenchmark" / "sts-dev.csv", STSB_DEV)
    _write_stsb(tmp_path / "STSBenchmark" / "sts-train.csv", STSB_TRAIN)
    return tmp_path


def bag_of_chars(sentences: list[str]) -> np.ndarray:
    out = np.zeros((len(sentences), 32))
    for i, s in enumerate(sentences):
        for c in s:
            out[i, ord(c) % 32] += 1
    return out


def _by_key(rows):
    return {(r["task"], r["subset"], r["split"], r["metric"], r["protocol"]): r for r in rows}


def test_find_sts_reads_senteval_layout(sts_dir):
    subsets, absent = find_sts(sts_dir)
    assert [(s.task, s.name, s.split, len(s.gold)) for s in subsets] == [
        ("STS12", "A", "test", 3),
        ("STS12", "B", "test", 3),
        ("STSB", "sts-test", "test", 4),
        ("STSB", "sts-dev", "dev", 3),
        ("STSB", "sts-train", "train", 1),
    ]
    assert absent == ["STS13", "STS14", "STS15", "STS16", "SICKR"]
    a = subsets[0]
    assert "this pair has no gold score ." not in a.sent1
    assert a.gold.tolist() == [4.8, 0.4, 3.6]
    assert a.sent2 == ["a man plays the guitar .", "a dog runs in the park .", "markets dropped today ."]
    stsb = subsets[2]
    assert stsb.sent1[1] == 'he said "no" loudly .'
    assert stsb.sent2[2] == "an airplane is taking off ."
    assert stsb.gold.tolist() == [5.0, 1.2, 2.5, 0.0]


def test_one_tasks_folder_is_that_task(sts_dir):
    """`--eval-data .../STSBenchmark`, the folder a user has at hand, is STS-B alone, as read from its parent."""
    whole, _ = find_sts(sts_dir)
    for folder, task in (("STSBenchmark", "STSB"), ("STS12-en-test", "STS12")):
        subsets, absent = find_sts(sts_dir / folder)
        assert [(s.task, s.name, s.sent1, s.gold.tolist()) for s in subsets] == [
            (s.task, s.name, s.sent1, s.gold.tolist()) for s in whole if s.task == task
        ]
        assert task not in absent and len(absent) == 6


def test_score_sts_matches_direct_scipy(sts_dir):
    subsets, _ = find_sts(sts_dir)
    calls = []

    def encode(sentences):
        calls.append(list(sentences))
        return bag_of_chars(sentences)

    rows = score_sts(encode, subsets)
    # As SentEval's batcher is called: per split, its pairs sorted by (words in sentence 1, words in sentence 2,
    # gold score), then each side of a batch of pairs, the words joined by one space.
    expected_calls = []
    for s in subsets:  # STS-B's train split too: its regressor is fitted on it
        ordered = sorted(zip(s.sent1, s.sent2, s.gold), key=lambda z: (len(z[0].split()), len(z[1].split()), z[2]))
        expected_calls += [[" ".join(a.split()) for a, _, _ in ordered], [" ".join(b.split()) for _, b, _ in ordered]]
    assert sorted(calls) == sorted(expected_calls)

    def cos(s):
        a, b = bag_of_chars(s.sent1), bag_of_chars(s.sent2)
        return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)

    got = _by_key(rows)
    sts12 = subsets[:2]
    per_subset = {s.name: stats.spearmanr(cos(s), s.gold).statistic for s in sts12}
    for s in sts12:
        row = got[("STS12", s.name, "test", "spearman", "subset")]
        assert row["value"] == pytest.approx(per_subset[s.name])
        assert row["n"] == 3
        assert got[("STS12", s.name, "test", "pearson", "subset")]["value"] == pytest.approx(
            stats.pearsonr(cos(s), s.gold).statistic
        )

    senteval = got[("STS12", "all", "test", "spearman", "senteval")]
    assert senteval["value"] == pytest.approx(np.mean(list(per_subset.values())))
    assert senteval["n"] == 6
    simcse = got[("STS12", "all", "test", "spearman", "simcse")]
    all_sims = np.concatenate([cos(s) for s in sts12])
    all_gold = np.concatenate([s.gold for s in sts12])
    assert simcse["value"] == pytest.approx(stats.spearmanr(all_sims, all_gold).statistic)
    assert simcse["n"] == 6
    # The fixture is built so that the two protocols disagree; a mix-up would show.
    assert senteval["value"] != pytest.approx(simcse["value"])
    assert got[("STS12", "all", "test", "pearson", "simcse")]["value"] == pytest.approx(
        stats.pearsonr(all_sims, all_gold).statistic
    )

    test = subsets[2]
    row = got[("STSB", "all", "test", "spearman", "cosine")]
    assert row["value"] == pytest.approx(stats.spearmanr(cos(test), test.gold).statistic) and row["n"] == 4
    assert got[("STSB", "all", "dev", "spearman", "cosine")]["n"] == 3
    assert not any(r["split"] == "train" for r in rows)  # train is only fitted on
    assert {k[4] for k in got if k[0] == "STSB"} == {"cosine", "senteval"}

    assert {tuple(sorted(r)) for r in rows} == {("metric", "n", "protocol", "split", "subset", "task", "value")}
    assert all(type(r["value"]) is float and -1 <= r["value"] <= 1 for r in rows)


def test_gold_ordered_encoder_scores_one():
    rng = np.random.default_rng(0)
    subsets, vectors = [], {}
    for name, n in (("X", 7), ("Y", 5)):
        gold = rng.uniform(0, 5, n)
        s1 = [f"{name} left {i}" for i in range(n)]
        s2 = [f"{name} right {i}" for i in range(n)]
        for a, b, g in zip(s1, s2, gold):
            theta = (1 - g / 5) * np.pi / 2  # higher gold -> smaller angle -> higher cosine
            vectors[a] = np.array([1.0, 0.0])
            vectors[b] = np.array([np.cos(theta), np.sin(theta)])
        subsets.append(StsSubset("STS13", name, "test", s1, s2, gold))

    rows = score_sts(lambda xs: np.stack([vectors[x] for x in xs]), subsets)
    spearman = [r for r in rows if r["metric"] == "spearman"]
    assert len(spearman) == 4  # two subsets, senteval, simcse
    assert all(r["value"] == pytest.approx(1.0) for r in spearman)


def test_zero_vectors_give_no_nan_warning():
    subset = StsSubset("STS14", "z", "test", ["a", "b", "c"], ["empty", "e", "f"], np.array([1.0, 2.0, 3.0]))
    table = {"a": [1, 0], "b": [1, 1], "c": [1, 0], "empty": [0, 0], "e": [1, 0], "f": [1, 0]}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rows = score_sts(lambda xs: np.array([table[x] for x in xs], dtype=float), [subset])
    assert all(np.isfinite(r["value"]) for r in rows)


def test_data_hash_tracks_content(sts_dir):
    h1 = data_hash(find_sts(sts_dir)[0])
    assert h1 == data_hash(find_sts(sts_dir)[0])
    assert re.fullmatch("[0-9a-f]{16}", h1)
    (sts_dir / "STS12-en-test" / "STS.gs.B.txt").write_text("4.2\n1.0\n0.9\n")
    assert data_hash(find_sts(sts_dir)[0]) != h1


def test_missing_directory_is_named(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(StsDataError, match="nope") as err:
        find_sts(missing)
    assert str(missing) in str(err.value)


def test_directory_without_tasks_is_named(tmp_path):
    (tmp_path / "unrelated").mkdir()
    with pytest.raises(StsDataError) as err:
        find_sts(tmp_path)
    message = str(err.value)
    assert f"no known STS task in {tmp_path}" in message
    assert "STS12-en-test/" in message and "STSBenchmark/" in message
    assert "\n" not in message


def test_malformed_sts_line_names_file_and_line(tmp_path):
    task = tmp_path / "STS12-en-test"
    task.mkdir()
    (task / "STS.input.A.txt").write_text("one\ttwo\nno tab here\n")
    (task / "STS.gs.A.txt").write_text("1.0\n2.0\n")
    with pytest.raises(StsDataError) as err:
        find_sts(tmp_path)
    assert f"{task / 'STS.input.A.txt'}:2" in str(err.value)


def test_bad_gold_value_names_file_and_line(tmp_path):
    task = tmp_path / "STS15-en-test"
    task.mkdir()
    (task / "STS.input.A.txt").write_text("one\ttwo\nthree\tfour\n")
    (task / "STS.gs.A.txt").write_text("1.0\nhigh\n")
    with pytest.raises(StsDataError) as err:
        find_sts(tmp_path)
    assert f"{task / 'STS.gs.A.txt'}:2" in str(err.value)


def test_line_count_mismatch_names_both_files(tmp_path):
    task = tmp_path / "STS16-en-test"
    task.mkdir()
    (task / "STS.input.A.txt").write_text("one\ttwo\nthree\tfour\n")
    (task / "STS.gs.A.txt").write_text("1.0\n")
    with pytest.raises(StsDataError) as err:
        find_sts(tmp_path)
    assert str(task / "STS.input.A.txt") in str(err.value)
    assert str(task / "STS.gs.A.txt") in str(err.value)


def test_short_stsb_line_names_file_and_line(tmp_path):
    path = tmp_path / "STSBenchmark" / "sts-test.csv"
    _write_stsb(path, [STSB_TEST[0], ("main-captions", "MSRvid", "2012test", "0002", "3.0", "only one sentence")])
    with pytest.raises(StsDataError) as err:
        find_sts(tmp_path)
    assert f"{path}:2" in str(err.value)


@pytest.mark.skipif(not SHARED, reason="CPIPE_SHARED_DATA is not set (path to the team's shared data directory)")
def test_real_senteval_data():
    subsets, absent = find_sts(Path(SHARED) / "eval" / "senteval")
    assert absent == ["STS13", "STS14", "STS15", "STS16", "SICKR"]
    sts12 = {s.name: len(s.gold) for s in subsets if s.task == "STS12"}
    assert sts12 == {"MSRpar": 750, "MSRvid": 750, "SMTeuroparl": 459, "surprise.OnWN": 750, "surprise.SMTnews": 399}
    assert sum(sts12.values()) == 3108
    stsb = {s.split: len(s.gold) for s in subsets if s.task == "STSB"}
    assert stsb == {"test": 1379, "dev": 1500, "train": 5749}
    assert set(STS_TASKS) - set(absent) == {"STS12", "STSB"}
    assert all(np.isfinite(s.gold).all() and 0 <= s.gold.min() and s.gold.max() <= 5 for s in subsets)

    got = _by_key(score_sts(bag_of_chars, [s for s in subsets if s.split != "train"]))
    assert got[("STS12", "all", "test", "spearman", "simcse")]["n"] == 3108
    assert got[("STSB", "all", "test", "spearman", "cosine")]["n"] == 1379


SICK_HEADER = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment"
SICK_TEST = [
    ("1", "A man is playing a guitar", "A man plays the guitar", "4.9", "ENTAILMENT"),
    ("2", "A dog runs in the park", "Nobody is cooking", "1.1", "NEUTRAL"),
    ("3", "A woman slices an onion", "A woman is not cutting an onion", "3.4", "CONTRADICTION"),
    ("4", "Kids play football", "Children are playing soccer", "4.4", "ENTAILMENT"),
]
SICK_TRIAL = [
    ("5", "A cat eats", "A man drives a car", "1.0", "NEUTRAL"),
    ("6", "A boy sings", "A child is singing", "4.2", "ENTAILMENT"),
    ("7", "A bird flies", "A plane lands", "2.1", "NEUTRAL"),
]
SICK_TRAIN = [("8", "train only one", "train only two", "3.0", "NEUTRAL")]


def write_sick(directory: Path, test=SICK_TEST, trial=SICK_TRIAL, train=SICK_TRAIN, newline="\n") -> Path:
    """The three SICK files as distributed (the test file has CRLF line ends there)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, rows, nl in (
        ("SICK_test_annotated.txt", test, "\r\n"),
        ("SICK_trial.txt", trial, newline),
        ("SICK_train.txt", train, newline),
    ):
        (directory / name).write_bytes(
            "".join(line + nl for line in [SICK_HEADER] + ["\t".join(r) for r in rows]).encode()
        )
    return directory


def test_sick_r_is_found_below_the_data_dir_and_scored(sts_dir):
    write_sick(sts_dir / "sick2014")
    subsets, absent = find_sts(sts_dir)
    assert "SICKR" not in absent
    sick = [s for s in subsets if s.task == "SICKR"]
    assert [(s.name, s.split, len(s.gold)) for s in sick] == [
        ("SICK_test_annotated", "test", 4),
        ("SICK_trial", "dev", 3),
        ("SICK_train", "train", 1),
    ]
    test = sick[0]
    assert test.sent1[0] == "A man is playing a guitar" and test.sent2[3] == "Children are playing soccer"
    assert test.gold.tolist() == [4.9, 1.1, 3.4, 4.4]  # CRLF line ends leave no "\r" in scores or sentences

    got = _by_key(score_sts(bag_of_chars, subsets))
    a, b = bag_of_chars(test.sent1), bag_of_chars(test.sent2)
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert got[("SICKR", "all", "test", "spearman", "cosine")]["value"] == pytest.approx(
        stats.spearmanr(cos, test.gold).statistic
    )
    assert got[("SICKR", "all", "test", "pearson", "cosine")]["value"] == pytest.approx(
        stats.pearsonr(cos, test.gold).statistic
    )
    assert got[("SICKR", "all", "test", "spearman", "cosine")]["n"] == 4
    assert got[("SICKR", "all", "dev", "spearman", "cosine")]["n"] == 3
    assert ("SICKR", "all", "test", "spearman", "senteval") in got


def test_sick_r_alone_is_enough_and_senteval_dir_name_works(tmp_path):
    write_sick(tmp_path / "SICK")
    subsets, absent = find_sts(tmp_path)
    assert absent == list(STS_TASKS)
    assert {s.task for s in subsets} == {"SICKR"}


def test_two_copies_of_sick_are_an_error_naming_both(tmp_path):
    write_sick(tmp_path / "SICK")
    write_sick(tmp_path / "backup" / "sick2014")
    with pytest.raises(EvalDataError) as err:
        find_sts(tmp_path)
    assert str(tmp_path / "SICK" / "SICK_test_annotated.txt") in str(err.value)
    assert str(tmp_path / "backup" / "sick2014" / "SICK_test_annotated.txt") in str(err.value)


@pytest.mark.parametrize(
    "rows, header, where, message",
    [
        (SICK_TEST[:1] + [("2", "only one sentence")], SICK_HEADER, 3, "expected 5 tab-separated columns"),
        (SICK_TEST[:2] + [("3", "a", "b", "high", "NEUTRAL")], SICK_HEADER, 4, "'high' is not a number"),
        (SICK_TEST, "id\ta\tb\tscore\tlabel", 1, "expected the header pair_ID"),
    ],
)
def test_malformed_sick_names_file_and_line(tmp_path, rows, header, where, message):
    directory = write_sick(tmp_path / "sick2014", test=rows)
    path = directory / "SICK_test_annotated.txt"
    lines = path.read_bytes().decode().split("\r\n")
    path.write_bytes("\r\n".join([header] + lines[1:]).encode())
    with pytest.raises(EvalDataError) as err:
        find_sts(tmp_path)
    assert f"{path}:{where}:" in str(err.value) and message in str(err.value)


def test_sts13_to_16_in_senteval_layout(tmp_path):
    # STS16 input files carry source columns after the two sentences, and its
    # gold files leave the pairs nobody scored empty; both as SentEval ships them.
    _write_sts(tmp_path / "STS13-en-test", "FNWN", [("a b", "a c", "2.0"), ("c d", "e f", "1.0"), ("x", "y", "0.5")])
    _write_sts(tmp_path / "STS13-en-test", "headlines", [("h a", "h a", "3.0"), ("h c", "x y", "4.0")])
    _write_sts(tmp_path / "STS14-en-test", "images", [("i a", "i a", "1.5"), ("i c", "x y", "2.5")])
    _write_sts(
        tmp_path / "STS15-en-test", "answers-forums", [("f a", "f b", ""), ("f c", "f c", "3.5"), ("f e", "x y", "0.0")]
    )
    task = tmp_path / "STS16-en-test"
    task.mkdir()
    (task / "STS.input.answer-answer.txt").write_text(
        "q a\tq a\tsrc1\tsrc2\nq c\tq d\tsrc1\tsrc2\nq e\tx y\tsrc1\tsrc2\nq g\tq h\tsrc1\tsrc2\n"
    )
    (task / "STS.gs.answer-answer.txt").write_text("4\n\n1\n \n")
    subsets, absent = find_sts(tmp_path)
    assert absent == ["STS12", "STSB", "SICKR"]
    assert [(s.task, s.name, len(s.gold)) for s in subsets] == [
        ("STS13", "FNWN", 3),
        ("STS13", "headlines", 2),
        ("STS14", "images", 2),
        ("STS15", "answers-forums", 2),
        ("STS16", "answer-answer", 2),
    ]
    sts16 = subsets[-1]
    assert sts16.sent1 == ["q a", "q e"] and sts16.sent2 == ["q a", "x y"] and sts16.gold.tolist() == [4.0, 1.0]
    assert subsets[3].sent1 == ["f c", "f e"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rows = _by_key(score_sts(bag_of_chars, subsets))
    assert rows[("STS13", "all", "test", "spearman", "simcse")]["n"] == 5
    assert rows[("STS16", "answer-answer", "test", "spearman", "subset")]["value"] == pytest.approx(1.0)
    assert rows[("STS16", "all", "test", "pearson", "senteval")]["n"] == 2


def test_undecodable_file_names_file_and_line(tmp_path):
    task = tmp_path / "STS14-en-test"
    task.mkdir()
    (task / "STS.input.A.txt").write_bytes(b"one\ttwo\ncaf\xe9\tthree\n")
    (task / "STS.gs.A.txt").write_text("1.0\n2.0\n")
    with pytest.raises(EvalDataError) as err:
        find_sts(tmp_path)
    assert f"{task / 'STS.input.A.txt'}:2: not valid utf-8" in str(err.value)


@pytest.mark.skipif(not SHARED, reason="CPIPE_SHARED_DATA is not set (path to the team's shared data directory)")
def test_real_sick_r():
    subsets, absent = find_sts(Path(SHARED) / "eval" / "sick2014")
    assert absent == list(STS_TASKS)
    assert {s.split: len(s.gold) for s in subsets} == {"test": 4927, "dev": 500, "train": 4500}
    test = subsets[0]
    assert test.gold.min() >= 1.0 and test.gold.max() <= 5.0
    assert not any("\r" in x for x in test.sent2)
    got = _by_key(score_sts(bag_of_chars, subsets))
    assert got[("SICKR", "all", "test", "spearman", "cosine")]["n"] == 4927
    # Sentences with many shared characters are more related: even bags of characters correlate.
    assert got[("SICKR", "all", "test", "spearman", "cosine")]["value"] > 0.2
    # The supervised regressor learns which character differences matter: better than cosine.
    assert (
        got[("SICKR", "all", "test", "spearman", "senteval")]["value"]
        > got[("SICKR", "all", "test", "spearman", "cosine")]["value"]
    )
