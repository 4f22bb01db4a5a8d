"""Decontamination finds evaluation text as people write it (issue 38, item 5): SentEval's pre-tokenized STS
sentences (" ." endings, "don ' t", "it ' s"), WikiText's raw spacing ("well @-@ known", "1 @,@ 250") and running
text (punctuation glued, typographic apostrophes, either contraction spelling) all match each other, anywhere in a
document; "do not" is not "don't". The documents, the evaluation file and which documents go are written out here."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from pipeline.decontaminate.match import masked, word_spans
from pipeline.decontaminate.ngrams import (
    SEPARATOR,
    Pieces,
    concatenated,
    unified,
    word_hash,
    word_ids,
    word_lists,
)
from tests.test_decontaminate import FILLER, build, filtered

# SentEval's STS files: tokenized, a space before the final full stop and inside contractions.
GIRL = "a girl is styling her hair with a brush ."  # 9 words: looked up whole
DOG = "the dog doesn ' t want to go outside in the rain ."  # as STS-B writes it; 11 words, "n't" split off: whole
SUNNY = "it ' s a sunny day in the little village by the sea ."  # whole
SINGER = "A well-known singer performed 1,250 songs at the concert on Friday night ."  # whole
ROWS = [
    (GIRL, "A woman brushes her hair.", 4.0),
    (DOG, "The dog stays in.", 3.0),
    (SUNNY, "It is sunny.", 3.5),
    (SINGER, "A singer sang.", 2.5),
]

DOCS = {
    # The example: the sentence inside a document, its " ." gone, a comma glued on.
    "girl-inside": FILLER + "Yesterday a girl is styling her hair with a brush, then she left. " + FILLER,
    "dog-contracted": FILLER + "Look: The dog doesn\u2019t want to go outside in the rain! " + FILLER,
    "dog-treebank": FILLER + "the dog does n't want to go outside in the rain , they said " + FILLER,
    "sunny-running": FILLER + "\u201cIt's a sunny day in the little village by the sea.\u201d " + FILLER,
    "singer-wikitext": FILLER
    + " a well @-@ known singer performed 1 @,@ 250 songs at the concert on Friday night . "
    + FILLER,
    # Not the evaluation text: "does not" is another sentence, and eight of the girl's nine words are no match.
    "dog-does-not": FILLER + "The dog does not want to go outside in the rain. " + FILLER,
    "girl-eight-words": FILLER + "A girl is styling her hair with a comb. " + FILLER,
    "clean": FILLER,
}
DIRTY = {"girl-inside", "dog-contracted", "dog-treebank", "sunny-running", "singer-wikitext"}


@pytest.fixture(scope="module")
def documents(tmp_path_factory):
    return filtered(tmp_path_factory.mktemp("decont-norm"), DOCS)


def test_evaluation_text_is_dropped_however_it_was_written_and_clean_text_is_kept(documents, tmp_path):
    from storage import read_manifest, read_table

    built = build(documents, tmp_path, rows=ROWS)
    assert set(read_table(built).column("doc_id").to_pylist()) == set(DOCS) - DIRTY
    assert read_manifest(built)["contaminated_by_task"] == {"STSB": len(DIRTY)}


@pytest.mark.parametrize(
    "a, b",
    [
        ("don't", "do n't"),
        ("don't", "don ' t"),
        ("do n't", "don ' t"),
        ("can't", "can ' t"),
        ("Won\u2019t", "won ' t"),
        ("Don\u2019t", "do n't"),
        ("it's", "it ' s"),
        ("It\u2019s", "it 's"),
        ("we're", "we ' re"),
        ("a brush .", "a brush"),
        ("the film (which is long) is", "the film -lrb- which is long -rrb- is"),
        ("a brush.", "a brush"),
        ("well-known", "well @-@ known"),
        ("1,250", "1 @,@ 250"),
        ("\ufb01ne", "fine"),
        ("CAF\u00c9", "caf\u00e9"),
        ("the students' books", "the students books"),
    ],
)
def test_two_spellings_of_one_text_are_the_same_words(a, b):
    first, second = word_lists(pa.array([a, b])).to_pylist()
    assert first == second and "" not in first


@pytest.mark.parametrize("a, b", [("don't", "do not"), ("it's", "it is"), ("can't", "cannot")])
def test_a_contraction_is_not_its_expansion(a, b):
    first, second = word_lists(pa.array([a, b])).to_pylist()
    assert first != second


def test_punctuation_leaves_no_empty_word():
    assert word_lists(pa.array(["", " . ", "-- !", " a  b . "])).to_pylist() == [[], [], [], ["a", "b"]]


def test_mask_cuts_a_contracted_quote_from_its_first_piece_to_its_last():
    text = "Then the dog doesn't want to go outside in the rain! Fine."
    # The words of DOG as the text writes them: "the" (piece 2) to "rain!" (piece 11), "doesn't" three words.
    assert len(word_spans(text)) == len(word_lists(pa.array([text]))[0])
    first, last = 1, len(word_lists(pa.array(["Then the dog doesn't want to go outside in the rain!"]))[0]) - 1
    hits = [(last - first + 1, first, 0)]
    assert masked(text, hits) == ("Then   Fine.", last - first + 1)


@pytest.mark.parametrize(
    "text",
    [
        "Then the dog doesn ' t want to go outside in the rain ! Fine .",
        "you don ' t have to know , don't you ? do n't",
        "don 't x don' t y can ' t z",
        "Don ' t",
        "' t n ' n ' t",
        "the queen ' the it ' s we ' re",
    ],
)
def test_every_word_has_its_piece_however_the_contractions_are_spaced(text):
    assert len(word_spans(text)) == len(word_lists(pa.array([text]))[0])


def test_mask_cuts_a_spaced_contraction_whole():
    text = "Then the dog doesn ' t want to go outside in the rain ! Fine ."
    words = word_lists(pa.array([text]))[0].as_py()
    first, last = words.index("the"), words.index("rain")  # "doesn ' t" is three pieces and three words
    assert masked(text, [(last - first + 1, first, 0)]) == ("Then   ! Fine .", last - first + 1)  # MASK is " "


# Pieces that simplification changes, joins across white space or splits: contractions however spaced, typographic
# and stand-in apostrophes, NFKC's compatibility forms (one makes white space, one makes four words), case, brackets,
# digits, combining marks, and characters no pattern knows; and what may lie between them.
TOKENS = [
    *("don", "n", "t", "T", "N", "'", "\u2019", "\u2018", "`", "\u00b4", "\u02bc", "\u2032", "'t", "n't", "N'T"),
    *("in", "than", "\u2019t", "goin'", "n'", "'s", "'\u00a0t", "don't", "Don\u2019t", "can", "it", "re", "ll"),
    *("-lrb-", "-rrb-", "@-@", "--", "1,234", "\u0663\u0664", "\ufb01", "\uff2e", "\uff54", "\u03a3", "\u0130"),
    *("x\u0301", "\u0301", "\u00a8", "\ufdfa", "a", "the", "\x00", "\u200b", "\ufeff", "\u00e9", "\x1e", "\x1f"),
    "the-" * 30 + "don",  # longer than a piece remembered
]
SPACES = ["", " ", " ", " ", "  ", " \n ", "\n", " \x1f ", " \u00a0 "] + [
    chr(c) for c in range(0x3001) if chr(c).isspace()
]


@pytest.mark.parametrize("limit", [Pieces.LIMIT, 200])  # every piece remembered; or forgotten now and then
def test_documents_split_into_pieces_give_the_words_of_the_whole_text(limit):
    """Pieces.ids, which simplifies each distinct piece between spaces once, gives exactly the words (and their
    hashes) that simplifying each whole document gives, whatever white space lies between the pieces."""
    rng = random.Random(0)
    texts = ["".join(rng.choice(TOKENS) + rng.choice(SPACES) for _ in range(rng.randint(0, 20))) for _ in range(3000)]
    words = word_lists(pa.array(texts)).flatten().unique().to_pylist()
    vocab = {w: word_hash(w) for w in words[::2]}  # half the words are evaluation words: the others are 0
    lookup = (pa.array(list(vocab), pa.string()), np.array([*vocab.values(), 0], np.uint64))
    pieces = Pieces(lookup)
    pieces.LIMIT = limit
    for i in range(0, len(texts), 100):
        batch = pa.array(texts[i : i + 100])
        lists = word_lists(batch)
        expected, starts = concatenated(lists, word_ids(lists.flatten(), *lookup))
        got, got_starts = pieces.ids(batch)
        assert got.tolist() == expected.tolist() and got_starts.tolist() == starts.tolist(), texts[i : i + 100]


def test_no_character_composes_with_a_space_or_the_separator_and_none_becomes_the_separator():
    """What Pieces rests on, for every character: unified within the pieces between spaces (or SEPARATORs), a text is
    unified as it is whole; and SEPARATOR parts the simplified pieces again (only SEPARATOR becomes one)."""
    codes = np.concatenate([np.arange(0xD800), np.arange(0xE000, 0x110000)])
    utf8 = codes.astype("<u4").tobytes().decode("utf-32-le").encode()
    offsets = np.concatenate([[0], np.cumsum(1 + (codes >= 0x80) + (codes >= 0x800) + (codes >= 0x10000))])
    chars = pa.StringArray.from_buffers(len(codes), pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(utf8))
    alone = unified(chars)
    spaced = pc.binary_join_element_wise(chars, chars, " ")  # each character before a space, and after one
    assert unified(spaced).equals(pc.binary_join_element_wise(alone, alone, " "))
    assert unified(pc.binary_join_element_wise(chars, SEPARATOR, chars, "")).equals(
        pc.binary_join_element_wise(alone, SEPARATOR, alone, "")
    )
    # simplified()'s patterns put only spaces, 0 and letters in: NFKC is what could make a SEPARATOR
    assert pc.sum(pc.count_substring(alone, SEPARATOR)).as_py() == 1


def test_a_text_ending_in_white_space_at_the_end_of_arrows_data_splits_the_same_every_time():
    """pyarrow 26's utf8_split_whitespace reads past the data's end and sometimes takes the final space for part of
    the last word ("aaa " instead of "aaa"): a word no evaluation sentence has."""
    text = "\u03c3" + "a" * 61 + " "  # 64 bytes: all of the array's data
    assert {tuple(word_lists(pa.array([text]))[0].as_py()) for _ in range(200)} == {("\u03c3" + "a" * 61,)}
