"""SentEval's transfer protocol: a linear classifier on frozen sentence embeddings.

Two classifiers, named in each score row's `protocol`:

- `senteval` (the default): SentEval's PyTorch logistic regression
  (`usepytorch=True`, nhid 0, Adam, batch 64, tenacity 5, epoch size 4; see
  pipeline.evaluate.logreg), the setting DeCLUTR's and SimCSE's tables were computed
  with. The L2 penalty is Adam's weight decay, picked from 10^-5..10^-2.
- `sklearn`: SentEval's `usepytorch=False` path, scikit-learn's
  LogisticRegression with C picked from 2^-2..2^3 (2^-1..2^5 for TREC and
  MRPC). It uses today's default solver (lbfgs); SentEval ran on releases whose
  default was liblinear, so it agrees with SentEval's to within what the
  optimiser changes, not digit for digit.

Both follow SentEval's three validation schemes, chosen by the splits a task has:

- no split (MR, CR, SUBJ, MPQA): 10-fold cross-validation; in each outer fold
  the penalty is picked by 10-fold cross-validation on the outer training part
  (InnerKFoldClassifier), then a classifier is trained on that whole part (the
  PyTorch one stopping early on 5% of it) and scored on the outer test fold;
- train and test (TREC, MRPC): the penalty picked by 10-fold cross-validation
  on train, then trained on all of train as above (KFoldClassifier);
- train, dev and test (SST2, SICK-E): the penalty picked on dev, which the
  PyTorch classifier also stops early on (SplitClassifier).

As in SentEval, the penalty is picked on accuracies rounded to 0.01% with ties
going to the first (smallest) penalty, the PyTorch classifier stops early on
the very fold it is then scored on while searching, the folds are stratified
and shuffled with the seed (SentEval's default, 1111, which its
InnerKFoldClassifier hard-codes), every classifier is seeded with it, and
sentence pairs become [|u-v|, u*v]. Samples come in SentEval's order
(pipeline.readers.transfer), which the folds depend on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import f1_score
from sklearn.model_selection import StratifiedKFold
from threadpoolctl import threadpool_limits

from pipeline.evaluate import resampled
from pipeline.evaluate.column import Column
from pipeline.evaluate.items import WHOLE, Items, fold
from pipeline.evaluate.kind import Kind, Task
from pipeline.evaluate.logreg import PAPERS, Fit, Settings, fit_many
from pipeline.readers.names import MRPC_BOTH
from pipeline.readers.transfer import TRANSFER_TASKS, Examples, TransferTask, find_transfer, transfer_data_hash

NAME = "transfer"  # the kind its leaderboard columns are of
PROTOCOLS = ("senteval", "sklearn")
AVERAGE_TASK, AVERAGE_PROTOCOL = "transfer", "declutr"
SEED = 1111
_INNER_GRID = _SPLIT_GRID = tuple(2.0**t for t in range(-2, 4))
_KFOLD_GRID = tuple(2.0**t for t in range(-1, 6))
_L2_GRID = tuple(10.0**t for t in range(-5, -1))
log = logging.getLogger("cpipe")
Predict = Callable[[np.ndarray], np.ndarray]
# Each outer fold's test predictions and labels.
Folds = list[tuple[np.ndarray, np.ndarray]]


def _pick(grid, scores) -> tuple[float, float]:
    """(penalty, score) with SentEval's rounding, so that near-ties go to the first (smallest) penalty."""
    best = int(np.argmax([round(100 * s, 2) for s in scores]))
    return grid[best], scores[best]


def _folds(y: np.ndarray, k: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    return list(StratifiedKFold(n_splits=k, shuffle=True, random_state=seed).split(np.zeros(len(y)), y))


class _Sklearn:
    """SentEval's usepytorch=False classifiers."""

    def __init__(self, k: int, seed: int):
        self.k, self.seed = k, seed

    def _classifier(self, c: float) -> LogisticRegression:
        # lbfgs's default 100 iterations stop short on unscaled embeddings, which
        # would make scores depend on the optimiser rather than the embeddings.
        return LogisticRegression(C=c, random_state=self.seed, max_iter=1000)

    def _accuracy(self, c, x_train, y_train, x_test, y_test) -> float:
        return float(self._classifier(c).fit(x_train, y_train).score(x_test, y_test))

    def _predict(self, c, x_train, y_train, x_test) -> np.ndarray:
        return self._classifier(c).fit(x_train, y_train).predict(x_test)

    def _cross_validate(self, grid, x, y) -> tuple[float, float]:
        folds = _folds(y, self.k, self.seed)
        return _pick(
            grid, [float(np.mean([self._accuracy(c, x[tr], y[tr], x[te], y[te]) for tr, te in folds])) for c in grid]
        )

    def inner_kfold(self, x, y, nclasses: int) -> tuple[float, Folds]:
        dev, test = [], []
        for tr, te in _folds(y, self.k, self.seed):
            c, score = self._cross_validate(_INNER_GRID, x[tr], y[tr])
            dev.append(score)
            test.append((self._predict(c, x[tr], y[tr], x[te]), y[te]))
        return float(np.mean(dev)), test

    def kfold(self, x, y, nclasses: int) -> tuple[float, float, Predict]:
        c, dev = self._cross_validate(_KFOLD_GRID, x, y)
        return c, dev, self._classifier(c).fit(x, y).predict

    def split(self, x, y, x_dev, y_dev, nclasses: int) -> tuple[float, float, Predict]:
        c, dev = _pick(_SPLIT_GRID, [self._accuracy(c, x, y, x_dev, y_dev) for c in _SPLIT_GRID])
        return c, dev, self._classifier(c).fit(x, y).predict


class _SentEval:
    """SentEval's usepytorch=True classifiers, each scheme's fits trained together (pipeline.evaluate.logreg)."""

    def __init__(self, k: int, seed: int, settings: Settings):
        self.k, self.seed, self.settings = k, seed, settings

    def _fit(self, x, y, fits: list[Fit], nclasses: int):
        return fit_many(x, y, fits, nclasses, self.seed, self.settings)

    def _final(self, x, y, rows: np.ndarray, reg: float, nclasses: int):
        return self._fit(x, y, [Fit(rows, None, (reg,))], nclasses)[0]

    def _pick_cv(self, fitted) -> tuple[int, float]:
        scores = np.mean([f.dev_accuracy for f in fitted], axis=0)
        best = int(np.argmax([round(100 * s, 2) for s in scores]))
        return best, float(scores[best])

    def inner_kfold(self, x, y, nclasses: int) -> tuple[float, Folds]:
        outer = _folds(y, self.k, self.seed)
        inner = [[Fit(tr[a], tr[b], _L2_GRID) for a, b in _folds(y[tr], self.k, self.seed)] for tr, _ in outer]
        fitted = self._fit(x, y, [f for fits in inner for f in fits], nclasses)
        picks = [self._pick_cv(fitted[i * self.k : (i + 1) * self.k]) for i in range(len(outer))]
        finals = self._fit(
            x, y, [Fit(tr, None, (_L2_GRID[best],)) for (tr, _), (best, _) in zip(outer, picks)], nclasses
        )
        test = [(final.predict(x[te], 0), y[te]) for final, (_, te) in zip(finals, outer)]
        return float(np.mean([score for _, score in picks])), test

    def kfold(self, x, y, nclasses: int) -> tuple[float, float, Predict]:
        rows = np.arange(len(y))
        fitted = self._fit(x, y, [Fit(tr, te, _L2_GRID) for tr, te in _folds(y, self.k, self.seed)], nclasses)
        best, dev = self._pick_cv(fitted)
        final = self._final(x, y, rows, _L2_GRID[best], nclasses)
        return _L2_GRID[best], dev, lambda x_test: final.predict(x_test, 0)

    def split(self, x, y, x_dev, y_dev, nclasses: int) -> tuple[float, float, Predict]:
        # SentEval trains the picked penalty's classifier again, seeded and stopped on dev as before: the same model.
        both, n = np.vstack([x, x_dev]), len(y)
        [fitted] = self._fit(
            both, np.concatenate([y, y_dev]), [Fit(np.arange(n), n + np.arange(len(y_dev)), _L2_GRID)], nclasses
        )
        best, dev = self._pick_cv([fitted])
        return _L2_GRID[best], dev, lambda x_test: fitted.predict(x_test, best)


def _features(task: TransferTask, encode: Callable[[list[str]], np.ndarray]) -> dict[str, np.ndarray]:
    # Pairs share sentences (SICK especially); embed each distinct sentence once.
    index: dict[str, int] = {}
    for ex in task.splits.values():
        for sentence in (*ex.text, *(ex.pair or ())):
            index.setdefault(sentence, len(index))
    emb = np.asarray(encode(list(index)), dtype=np.float64)
    if emb.ndim != 2 or emb.shape[0] != len(index):
        raise ValueError(f"encode returned shape {emb.shape} for {len(index)} sentences")

    def split_features(ex: Examples) -> np.ndarray:
        u = emb[[index[s] for s in ex.text]]
        if ex.pair is None:
            return u
        v = emb[[index[s] for s in ex.pair]]
        return np.hstack([np.abs(u - v), u * v])

    return {name: split_features(ex) for name, ex in task.splits.items()}


def _row(task: str, split: str, metric: str, protocol: str, value: float, n: int) -> dict:
    return {
        "task": task,
        "subset": "all",
        "split": split,
        "metric": metric,
        "protocol": protocol,
        "value": float(value),
        "n": int(n),
    }


def _score_task(
    task: TransferTask, x: dict[str, np.ndarray], protocol: str, classifiers, items: list[Items] | None
) -> list[dict]:
    y = {name: ex.labels for name, ex in task.splits.items()}
    nclasses = len(task.classes)

    def row(split: str, metric: str, value: float, n: int) -> dict:
        return _row(task.name, split, metric, protocol, value, n)

    def keep(stratum: str, predicted: np.ndarray, labels: np.ndarray) -> None:
        if items is not None:
            items.append(Items(task.name, protocol, stratum, predicted, labels))

    if set(y) == {"all"}:
        dev, folds = classifiers.inner_kfold(x["all"], y["all"], nclasses)
        for i, (predicted, labels) in enumerate(folds):
            keep(fold(i), predicted, labels)
        # SentEval's test accuracy: the mean of the outer folds' accuracies.
        test = float(np.mean([np.mean(predicted == labels) for predicted, labels in folds]))
        log.info("transfer: %s (%s) dev accuracy %.4f, test %.4f", task.name, protocol, dev, test)
        return [row("dev", "accuracy", dev, len(y["all"])), row("test", "accuracy", test, len(y["all"]))]
    if "dev" in y:
        penalty, dev, predict = classifiers.split(x["train"], y["train"], x["dev"], y["dev"], nclasses)
        n_dev = len(y["dev"])
    else:
        penalty, dev, predict = classifiers.kfold(x["train"], y["train"], nclasses)
        n_dev = len(y["train"])
    log.info("transfer: %s (%s) penalty %g dev accuracy %.4f", task.name, protocol, penalty, dev)
    predicted = predict(x["test"])
    keep(WHOLE, predicted, y["test"])
    accuracy = float(np.mean(predicted == y["test"]))
    n_test = len(y["test"])
    rows = [row("dev", "accuracy", dev, n_dev), row("test", "accuracy", accuracy, n_test)]
    if task.name == "MRPC":
        f1 = f1_score(y["test"], predicted)
        rows += [row("test", "f1", f1, n_test), row("test", "accuracy_f1_mean", (accuracy + f1) / 2, n_test)]
    return rows


def score_transfer(
    encode: Callable[[list[str]], np.ndarray],
    tasks: list[TransferTask],
    seed: int = SEED,
    k: int = 10,
    protocol: str = "senteval",
    settings: Settings = PAPERS,
    items: list[Items] | None = None,
) -> list[dict]:
    """Score rows (task, subset="all", split, metric, protocol, value, n) for each task.

    `protocol` is "senteval" (SentEval's PyTorch classifier, with `settings`)
    or "sklearn" (scikit-learn's logistic regression).
    Accuracies are fractions in [0, 1]. Split "test" is the score a paper
    reports; split "dev" is the accuracy the penalty was picked on (inner or
    train cross-validation, or the dev set). For cross-validated tasks n is the
    whole task, otherwise the size of the split. MRPC adds "f1" (paraphrase as
    the positive class) and "accuracy_f1_mean". Given `items`, appends each
    task's test predictions and labels, per outer fold for the cross-validated
    tasks (pipeline.evaluate.items).
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"transfer protocol {protocol!r} is not one of {', '.join(PROTOCOLS)}")
    classifiers = _SentEval(k, seed, settings) if protocol == "senteval" else _Sklearn(k, seed)
    rows: list[dict] = []
    for task in tasks:
        x = _features(task, encode)
        # Hundreds of small fits: a multi-threaded BLAS only adds overhead, and on
        # a busy 2-core machine it made one fit 50 times slower than one thread.
        with threadpool_limits(limits=1):
            rows += _score_task(task, x, protocol, classifiers, items)
    return rows


def averages(rows: list[dict]) -> list[dict]:
    """The transfer average of one model's rows, per split, as DeCLUTR reports it.

    Our reading of DeCLUTR's supplementary 3.2, which its scripts/run_senteval.py
    implements: a plain, unweighted mean over tasks of each task's accuracy,
    except MRPC, which counts once, as the mean of its accuracy and F1 on test
    (dev has no F1, so there MRPC counts with its dev accuracy). That script's
    "downstream" number also folds in the STS tasks and SST5; this average is
    over the transfer tasks only, and over the `senteval` protocol's rows, as
    DeCLUTR ran it. Only the tasks of TRANSFER_TASKS present in `rows` are
    averaged and n is their number, so a partial average shows.
    """
    out = []
    for split in ("test", "dev"):
        per_task = {
            r["task"]: r["value"]
            for r in rows
            if r["task"] in TRANSFER_TASKS
            and r["split"] == split
            and r["protocol"] == "senteval"
            and r["metric"] == ("accuracy_f1_mean" if (r["task"], split) == ("MRPC", "test") else "accuracy")
        }
        if per_task:
            out.append(
                {
                    "task": AVERAGE_TASK,
                    "subset": "all",
                    "split": split,
                    "metric": "accuracy",
                    "protocol": AVERAGE_PROTOCOL,
                    "value": float(np.mean(list(per_task.values()))),
                    "n": len(per_task),
                }
            )
    return out


def columns(task: str, protocol: str) -> list[Column]:
    """A transfer task's leaderboard columns under one protocol, each recomputed by the bootstrap from the test items
    kept under that protocol (pipeline.leaderboard.intervals): its accuracy ("MR senteval"), and MRPC's F1 ("MRPC F1
    senteval") and the mean of the two, by which DeCLUTR's averages count MRPC ("MRPC accuracy+F1 senteval", a part
    of averages and no column of its own)."""
    accuracy = Column(task, NAME, "accuracy", protocol, form="{task} {protocol}", statistic=resampled.mean_accuracy)
    if task != "MRPC":
        return [accuracy]
    return [
        accuracy,
        Column(task, NAME, "f1", protocol, form="{task} F1 {protocol}", statistic=resampled.pooled_f1),
        Column(task, NAME, "accuracy_f1", protocol, form=f"{MRPC_BOTH} {{protocol}}", statistic=resampled.accuracy_f1),
    ]


def averaged(task: str, protocol: str) -> Column:
    """The column by which the transfer average counts a task: its accuracy, MRPC's mean of accuracy and F1."""
    return columns(task, protocol)[-1]


# The transfer tasks as a kind (pipeline.evaluate.kind): its tasks SentEval's classification tasks found below the
# data (pipeline.readers.transfer), a task holding its TransferTask; on with evaluate.transfer, scored under
# evaluate.kfold and evaluate.transfer_protocol, and averaged once every task is back.
UNSCORED = "train"  # the classifiers are fitted on it and no score is taken there


def search(data_dir: Path, before: Mapping[str, list[Task]]) -> tuple[list[Task], list[str]]:
    found, absent = find_transfer(data_dir)
    return [Task(NAME, t.name, (), t) for t in found], absent


def find(data_dir: Path) -> list[Task]:
    return search(data_dir, {})[0]


def score(task: Task, embed, seed: int, kfold: int, transfer_protocol: str) -> list[dict]:
    """score_transfer of one task; each task seeds its folds and classifiers itself, never by its place in the run."""
    return score_transfer(
        embed, [task.data], seed=seed, k=kfold, protocol=transfer_protocol, items=getattr(embed, "items", None)
    )


def texts(task: TransferTask) -> Iterator[str]:
    """What decontamination indexes: every split but train, dev too (a penalty picked on it has seen it)."""
    for split, ex in task.splits.items():
        if split != UNSCORED:
            yield from ex.text
            yield from ex.pair or []


def fingerprint(found: list[Task]) -> str:
    return transfer_data_hash([t.data for t in found])


KIND = Kind(
    name=NAME,
    find=find,
    score=score,
    texts=texts,
    statistic=resampled.mean_accuracy,
    columns=lambda task: [c for protocol in PROTOCOLS for c in columns(task, protocol)],
    switch="transfer",
    settings=("kfold", "transfer_protocol"),
    search=search,
    fingerprint=fingerprint,
    summary=averages,
)
