"""BERT-whitening and the flow-style transform: the maths, save/load, seeding, and wrapping an encoder."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pipeline.baselines.postprocess import FLOW_CONFIG, Flow, PostProcessed, Whitening, fit_flow, fit_whitening, load
from pipeline.baselines.vectors import RandomEncoder
from pipeline.errors import InputError

# Small enough for a few seconds per fit on 2 busy cores.
FLOW = {"steps": 150, "layers": 3, "hidden": 32}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def anisotropy(x: np.ndarray) -> float:
    """Mean cosine similarity over pairs of distinct rows."""
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    total = u.sum(axis=0)
    return float((total @ total - len(u)) / (len(u) * (len(u) - 1)))


def log_likelihood(flow: Flow, x: np.ndarray) -> float:
    """Mean log-density of x's rows in nats per dimension by the change of variables, log N(z; 0, I) +
    log|det dz/dx|, with the Jacobian taken by autograd (each row maps on its own, so one gradient of
    an output column's sum gives that column's derivatives for every row)."""
    x = torch.as_tensor(x).requires_grad_()
    z = x
    for step in flow.steps:
        z = step(z)[0]
    dim = z.shape[1]
    jacobian = torch.stack([torch.autograd.grad(z[:, j].sum(), x, retain_graph=True)[0] for j in range(dim)], dim=1)
    log_density = -0.5 * (z**2).sum(1) - 0.5 * dim * math.log(2 * math.pi) + torch.linalg.slogdet(jacobian)[1]
    return float(log_density.detach().mean()) / dim


@pytest.fixture(scope="module")
def cone() -> np.ndarray:
    """Correlated Gaussian data, bent non-linearly and pushed off the origin: every row in a narrow cone."""
    rng = np.random.default_rng(0)
    dim = 12
    rotation = np.linalg.qr(rng.standard_normal((dim, dim)))[0]
    x = (rng.standard_normal((1000, dim)) * np.geomspace(1, 0.02, dim)) @ rotation.T
    x = x + 0.5 * np.tanh(2 * x[:, :1]) * x
    return (x + 3 * rotation[:, 0] + 2).astype(np.float32)


@pytest.fixture(scope="module")
def flow(cone) -> Flow:
    return Flow.fit(cone, seed=0, **FLOW)


def test_whitening_gives_zero_mean_and_identity_covariance(cone):
    y = Whitening.fit(cone)(cone)
    assert y.dtype == np.float32 and y.shape == cone.shape
    np.testing.assert_allclose(y.mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(np.cov(y.T), np.eye(cone.shape[1]), atol=1e-4)


def test_whitening_keeps_the_top_k_directions(cone):
    w = Whitening.fit(cone, k=4)
    y = w(cone)
    assert y.shape == (len(cone), 4) and w.parameters == cone.shape[1] * 5
    np.testing.assert_allclose(np.cov(y.T), np.eye(4), atol=1e-4)
    # The kept directions are the leading principal ones: their whitened projection is the full one's first columns.
    np.testing.assert_allclose(y, Whitening.fit(cone)(cone)[:, :4], atol=1e-4)


def test_whitening_is_the_formula_on_a_hand_built_example():
    # Points (+-2, 0) and (0, +-1) around (1, 1): covariance diag(8/3, 2/3) (n - 1 = 3), principal axes x then y.
    x = np.array([[3, 1], [-1, 1], [1, 2], [1, 0]], dtype=np.float64)
    w = Whitening.fit(x)
    np.testing.assert_allclose(w.mu, [1, 1])
    np.testing.assert_allclose(np.abs(w.kernel), np.diag([np.sqrt(3 / 8), np.sqrt(3 / 2)]), atol=1e-12)
    np.testing.assert_allclose(np.abs(w(np.array([[3.0, 2.0]]))), [[2 * np.sqrt(3 / 8), np.sqrt(3 / 2)]], rtol=1e-6)
    np.testing.assert_allclose(np.abs(Whitening.fit(x, k=1)(x)), [[np.sqrt(1.5)], [np.sqrt(1.5)], [0], [0]], atol=1e-6)


def test_whitening_refuses_what_it_cannot_whiten():
    with pytest.raises(InputError, match="at least 2"):
        Whitening.fit(np.ones((1, 3)))
    with pytest.raises(InputError, match="k=4"):
        Whitening.fit(np.eye(3), k=4)
    # Three points span a plane: a third whitened direction would be rounding noise scaled up.
    with pytest.raises(InputError, match="span only 2"):
        Whitening.fit(np.eye(3))
    assert Whitening.fit(np.eye(3), k=2)(np.eye(3)).shape == (3, 2)


def test_saved_transforms_load_exactly(tmp_path, cone, flow):
    whitening = Whitening.fit(cone, k=5)
    whitening.save(tmp_path / "w")
    flow.save(tmp_path / "f")
    assert isinstance(load(tmp_path / "w"), Whitening) and isinstance(load(tmp_path / "f"), Flow)
    np.testing.assert_array_equal(load(tmp_path / "w")(cone), whitening(cone))
    np.testing.assert_array_equal(load(tmp_path / "f")(cone), flow(cone))
    with pytest.raises(InputError, match="not a saved post-processing"):
        load(tmp_path)
    (tmp_path / "f" / FLOW_CONFIG).write_text('{"dim": 12, "layers": 3}')
    with pytest.raises(InputError, match=rf"{FLOW_CONFIG}: no 'hidden' key"):
        load(tmp_path / "f")


def test_flow_raises_the_likelihood_and_makes_the_data_isotropic(cone, flow):
    untrained = Flow.fit(cone, seed=0, **{**FLOW, "steps": 0})
    assert log_likelihood(flow, cone) > log_likelihood(untrained, cone) + 0.3
    z = flow(cone)
    assert anisotropy(cone) > 0.9 and abs(anisotropy(z)) < 0.01
    assert np.linalg.cond(np.cov(cone.T)) > 1000 and np.linalg.cond(np.cov(z.T)) < 5
    # ActNorm's init alone centres the data (so anisotropy is gone already) but leaves it correlated.
    assert np.linalg.cond(np.cov(untrained(cone).T)) > 100
    np.testing.assert_allclose(z.mean(axis=0), 0, atol=0.1)


def test_flow_is_invertible(cone, flow):
    np.testing.assert_allclose(flow.inverse(flow(cone)), cone, atol=1e-4)


def test_seeded_flow_fits_are_identical(cone, flow):
    np.testing.assert_array_equal(Flow.fit(cone, seed=0, **FLOW)(cone), flow(cone))
    assert not np.array_equal(Flow.fit(cone, seed=1, **FLOW)(cone), flow(cone))


def sentences(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(40)]
    return [" ".join(rng.choice(words, size=rng.integers(3, 10))) for _ in range(n)]


def test_post_processed_wraps_any_encoder():
    encoder = RandomEncoder(dim=16, seed=0)
    corpus, test = sentences(400, seed=0), sentences(50, seed=1)
    whitening = fit_whitening(encoder, corpus, k=8)
    np.testing.assert_allclose(np.cov(whitening(encoder.encode(corpus)).T), np.eye(8), atol=1e-4)
    flow = fit_flow(encoder, corpus, seed=0, **FLOW)
    for transform in (whitening, flow):
        wrapped = PostProcessed(encoder, transform)
        np.testing.assert_array_equal(wrapped.encode(test, batch_size=7), transform(encoder.encode(test)))
        assert wrapped.parameters == transform.parameters > 0
