"""The contrastive losses against loops over their papers' formulas, on hand-built tensors; BERT's masking;
the schedule. Each expectation is computed here, element by element, never by the code under test."""

import math

import pytest
import torch

from pipeline.train.losses import LOSSES, info_nce, mask_tokens, moco, nt_xent
from pipeline.train.optim import slanted_triangular


def cos(u, v):
    return (torch.dot(u, v) / (u.norm() * v.norm())).item()


def nt_xent_loop(anchors, positives, tau, bank=()):
    """SimCLR's NT-Xent (DeCLUTR eq. 2): for each of the 2N embeddings, -log of its partner's share among
    the other 2N-1; the anchors' rows also compete with the bank's entries."""
    z, n = torch.cat([anchors, positives]), anchors.size(0)
    total = 0.0
    for i in range(2 * n):
        j = i + n if i < n else i - n
        denominator = sum(math.exp(cos(z[i], z[k]) / tau) for k in range(2 * n) if k != i)
        if i < n:
            denominator += sum(math.exp(cos(z[i], m) / tau) for m in bank)
        total += -math.log(math.exp(cos(z[i], z[j]) / tau) / denominator)
    return total / (2 * n)


def cl_forward_loop(z1, z2, tau):
    """SimCSE's cl_forward: cos_sim[i][j] = cos(z1_i, z2_j) / temp; labels = arange(N); one cross-entropy."""
    n = z1.size(0)
    total = 0.0
    for i in range(n):
        logits = [cos(z1[i], z2[j]) / tau for j in range(n)]
        total += -(logits[i] - math.log(sum(math.exp(x) for x in logits)))
    return total / n


def moco_loop(q, k, queue, tau):
    """MoCo's builder.py: logits_i = [q_i.k_i, q_i.queue_1, ..., q_i.queue_K] / tau (normalised q, k and
    queue), label 0; the batch's other keys are no negatives."""
    total = 0.0
    for i in range(q.size(0)):
        logits = [cos(q[i], k[i]) / tau] + [cos(q[i], m) / tau for m in queue]
        total += -(logits[0] - math.log(sum(math.exp(x) for x in logits)))
    return total / q.size(0)


def moco_inbatch_loop(q, k, queue, tau):
    """MoCo's InfoNCE with the other rows' keys as negatives too (they are the next batch's queue entries in
    MoCo): this project's earlier MoCo, loss moco-inbatch."""
    n = q.size(0)
    total = 0.0
    for i in range(n):
        positive = math.exp(cos(q[i], k[i]) / tau)
        others = sum(math.exp(cos(q[i], k[j]) / tau) for j in range(n) if j != i)
        queued = sum(math.exp(cos(q[i], m) / tau) for m in queue)
        total += -math.log(positive / (positive + others + queued))
    return total / n


@pytest.mark.parametrize("n, k, dim", [(1, 1, 3), (4, 6, 8)])
def test_moco_matches_a_loop_over_own_key_and_queue(n, k, dim):
    torch.manual_seed(n + k)
    q, keys, queue = (torch.randn(rows, dim, dtype=torch.float64) for rows in (n, n, k))
    assert moco(q, keys, 0.07, queue).item() == pytest.approx(moco_loop(q, keys, queue, 0.07), rel=1e-9)


@pytest.mark.parametrize("n, dim, tau", [(2, 3, 0.05), (5, 8, 0.05), (4, 16, 1.0)])
def test_nt_xent_matches_the_loop(n, dim, tau):
    torch.manual_seed(n)
    a, p = torch.randn(n, dim, dtype=torch.float64), torch.randn(n, dim, dtype=torch.float64)
    assert nt_xent(a, p, tau).item() == pytest.approx(nt_xent_loop(a, p, tau), rel=1e-9)


@pytest.mark.parametrize("n, k, tau", [(2, 1, 1.0), (4, 7, 0.5), (5, 12, 0.2)])
def test_nt_xent_with_extra_negatives_matches_the_loop(n, k, tau):
    torch.manual_seed(n)
    a, p, bank = (torch.randn(m, 6, dtype=torch.float64) for m in (n, n, k))
    got = nt_xent(a, p, tau, bank)
    assert got.item() == pytest.approx(nt_xent_loop(a, p, tau, bank), rel=1e-9)
    assert got > nt_xent(a, p, tau)


def test_nt_xent_hand_computed_case():
    """Anchors = positives = the unit vectors e1, e2; one bank entry -e1; temperature 1, so each
    logit is a cosine: 1 for the pair, 0 between e1 and e2, -1 between e1 and -e1."""
    e = math.e
    a0 = -math.log(e / (1 + e + 1 + 1 / e))  # candidates: e2, p0=e1 (target), p1=e2, bank -e1
    a1 = -math.log(e / (1 + e + 1 + 1))  # candidates: e1, p0=e1, p1=e2 (target), bank -e1 (cosine 0)
    p = -math.log(e / (e + 2))  # positive rows see no bank entry: target anchor, two orthogonal others
    eye = torch.eye(2, dtype=torch.float64)
    got = nt_xent(eye, eye, 1.0, torch.tensor([[-1.0, 0.0]], dtype=torch.float64))
    assert got.item() == pytest.approx((a0 + a1 + 2 * p) / 4, rel=1e-12)


@pytest.mark.parametrize("n, dim, tau", [(2, 3, 0.05), (6, 8, 0.05), (5, 16, 1.0)])
def test_info_nce_is_simcse_cl_forward(n, dim, tau):
    torch.manual_seed(n)
    z1, z2 = torch.randn(n, dim, dtype=torch.float64), torch.randn(n, dim, dtype=torch.float64)
    assert info_nce(z1, z2, tau).item() == pytest.approx(cl_forward_loop(z1, z2, tau), rel=1e-9)
    assert info_nce(z1, z2, tau).item() != pytest.approx(nt_xent_loop(z1, z2, tau), rel=1e-3)


def test_info_nce_hand_computed_case():
    """z1 = z2 = e1, e2 at temperature 1: each query sees its key (cosine 1) and one orthogonal key (0);
    the other query, a negative under NT-Xent, is no candidate here."""
    eye = torch.eye(2, dtype=torch.float64)
    assert info_nce(eye, eye, 1.0).item() == pytest.approx(-math.log(math.e / (math.e + 1)), rel=1e-12)


def cl_forward_hard_loop(z1, z2, z3, tau, weight):
    """SimCSE's cl_forward with a hard negative (num_sent == 3): row i's logits are cos(z1_i, z2_j) / temp for
    every j, then cos(z1_i, z3_j) / temp for every j, the weight added to column N + i (its own z3) after the
    temperature; label i; one cross-entropy averaged over the rows."""
    n = z1.size(0)
    total = 0.0
    for i in range(n):
        logits = [cos(z1[i], z2[j]) / tau for j in range(n)]
        logits += [cos(z1[i], z3[j]) / tau + (weight if j == i else 0.0) for j in range(n)]
        total += -(logits[i] - math.log(sum(math.exp(x) for x in logits)))
    return total / n


@pytest.mark.parametrize("n, tau, weight", [(2, 0.05, 0.0), (5, 0.05, 0.0), (4, 0.05, 1.0), (3, 0.5, -2.5)])
def test_info_nce_with_hard_negatives_is_supervised_simcse_cl_forward(n, tau, weight):
    torch.manual_seed(n)
    z1, z2, z3 = (torch.randn(n, 8, dtype=torch.float64) for _ in range(3))
    got = info_nce(z1, z2, tau, hard_negatives=z3, hard_negative_weight=weight)
    assert got.item() == pytest.approx(cl_forward_hard_loop(z1, z2, z3, tau, weight), rel=1e-9)
    assert got.item() != pytest.approx(cl_forward_loop(z1, z2, tau), rel=1e-3)  # the negatives count


def test_hard_negative_weight_reaches_only_each_rows_own_negative():
    """e1, e2 at temperature 1, hard negatives -e1, -e2, weight log 2: row 0's candidates are e1 (1), e2 (0),
    -e1 (-1, doubled by the weight: 2/e) and -e2 (0); row 1's likewise. Both rows alike."""
    eye = torch.eye(2, dtype=torch.float64)
    expected = -math.log(math.e / (math.e + 1 + 2 / math.e + 1))
    got = info_nce(eye, eye, 1.0, hard_negatives=-eye, hard_negative_weight=math.log(2))
    assert got.item() == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("n, k, tau", [(3, 0, 0.07), (4, 5, 0.07), (2, 9, 0.5)])
def test_info_nce_with_a_queue_is_moco_inbatch(n, k, tau):
    torch.manual_seed(k)
    q, keys, queue = (torch.randn(m, 8, dtype=torch.float64) for m in (n, n, k))
    assert LOSSES["moco-inbatch"].fn(q, keys, tau, queue).item() == pytest.approx(
        moco_inbatch_loop(q, keys, queue, tau), rel=1e-9
    )


@pytest.mark.parametrize("loss", [nt_xent, info_nce])
def test_losses_are_low_for_aligned_pairs_and_send_gradients_to_both_sides(loss):
    torch.manual_seed(0)
    a = torch.randn(8, 16)
    assert loss(a, a + 0.01 * torch.randn(8, 16), 0.05) < 0.01
    a = torch.randn(4, 8, requires_grad=True)
    p = torch.randn(4, 8, requires_grad=True)
    loss(a, p, 0.05).backward()
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
