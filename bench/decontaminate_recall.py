"""Decontamination's recall: how many evaluation sentences, pasted into a document as people write them, are found.

Each STS sentence of the shared evaluation data with 8 or more words of letters or digits (so indexed whole or by
13-grams) is put into a document four ways: as the evaluation file writes it (SentEval's tokenised text, " ." and
"don ' t" included) at the document's end and inside it, as running text inside it (punctuation glued, "don't",
"it's", a capital first letter, a comma after), and the same with typographic apostrophes. The share found of
each, per task. Not a speed figure: run it on two checkouts to compare them (BENCHMARKS.md: before and after
issue 38's normalisation).

  CPIPE_SHARED_DATA=../shared/data .venv/bin/python -m bench.decontaminate_recall
"""

from __future__ import annotations

import argparse
import os
import re

import pyarrow as pa

from pipeline.decontaminate.evalsets import eval_texts
from pipeline.decontaminate.match import Matcher
from pipeline.decontaminate.ngrams import Index

FILLER = "Rain fell on the quiet harbour while gulls circled over fishing boats and nets. " * 3
TASKS = ("STSB", "STS12")


def running(sentence: str, apostrophe: str = "'") -> str:
    """A tokenised sentence as a person types it."""
    text = re.sub(r"\s+([.,!?;:%)])", r"\1", sentence.strip())
    text = re.sub(r"(\w)(?: n't|n ' t)\b", r"\1n't", text)  # the Treebank's "do n't", STS-B's "don ' t"
    text = re.sub(r"(\w) ?' ?(s|re|ve|ll|d|m)\b", r"\1'\2", text)
    text = text.replace("'", apostrophe).rstrip(".!? ")
    return text[:1].upper() + text[1:] + ","


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument(
        "--data", default=os.path.join(os.environ.get("CPIPE_SHARED_DATA", "../shared/data"), "eval/senteval")
    )
    args = p.parse_args()
    texts = eval_texts(args.data, False, [])
    index = Index(n=13, min_words=8)
    for task in TASKS:
        index.add(task, texts[task])
    matcher = Matcher(index)
    ways = {
        "file's spelling, at the end": lambda s: FILLER + s,
        "file's spelling, inside": lambda s: FILLER + s + " " + FILLER,
        "running text, inside": lambda s: FILLER + "He said: " + running(s) + " then left. " + FILLER,
        "running text, typographic": lambda s: FILLER + running(s, "\u2019") + " they wrote. " + FILLER,
    }
    print(f"{'task':6} {'sentences':>9}  " + "  ".join(f"{w:>28}" for w in ways))
    for task in TASKS:
        sentences = sorted({s for s in texts[task] if len(re.findall(r"\w+", s)) >= 8})
        found = []
        for make in ways.values():
            hits = matcher.find(pa.array([make(s) for s in sentences], pa.string()))
            found.append(sum(bool(h) for h in hits))
        print(f"{task:6} {len(sentences):>9}  " + "  ".join(f"{f:>20} ({f / len(sentences):5.1%})" for f in found))


if __name__ == "__main__":
    main()
