"""Post-processing baselines for any encoder: BERT-whitening and a BERT-flow-style normalising flow.

Whitening (Su et al., 2021) maps x to (x - mu) W[:, :k], with mu the mean and
W = U Lambda^-1/2 from the SVD of the covariance, so the fitted embeddings get
mean zero and identity covariance; k < dim keeps the top principal directions
(the paper's dimensionality reduction, e.g. 256).

The flow is "flow-style", not a reproduction of BERT-flow (Li et al., 2020):
like the paper it maps embeddings to a standard normal by maximum likelihood,
but with a few Glow steps on vectors (ActNorm, an LU-parametrised invertible
linear map for Glow's 1x1 convolution, an affine coupling) — far smaller than
the paper's Glow, and trained for a few hundred Adam steps on CPU. It is fitted
on the encoder's pooled sentence embedding, whereas the paper uses the average
of BERT's last two layers.

Both are fitted on unlabelled corpus sentences, never on the test sets; the
papers also report fits on the evaluation tasks' own (unlabelled) sentences,
so those rows are not comparable with ours.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch
from torch import nn

from pipeline.errors import InputError

WHITENING_FILE = "whitening.npz"
FLOW_CONFIG, FLOW_WEIGHTS = "flow.json", "flow.pt"


def _fitting_data(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or len(x) < 2:
        raise InputError(f"post-processing needs at least 2 fitting embeddings, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise InputError("post-processing: the fitting embeddings have a non-finite component")
    return x


def _check_dim(x: np.ndarray, dim: int) -> None:
    if x.ndim != 2 or x.shape[1] != dim:
        raise ValueError(f"post-processing was fitted on {dim}-dimensional embeddings, got shape {x.shape}")


class Whitening:
    def __init__(self, mu: np.ndarray, kernel: np.ndarray):
        self.mu, self.kernel = mu, kernel

    @classmethod
    def fit(cls, x: np.ndarray, k: int | None = None) -> Whitening:
        x = _fitting_data(x)
        k = x.shape[1] if k is None else k
        if not 1 <= k <= x.shape[1]:
            raise InputError(f"whitening: k={k} must be between 1 and the embedding dimension {x.shape[1]}")
        u, s, _ = np.linalg.svd(np.cov(x.T))
        # np.linalg.matrix_rank's tolerance: below it a variance is rounding noise, and 1/sqrt would blow it up.
        rank = int((s > s[0] * len(s) * np.finfo(np.float64).eps).sum())
        if rank < k:
            raise InputError(
                f"whitening: {len(x)} fitting embeddings span only {rank} of the {k} dimensions "
                "to keep; fit on more sentences or pass a smaller k"
            )
        return cls(x.mean(axis=0), u[:, :k] / np.sqrt(s[:k]))

    @property
    def parameters(self) -> int:
        return int(self.mu.size + self.kernel.size)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        _check_dim(x, len(self.mu))
        return ((np.asarray(x, dtype=np.float64) - self.mu) @ self.kernel).astype(np.float32)

    def save(self, path: str | Path) -> None:
        Path(path).mkdir(parents=True, exist_ok=True)
        np.savez(Path(path) / WHITENING_FILE, mu=self.mu, kernel=self.kernel)

    @classmethod
    def load(cls, path: str | Path) -> Whitening:
        file = Path(path) / WHITENING_FILE
        with np.load(file) as saved:
            missing = [key for key in ("mu", "kernel") if key not in saved]
            if missing:
                raise InputError(f"{file}: no {missing[0]!r} array")
            return cls(saved["mu"], saved["kernel"])


class _ActNorm(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.bias, self.log_scale = nn.Parameter(torch.zeros(dim)), nn.Parameter(torch.zeros(dim))

    @torch.no_grad()
    def initialise(self, x: torch.Tensor) -> None:
        # Glow's data-dependent init: the step starts by standardising what reaches it.
        self.bias.copy_(x.mean(0))
        self.log_scale.copy_(-torch.log(x.std(0) + 1e-6))

    def forward(self, x):
        return (x - self.bias) * self.log_scale.exp(), self.log_scale.sum().expand(len(x))

    def inverse(self, y):
        return y * (-self.log_scale).exp() + self.bias


class _InvertibleLinear(nn.Module):
    """W = P L (U + diag(sign * exp(log_s))) (Glow, section 3.2): log|det W| = sum(log_s), no O(d^3) slogdet."""

    def __init__(self, dim: int):
        super().__init__()
        p, lower, upper = torch.linalg.lu(torch.linalg.qr(torch.randn(dim, dim))[0])
        self.register_buffer("p", p)
        self.register_buffer("sign", torch.sign(torch.diagonal(upper)))
        self.register_buffer("rows_l", torch.tril_indices(dim, dim, -1), persistent=False)
        self.register_buffer("rows_u", torch.triu_indices(dim, dim, 1), persistent=False)
        # Only the free triangles are parameters, so `parameters` counts what is actually learnt.
        self.lower = nn.Parameter(lower[tuple(self.rows_l)])
        self.upper = nn.Parameter(upper[tuple(self.rows_u)])
        self.log_s = nn.Parameter(torch.diagonal(upper).abs().log())

    def weight(self) -> torch.Tensor:
        eye = torch.eye(len(self.log_s))
        lower = eye.index_put(tuple(self.rows_l), self.lower)
        upper = torch.diag(self.sign * self.log_s.exp()).index_put(tuple(self.rows_u), self.upper)
        return self.p @ lower @ upper

    def forward(self, x):
        return x @ self.weight().T, self.log_s.sum().expand(len(x))

    def inverse(self, y):
        return torch.linalg.solve(self.weight(), y.T).T


class _Coupling(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.half = dim // 2
        self.net = nn.Sequential(nn.Linear(self.half, hidden), nn.ReLU(), nn.Linear(hidden, 2 * (dim - self.half)))
        # Zero-initialised output, as in Glow: every coupling starts as the identity.
        nn.init.zeros_(self.net[-1].weight)
        nn.init.zeros_(self.net[-1].bias)

    def _scale_shift(self, a):
        log_s, t = self.net(a).chunk(2, dim=1)
        # A bounded log-scale keeps early steps from exploding the likelihood.
        return torch.tanh(log_s), t

    def forward(self, x):
        a, b = x[:, : self.half], x[:, self.half :]
        log_s, t = self._scale_shift(a)
        return torch.cat([a, b * log_s.exp() + t], dim=1), log_s.sum(1)

    def inverse(self, y):
        a, c = y[:, : self.half], y[:, self.half :]
        log_s, t = self._scale_shift(a)
        return torch.cat([a, (c - t) * (-log_s).exp()], dim=1)


class Flow:
    def __init__(self, dim: int, layers: int = 4, hidden: int = 256):
        self.shape = {"dim": dim, "layers": layers, "hidden": hidden}  # what `save` writes, `load` rebuilds from
        self.steps = nn.ModuleList(
            m for _ in range(layers) for m in (_ActNorm(dim), _InvertibleLinear(dim), _Coupling(dim, hidden))
        )

    @classmethod
    def fit(
        cls,
        x: np.ndarray,
        seed: int = 0,
        steps: int = 300,
        layers: int = 4,
        hidden: int = 256,
        lr: float = 1e-3,
        batch_size: int = 256,
    ) -> Flow:
        x = torch.from_numpy(_fitting_data(x).astype(np.float32))
        # A private RNG state: the fit is a function of the seed alone and leaves the caller's RNG untouched.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            flow = cls(x.shape[1], layers, hidden)
            with torch.no_grad():
                h = x
                for step in flow.steps:
                    if isinstance(step, _ActNorm):
                        step.initialise(h)
                    h = step(h)[0]
            optimizer = torch.optim.Adam(flow.steps.parameters(), lr=lr)
            for _ in range(steps):
                batch = x[torch.randint(len(x), (min(batch_size, len(x)),))]
                loss = -flow._log_prob(batch).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        return flow

    def _forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logdet = torch.zeros(len(x))
        for step in self.steps:
            x, ld = step(x)
            logdet = logdet + ld
        return x, logdet

    def _log_prob(self, x: torch.Tensor) -> torch.Tensor:
        z, logdet = self._forward(x)
        return -0.5 * (z**2).sum(1) - 0.5 * z.shape[1] * math.log(2 * math.pi) + logdet

    @property
    def parameters(self) -> int:
        return sum(p.numel() for p in self.steps.parameters())

    @torch.no_grad()
    def __call__(self, x: np.ndarray) -> np.ndarray:
        _check_dim(x, self.shape["dim"])
        return self._forward(torch.as_tensor(x, dtype=torch.float32))[0].numpy()

    @torch.no_grad()
    def inverse(self, z: np.ndarray) -> np.ndarray:
        _check_dim(z, self.shape["dim"])
        z = torch.as_tensor(z, dtype=torch.float32)
        for step in reversed(self.steps):
            z = step.inverse(z)
        return z.numpy()

    def save(self, path: str | Path) -> None:
        Path(path).mkdir(parents=True, exist_ok=True)
        (Path(path) / FLOW_CONFIG).write_text(json.dumps(self.shape))
        torch.save(self.steps.state_dict(), Path(path) / FLOW_WEIGHTS)

    @classmethod
    def load(cls, path: str | Path) -> Flow:
        file = Path(path) / FLOW_CONFIG
        try:
            shape = json.loads(file.read_text())
        except json.JSONDecodeError as err:
            raise InputError(f"{file}:{err.lineno}: not valid JSON") from None
        missing = [key for key in ("dim", "layers", "hidden") if key not in shape]
        if missing:
            raise InputError(f"{file}: no {missing[0]!r} key")
        with torch.random.fork_rng(devices=[]):  # the random init is overwritten; keep the caller's RNG as it was
            flow = cls(shape["dim"], shape["layers"], shape["hidden"])
        flow.steps.load_state_dict(torch.load(Path(path) / FLOW_WEIGHTS, weights_only=True))
        return flow


def load(path: str | Path) -> Whitening | Flow:
    """A transform saved by Whitening.save or Flow.save, told apart by the files in `path`."""
    if (Path(path) / WHITENING_FILE).is_file():
        return Whitening.load(path)
    if (Path(path) / FLOW_CONFIG).is_file():
        return Flow.load(path)
    raise InputError(f"{path}: not a saved post-processing (no {WHITENING_FILE} or {FLOW_CONFIG})")


class PostProcessed:
    """An encoder whose embeddings go through a fitted transform; pipeline.model.exported.Encoder's interface."""

    def __init__(self, encoder, transform: Whitening | Flow):
        self.encoder, self.transform = encoder, transform

    @property
    def parameters(self) -> int:
        return self.encoder.parameters + self.transform.parameters

    def encode(self, sentences: list[str], batch_size: int = 128) -> np.ndarray:
        return self.transform(self.encoder.encode(sentences, batch_size=batch_size))


def fit_whitening(encoder, sentences: list[str], k: int | None = None, batch_size: int = 128) -> Whitening:
    """Whitening fitted on `encoder`'s embeddings of `sentences` (corpus sentences, not test data)."""
    return Whitening.fit(encoder.encode(sentences, batch_size=batch_size), k)


def fit_flow(
    encoder,
    sentences: list[str],
    seed: int = 0,
    steps: int = 300,
    layers: int = 4,
    hidden: int = 256,
    lr: float = 1e-3,
    batch_size: int = 128,
) -> Flow:
    """A flow fitted on `encoder`'s embeddings of `sentences` (corpus sentences, not test data).

    `batch_size` is the encoder's; the flow's minibatches are 256 embeddings.
    """
    return Flow.fit(
        encoder.encode(sentences, batch_size=batch_size), seed=seed, steps=steps, layers=layers, hidden=hidden, lr=lr
    )
