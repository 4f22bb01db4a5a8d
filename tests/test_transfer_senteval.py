"""The `senteval` transfer protocol against SentEval's method, written out here as a plain loop.

The reference below follows SentEval's description (senteval/tools/classifier.py and validation.py, with the
classifier settings DeCLUTR and SimCSE used): one classifier at a time, torch.nn.Linear seeded by
torch.manual_seed, torch.optim.Adam with the penalty as weight decay, autograd on the mean cross-entropy,
numpy's generator seeded per classifier for the held-out 5% and every epoch's permutation, a copy of the model
at each better validation accuracy, and stopping once `tenacity` misses have been counted. The project trains
all fits of a scheme batched, with the gradient written out; the accuracies must be the same.
"""

import copy
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.model_selection import StratifiedKFold

from pipeline.evaluate.logreg import Settings
from pipeline.evaluate.transfer import score_transfer
from pipeline.readers.transfer import Examples, TransferTask

SEED = 1111
REGS = [1e-5, 1e-4, 1e-3, 1e-2]
FAST = Settings(
    max_epoch=16, tenacity=1
)  # SentEval's but for the epoch cap and tenacity: a quick reference loop that still stops early


def reference_fit(x, y, train, dev, reg, nclasses, settings=FAST, seed=SEED):
    """(best validation accuracy, the model that reached it) of one SentEval classifier."""
    rng = np.random.RandomState(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = torch.nn.Linear(x.shape[1], nclasses)
    if dev is None:
        permutation = rng.permutation(len(train))
        cut = int(settings.validation_split * len(train))
        train, dev = train[permutation[cut:]], train[permutation[:cut]]
    optimizer = torch.optim.Adam(model.parameters(), weight_decay=reg)
    xt, yt = torch.tensor(x[train], dtype=torch.float32), torch.tensor(y[train])
    xd, yd = torch.tensor(x[dev], dtype=torch.float32), torch.tensor(y[dev])
    best, best_model, misses, epoch, stop = -1.0, None, 0, 0, False
    while not stop and epoch <= settings.max_epoch:
        for _ in range(settings.epoch_size):
            permutation = rng.permutation(len(train))
            for i in range(0, len(train), settings.batch_size):
                idx = torch.from_numpy(permutation[i : i + settings.batch_size])
                loss = torch.nn.functional.cross_entropy(model(xt[idx]), yt[idx])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        epoch += settings.epoch_size
        with torch.no_grad():
            accuracy = int((model(xd).argmax(1) == yd).sum()) / len(dev)
        if accuracy > best:
            best, best_model = accuracy, copy.deepcopy(model)
        else:
            if misses >= settings.tenacity:
                stop = True
            misses += 1
    return best, best_model


def accuracy_of(model, x, y):
    with torch.no_grad():
        return int((model(torch.tensor(x, dtype=torch.float32)).argmax(1) == torch.tensor(y)).sum()) / len(y)


def folds(y, k):
    return list(StratifiedKFold(n_splits=k, shuffle=True, random_state=SEED).split(np.zeros(len(y)), y))


def pick(scores):
    """SentEval picks on accuracies in percent rounded to 2 decimals, the first of equals."""
    rounded = [round(100 * s, 2) for s in scores]
    return rounded.index(max(rounded))


def reference_kfold(x, y, nclasses, k):
    """KFoldClassifier: (dev, test model) -- the penalty by k-fold CV on train, each fold's classifier stopping early
    on the fold it is scored on, then one trained on all of train, stopping early on 5% of it."""
    scores = [np.mean([reference_fit(x, y, tr, te, reg, nclasses)[0] for tr, te in folds(y, k)]) for reg in REGS]
    best = pick(scores)
    return scores[best], reference_fit(x, y, np.arange(len(y)), None, REGS[best], nclasses)[1]


def reference_inner_kfold(x, y, nclasses, k):
    dev, test = [], []
    for tr, te in folds(y, k):
        score, model = reference_kfold(x[tr], y[tr], nclasses, k)
        dev.append(score)
        test.append(accuracy_of(model, x[te], y[te]))
    return np.mean(dev), np.mean(test)


def noisy_task(name, sizes, classes, dim, seed, signal=0.6):
    """Classes barely apart, so that the penalty, the epochs and the early stopping all matter."""
    rng = np.random.default_rng(seed)
    means = rng.normal(size=(classes, dim)) * signal
    splits, vectors = {}, {}
    for split, n in sizes.items():
        labels = rng.integers(0, classes, n)
        text = [f"{name}-{split}-{i}" for i in range(n)]
        vectors.update({s: (means[c] + rng.normal(size=dim)).astype(np.float32) for s, c in zip(text, labels)})
        splits[split] = Examples(text, None, labels)
    return TransferTask(name, Path("."), tuple("abcdef"[:classes]), splits), vectors


def matrix(vectors, ex):
    return np.stack([vectors[s] for s in ex.text])


def scored(task, vectors, k):
    rows = score_transfer(lambda s: np.stack([vectors[t] for t in s]), [task], k=k, settings=FAST)
    assert {r["protocol"] for r in rows} == {"senteval"}
    return {(r["split"], r["metric"]): r["value"] for r in rows}


def test_inner_kfold_is_sentevals():
    """MR, CR, SUBJ, MPQA: 3 outer folds, each with a 3-fold search over the penalties."""
    task, vectors = noisy_task("MR", {"all": 96}, 2, 6, seed=1)
    ex = task.splits["all"]
    dev, test = reference_inner_kfold(matrix(vectors, ex), ex.labels, 2, k=3)
    rows = scored(task, vectors, k=3)
    assert rows[("dev", "accuracy")] == pytest.approx(dev, abs=1e-9)
    assert rows[("test", "accuracy")] == pytest.approx(test, abs=1e-9)


def test_kfold_is_sentevals():
    """TREC: six classes, the penalty by 3-fold CV on train, scored on test."""
    task, vectors = noisy_task("TREC", {"train": 200, "test": 120}, 6, 8, seed=2, signal=1.0)
    train, test = task.splits["train"], task.splits["test"]
    dev, model = reference_kfold(matrix(vectors, train), train.labels, 6, k=3)
    rows = scored(task, vectors, k=3)
    assert rows[("dev", "accuracy")] == pytest.approx(dev, abs=1e-9)
    assert rows[("test", "accuracy")] == pytest.approx(accuracy_of(model, matrix(vectors, test), test.labels), abs=1e-9)


def test_split_is_sentevals():
    """SST2: every penalty trained on train and stopped on dev; the best on dev is scored on test."""
    task, vectors = noisy_task("SST2", {"train": 300, "dev": 80, "test": 100}, 2, 6, seed=3)
    train, dev_ex, test = (task.splits[s] for s in ("train", "dev", "test"))
    x = np.vstack([matrix(vectors, train), matrix(vectors, dev_ex)])
    y = np.concatenate([train.labels, dev_ex.labels])
    fits = [reference_fit(x, y, np.arange(300), 300 + np.arange(80), reg, 2) for reg in REGS]
    best = pick([f[0] for f in fits])
    rows = scored(task, vectors, k=3)
    assert rows[("dev", "accuracy")] == pytest.approx(fits[best][0], abs=1e-9)
    assert rows[("test", "accuracy")] == pytest.approx(
        accuracy_of(fits[best][1], matrix(vectors, test), test.labels), abs=1e-9
    )
