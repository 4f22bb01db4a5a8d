"""SentEval's PyTorch logistic regression, many fits trained side by side.

This is the classifier DeCLUTR and SimCSE ran SentEval with (`usepytorch=True`,
classifier `{nhid: 0, optim: adam, batch_size: 64, tenacity: 5, epoch_size: 4}`),
as senteval/tools/classifier.py trains it:

- one linear layer, initialised as torch.nn.Linear is right after
  torch.manual_seed(seed); mean cross-entropy; torch.optim.Adam with its
  defaults and the L2 penalty as its (coupled) weight decay on weight and bias;
- numpy's global generator seeded with `seed` when the classifier is built;
  with SentEval's validation_split, its first permutation holds out the first
  int(split * n) rows for early stopping, and every epoch then draws a
  permutation of the training rows for its minibatches of 64;
- every `epoch_size` epochs, accuracy on the validation rows: a better one keeps
  a copy of the model, anything else counts towards `tenacity` (SentEval never
  resets that count), and training stops when the count already stands at
  `tenacity`, or after `max_epoch` epochs; the copy with the best accuracy is
  the result.

SentEval trains its fits one after another. Here every fit of a validation
scheme (all inner folds of all outer folds, times every L2 penalty) is one
slice of a batched tensor and all train in one loop: each slice sees exactly
its own minibatches and its own Adam state, so the result is SentEval's up to
float32 rounding in the batched products. The gradient of the mean
cross-entropy is written out, (softmax - one-hot) / batch size, instead of
built by autograd: the loop is then a dozen tensor operations per step.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from pipeline.progress import Progress


@dataclass(frozen=True)
class Settings:
    """SentEval's defaults for the MLP classifier, the ones the papers used."""

    batch_size: int = 64
    tenacity: int = 5
    epoch_size: int = 4
    max_epoch: int = 200
    validation_split: float = 0.05  # the held-out share when a fit is given no validation rows
    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8


PAPERS = Settings()


@dataclass(frozen=True)
class Fit:
    """One SentEval classifier per L2 penalty, all on the same rows.

    `train` and `dev` are row numbers of the features, in the order SentEval's
    classifier is given them (it matters: the permutations index that order).
    With dev None, SentEval's validation_split of train is held out instead.
    """

    train: np.ndarray
    dev: np.ndarray | None
    regs: tuple[float, ...]


@dataclass(frozen=True)
class Fitted:
    """Per penalty: the best validation accuracy, and the model that reached it."""

    dev_accuracy: np.ndarray  # (R,)
    weight: np.ndarray  # (R, d, C)
    bias: np.ndarray  # (R, C)

    def predict(self, x: np.ndarray, reg: int) -> np.ndarray:
        logits = torch.from_numpy(np.asarray(x, dtype=np.float32)) @ torch.from_numpy(self.weight[reg])
        return (logits + torch.from_numpy(self.bias[reg])).argmax(1).numpy()

    def accuracy(self, x: np.ndarray, y: np.ndarray, reg: int) -> float:
        return float(np.mean(self.predict(x, reg) == y))


@contextmanager
def one_thread() -> Iterator[None]:
    """Thousands of tiny products: more threads only add overhead, and one keeps the sums' order fixed."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def fit_many(
    x: np.ndarray, y: np.ndarray, fits: list[Fit], nclasses: int, seed: int, settings: Settings = PAPERS
) -> list[Fitted]:
    """Train every fit's classifiers as SentEval would, one by one, each seeded with `seed`."""
    if len({len(f.regs) for f in fits}) > 1:
        raise ValueError("every fit of one batch must have the same number of penalties")
    features = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    labels = torch.from_numpy(np.asarray(y, dtype=np.int64))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layer = torch.nn.Linear(features.shape[1], nclasses)
    init = (layer.weight.detach().T.contiguous(), layer.bias.detach().clone())
    jobs = [_Job.prepare(f, seed, settings) for f in fits]
    out: list[Fitted | None] = [None] * len(jobs)
    with one_thread(), torch.no_grad():
        # One loop per number of minibatches an epoch has, so that all of a loop's fits take Adam steps together.
        for steps in sorted({job.steps(settings.batch_size) for job in jobs}):
            members = [i for i, job in enumerate(jobs) if job.steps(settings.batch_size) == steps]
            for i, fitted in zip(members, _train([jobs[i] for i in members], features, labels, init, settings)):
                out[i] = fitted
    return out


@dataclass
class _Job:
    train: np.ndarray
    dev: np.ndarray
    regs: tuple[float, ...]
    rng: np.random.RandomState

    @classmethod
    def prepare(cls, fit: Fit, seed: int, settings: Settings) -> _Job:
        rng = np.random.RandomState(seed)
        train, dev = np.asarray(fit.train), fit.dev
        if dev is None:
            permutation = rng.permutation(len(train))
            cut = int(settings.validation_split * len(train))
            train, dev = train[permutation[cut:]], train[permutation[:cut]]
        if len(dev) == 0:
            raise ValueError(f"a classifier fit on {len(train)} rows has no rows to stop early on")
        return cls(train, np.asarray(dev), fit.regs, rng)

    def steps(self, batch_size: int) -> int:
        return math.ceil(len(self.train) / batch_size)


def _padded(rows: list[np.ndarray], width: int) -> torch.Tensor:
    """Row numbers, one fit a row, padded with -1."""
    out = np.full((len(rows), width), -1, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return torch.from_numpy(out)


class _Adam:
    """torch.optim.Adam's update (single-tensor path, weight decay added to the gradient), on a stack of models."""

    def __init__(self, param: torch.Tensor, decay: torch.Tensor, settings: Settings):
        self.param, self.decay, self.s = param, decay, settings
        self.m, self.v = torch.zeros_like(param), torch.zeros_like(param)
        self.t = 0

    def step(self, grad: torch.Tensor) -> None:
        self.t += 1
        (beta1, beta2), eps, lr = self.s.betas, self.s.eps, self.s.lr
        bias1, bias2 = 1 - beta1**self.t, 1 - beta2**self.t
        grad = grad.add_(self.decay * self.param)
        self.m.lerp_(grad, 1 - beta1)
        self.v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        denom = (self.v.sqrt() / math.sqrt(bias2)).add_(eps)
        self.param.addcdiv_(self.m, denom, value=-lr / bias1)

    def keep(self, alive: torch.Tensor) -> None:
        self.param, self.m, self.v, self.decay = self.param[alive], self.m[alive], self.v[alive], self.decay[alive]


def _train(
    jobs: list[_Job], x: torch.Tensor, y: torch.Tensor, init: tuple[torch.Tensor, torch.Tensor], s: Settings
) -> list[Fitted]:
    n_fits, n_regs, n_classes = len(jobs), len(jobs[0].regs), init[1].numel()
    # The bias is the weight of a constant feature (both get the weight decay, as in SentEval), and a fit's
    # models sit side by side in the last dimension: column r * C + c is penalty r's class c.
    x = torch.cat([x, torch.ones(len(x), 1)], dim=1)
    params = torch.cat([init[0], init[1].unsqueeze(0)]).repeat(1, n_regs).expand(n_fits, -1, -1).clone()
    decay = torch.tensor(
        [[r for r in job.regs for _ in range(n_classes)] for job in jobs], dtype=torch.float32
    ).unsqueeze(1)
    adam = _Adam(params, decay, s)
    dev = _padded([job.dev for job in jobs], max(len(job.dev) for job in jobs))
    dev_n = torch.tensor([len(job.dev) for job in jobs])
    best = torch.full((n_fits, n_regs), -1, dtype=torch.int64)
    best_params = params.clone()
    misses = torch.zeros((n_fits, n_regs), dtype=torch.int64)
    stopped = torch.zeros((n_fits, n_regs), dtype=torch.bool)
    alive = torch.arange(n_fits)  # the fits still in the working tensors
    width = jobs[0].steps(s.batch_size) * s.batch_size
    epoch, most = 0, (s.max_epoch // s.epoch_size + 1) * s.epoch_size  # the last round starts at max_epoch
    with Progress("classifiers (stop early)", most, "epochs") as progress:
        while epoch <= s.max_epoch and not bool(stopped.all()):
            for _ in range(s.epoch_size):
                order = _padded(
                    [jobs[i].train[jobs[i].rng.permutation(len(jobs[i].train))] for i in alive.tolist()], width
                )
                _epoch(adam, x, y, order, n_regs, n_classes, s.batch_size)
            epoch += s.epoch_size
            progress.update(s.epoch_size)
            rows = dev[alive]
            logits = torch.bmm(x[rows.clamp(min=0)], adam.param).view(len(alive), -1, n_regs, n_classes)
            hits = (logits.argmax(-1) == y[rows.clamp(min=0)].unsqueeze(-1)) & (rows >= 0).unsqueeze(-1)
            correct, active = hits.sum(1), ~stopped[alive]
            improved = (correct > best[alive]) & active
            missed = ~improved & active
            best[alive] = torch.where(improved, correct, best[alive])
            best_params[alive] = torch.where(
                improved.repeat_interleave(n_classes, dim=1).unsqueeze(1), adam.param, best_params[alive]
            )
            stopped[alive] |= missed & (misses[alive] >= s.tenacity)
            misses[alive] += missed.long()
            running = ~stopped[alive].all(1)
            if not bool(running.all()):
                alive = alive[running]
                adam.keep(running)
    accuracy = best.double() / dev_n.unsqueeze(1).double()
    models = best_params.view(n_fits, -1, n_regs, n_classes).permute(0, 2, 1, 3).numpy()
    return [Fitted(accuracy[i].numpy(), models[i, :, :-1].copy(), models[i, :, -1].copy()) for i in range(n_fits)]


def _epoch(
    adam: _Adam, x: torch.Tensor, y: torch.Tensor, order: torch.Tensor, n_regs: int, n_classes: int, batch_size: int
) -> None:
    """One pass of every model over its fit's rows in `order` (-1 pads a shorter last minibatch), one Adam step
    per minibatch on the gradient of its mean cross-entropy, (softmax - one-hot) / batch size."""
    n_fits, width = order.shape
    valid = order >= 0
    xs = x[order.clamp(min=0)]
    sizes = valid.view(n_fits, -1, batch_size).sum(2, keepdim=True).float()
    scale = (valid.view(n_fits, -1, batch_size) / sizes).view(n_fits, width, 1, 1)
    target = (
        torch.zeros(n_fits, width, 1, n_classes).scatter_(-1, y[order.clamp(min=0)].view(n_fits, width, 1, 1), 1.0)
        * scale
    )
    for start in range(0, width, batch_size):
        step = slice(start, start + batch_size)
        xb = xs[:, step]
        probs = torch.bmm(xb, adam.param).view(n_fits, -1, n_regs, n_classes).softmax(-1)
        dz = (probs * scale[:, step]).sub_(target[:, step]).view(n_fits, -1, n_regs * n_classes)
        adam.step(xb.transpose(1, 2) @ dz)
