"""The memory bank (XBM, or MoCo's queue): a FIFO of detached embeddings (the losses that read it: test_losses)."""

import io

import pytest
import torch

from pipeline.train.memory_bank import MemoryBank


def rows(start, stop, dim=2):
    return torch.arange(start, stop, dtype=torch.float32)[:, None].expand(-1, dim).clone()


def test_fifo_keeps_the_newest_entries_oldest_first():
    bank = MemoryBank(size=5, dim=2)
    assert len(bank) == 0 and bank.negatives().shape == (0, 2)
    bank.push(rows(0, 3))
    assert torch.equal(bank.negatives(), rows(0, 3))
    bank.push(rows(3, 7))
    assert torch.equal(bank.negatives(), rows(2, 7))
    bank.push(rows(7, 14))  # more than the bank holds at once
    assert torch.equal(bank.negatives(), rows(9, 14))


def test_entries_are_detached_and_shapes_checked():
    bank = MemoryBank(size=4, dim=3)
    bank.push(torch.randn(2, 3, requires_grad=True))
    assert not bank.negatives().requires_grad
    with pytest.raises(ValueError, match="shape"):
        bank.push(torch.randn(2, 4))
    with pytest.raises(ValueError, match="positive"):
        MemoryBank(size=0, dim=3)


def test_state_dict_round_trip():
    torch.manual_seed(0)
    bank = MemoryBank(size=6, dim=4)
    bank.push(torch.randn(4, 4))
    bank.push(torch.randn(4, 4))
    buffer = io.BytesIO()
    torch.save(bank.state_dict(), buffer)
    buffer.seek(0)
    restored = MemoryBank(size=6, dim=4)
    restored.load_state_dict(torch.load(buffer))
    assert torch.equal(restored.negatives(), bank.negatives())
    more = torch.randn(3, 4)
    bank.push(more)
    restored.push(more)
    assert torch.equal(restored.negatives(), bank.negatives())

    smaller = MemoryBank(size=2, dim=4)
    smaller.load_state_dict(bank.state_dict())
    assert torch.equal(smaller.negatives(), bank.negatives()[-2:])
    with pytest.raises(ValueError, match="dim"):
        MemoryBank(size=6, dim=5).load_state_dict(bank.state_dict())
