"""Decontamination's recall: how many evaluation sentences, pasted into a document as people write them, are found.

Each sentence of the shared evaluation data (every task decontamination indexes) with 8 or more words once
normalised (so indexed whole or by 13-grams) is put into a document four ways: as the evaluation file writes it (SentEval's tokenised text, " ." and
"don ' t" included) at the document's end and inside it, as running text inside it (punctuation glued, "don't",
"it's", brackets and quotes as typed, a capital first letter, a comma after), and the same with typographic apostrophes. The share found of
each, per task. Not a speed figure: run it on two checkouts to compare them (BENCHMARKS.md: before and after
issue 38's normalisation).

  CPIPE_SHARED_DATA=../shared/data .venv/bin/python -m bench.decontaminate_recall
"""

from __future__ import annotations

import argparse
import os
import re

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.decontaminate.evalsets import eval_texts
from pipeline.decontaminate.match import Matcher
from pipeline.decontaminate.ngrams import Index, word_lists

FILLER = "Rain fell on the quiet harbour while gulls circled over fishing boats and nets. " * 3


def running(sentence: str, apostrophe: str = "'") -> str:
    """A tokenised sentence as a person types it."""
    text = re.sub(r"-lrb-\s*", "(", re.sub(r"\s*-rrb-", ")", sentence.strip()))  # SST's Treebank brackets
    text = re.sub(r"``\s*|\s*''", '"', text)
    text = re.sub(r"\s+([.,!?;:%)])", r"\1", text)
    text = re.sub(r"(\w)(?: n't|n ' t)\b", r"\1n't", text)  # the Treebank's "do n't", STS-B's "don ' t"
    text = re.sub(r"(\w) ?' ?(s|re|ve|ll|d|m)\b", r"\1'\2", text)
    text = text.replace("'", apostrophe).rstrip(".!? ")
    return text[:1].upper() + text[1:] + ","


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--data", default=os.path.join(os.environ.get("CPIPE_SHARED_DATA", "../shared/data"), "eval"))
    args = p.parse_args()
    texts = eval_texts(args.data, True, [])  # every task's test (and dev) text, transfer tasks' too
    index = Index(n=13, min_words=8)
    for task, sentences in texts.items():
        index.add(task, sentences)
    matcher = Matcher(index)
    ways = {
        "file's spelling, at the end": lambda s: FILLER + s,
        "file's spelling, inside": lambda s: FILLER + s + " " + FILLER,
        "running text, inside": lambda s: FILLER + "He said: " + running(s) + " then left. " + FILLER,
        "running text, typographic": lambda s: FILLER + running(s, "\u2019") + " they wrote. " + FILLER,
    }
    print(f"{'task':6} {'sentences':>9}  " + "  ".join(f"{w:>28}" for w in ways))
    for task in texts:
        unique = sorted(set(texts[task]))
        lengths = pc.list_value_length(word_lists(pa.array(unique, pa.string()))).to_numpy(zero_copy_only=False)
        sentences = [s for s, n in zip(unique, lengths) if n >= index.min_words]  # those the index looks for
        found = []
        for make in ways.values():
            hits = matcher.find(pa.array([make(s) for s in sentences], pa.string()))
            found.append(sum(bool(h) for h in hits))
        print(f"{task:6} {len(sentences):>9}  " + "  ".join(f"{f:>20} ({f / len(sentences):5.1%})" for f in found))


if __name__ == "__main__":
    main()
