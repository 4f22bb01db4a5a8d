"""Decontamination finds evaluation text as people write it (issue 38, item 5): SentEval's pre-tokenized STS
sentences (" ." endings, "don ' t", "it ' s"), WikiText's raw spacing ("well @-@ known", "1 @,@ 250") and running
text (punctuation glued, typographic apostrophes, either contraction spelling) all match each other, anywhere in a
document; "do not" is not "don't". The documents, the evaluation file and which documents go are written out here."""

from __future__ import annotations

import pyarrow as pa
import pytest

from pipeline.decontaminate.match import masked, word_spans
from pipeline.decontaminate.ngrams import word_lists
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
