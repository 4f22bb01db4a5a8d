import math

import pytest
import torch

from pipeline.losses import mask_tokens, nt_xent, slanted_triangular


def nt_xent_loop(anchors, positives, tau):
    """The paper's formula written out: for each of the 2N embeddings, -log of its positive's share."""
    z = torch.cat([anchors, positives])
    n = anchors.size(0)

    def sim(u, v):
        return torch.dot(u, v) / (u.norm() * v.norm()) / tau

    total = 0.0
    for i in range(2 * n):
        j = i + n if i < n else i - n
        denominator = sum(math.exp(sim(z[i], z[k])) for k in range(2 * n) if k != i)
        total += -math.log(math.exp(sim(z[i], z[j])) / denominator)
    return total / (2 * n)


@pytest.mark.parametrize("n, dim, tau", [(2, 3, 0.05), (5, 8, 0.05), (4, 16, 1.0)])
def test_nt_xent_matches_the_loop(n, dim, tau):
    torch.manual_seed(n)
    a, p = torch.randn(n, dim, dtype=torch.float64), torch.randn(n, dim, dtype=torch.float64)
    assert nt_xent(a, p, tau).item() == pytest.approx(nt_xent_loop(a, p, tau), rel=1e-9)


def test_nt_xent_is_low_for_aligned_pairs_and_symmetric():
    torch.manual_seed(0)
    a = torch.randn(8, 16)
    assert nt_xent(a, a + 0.01 * torch.randn(8, 16), 0.05) < 0.01
    p = torch.randn(8, 16)
    assert nt_xent(a, p, 0.05).item() == pytest.approx(nt_xent(p, a, 0.05).item(), rel=1e-6)


def test_nt_xent_gradient_flows_to_both_sides():
    a = torch.randn(4, 8, requires_grad=True)
    p = torch.randn(4, 8, requires_grad=True)
    nt_xent(a, p, 0.05).backward()
    assert a.grad.abs().sum() > 0 and p.grad.abs().sum() > 0


def test_masking_follows_80_10_10_and_spares_unmaskable_tokens():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 1000, (200, 256), generator=g)
    maskable = torch.ones_like(ids, dtype=torch.bool)
    maskable[:, 0] = False
    corrupted, chosen = mask_tokens(ids, maskable, mask_id=4, vocab_size=1000, probability=0.15, generator=g)
    assert not chosen[:, 0].any()
    share = chosen.float().sum() / maskable.sum()
    assert share.item() == pytest.approx(0.15, abs=0.005)
    as_mask = (corrupted[chosen] == 4).float().mean().item()
    unchanged = (corrupted[chosen] == ids[chosen]).float().mean().item()
    assert as_mask == pytest.approx(0.8, abs=0.01)
    assert unchanged == pytest.approx(0.1, abs=0.01)  # random replacements rarely hit the same token
    assert torch.equal(corrupted[~chosen], ids[~chosen])


def test_slanted_triangular_rises_for_cut_fraction_then_decays():
    total, cut_frac, ratio = 1000, 0.1, 32
    lr = [slanted_triangular(t, total, cut_frac, ratio) for t in range(total)]
    assert lr[0] == pytest.approx(1 / ratio)
    assert max(lr) == pytest.approx(1.0) and lr.index(max(lr)) == 100
    assert all(x <= y for x, y in zip(lr[:100], lr[1:101]))
    assert all(x >= y for x, y in zip(lr[100:], lr[101:]))
    assert lr[-1] == pytest.approx(1 / ratio, abs=0.01)
