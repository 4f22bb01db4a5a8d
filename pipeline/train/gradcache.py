"""Gradient caching (GradCache; Gao et al., 2021): a contrastive batch larger than memory allows.

A contrastive loss couples every embedding of the batch, so the batch cannot be
split into independent micro-batches as a per-example loss can. But the loss
depends on the encoder only through the embeddings, and the chain rule splits:

    dL/dθ = Σ_i (dL/dz_i) · (dz_i/dθ)

`dL/dz` needs only the embeddings (a few KB a row), not the encoder's
activations; `dz_i/dθ` needs only row i's own forward. So: (1) embed every chunk
without a graph, (2) take the loss's gradient with respect to the embeddings,
(3) re-embed each chunk with a graph and backpropagate the cached `dL/dz` into
it. Peak activation memory is one chunk's; the gradient is the full batch's, up
to floating-point summation order, provided step (3) recomputes the *same* z as
step (1): dropout must draw the same masks, hence the RNG state is saved before
each chunk in (1) and restored before its replay in (3) (GradCache's RandContext).
The price is a second forward pass of every chunk.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

Encoded = torch.Tensor | tuple[torch.Tensor, torch.Tensor]


class CachedStep(NamedTuple):
    loss: torch.Tensor  # the contrastive loss, detached
    extra_loss: torch.Tensor  # the chunks' extra losses summed, detached (0 without any)
    embeddings: torch.Tensor  # all n embeddings, detached, e.g. for a memory bank


def _rng_state() -> tuple[torch.Tensor, torch.Tensor | None]:
    # The current CUDA device only: under DDP a process drives one device, and asking for
    # every device's state would create a context on each.
    return torch.get_rng_state(), torch.cuda.get_rng_state() if torch.cuda.is_initialized() else None


def _restore_rng_state(state: tuple[torch.Tensor, torch.Tensor | None]) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1])


def _split(out: Encoded) -> tuple[torch.Tensor, torch.Tensor | None]:
    return out if isinstance(out, tuple) else (out, None)


def cached_step(
    encode: Callable[[int, int], Encoded],
    n: int,
    chunk_size: int,
    loss_fn: Callable[[torch.Tensor], torch.Tensor],
    scale: Callable[[torch.Tensor], torch.Tensor] = lambda loss: loss,
) -> CachedStep:
    """Accumulate into `.grad` the gradient of `loss_fn(encode(0, n))` plus the chunks' extra
    losses, running the encoder on at most `chunk_size` rows at a time.

    `encode(start, end)` embeds rows [start, end) of the batch with the model and returns the
    embeddings, or `(embeddings, extra_loss)` where `extra_loss` is that chunk's share of a
    per-example loss from the same forward pass (MLM: the chunk's summed cross-entropy over
    the whole batch's count of masked tokens, so the shares add up to the batch mean).
    Per-example losses need no cache: each chunk's is backpropagated with its replay.

    It is called twice per chunk, first under `torch.no_grad()`. Randomness it draws from the
    global CPU/CUDA RNG (dropout) is replayed; a `torch.Generator` of its own would not be, so
    draw such randomness (token masking) before calling this. Under DDP, `encode` should run
    the forward of every chunk but the last (`end < n`) inside `model.no_sync()`, so that the
    accumulated gradients are all-reduced once, in the last chunk's backward; every rank must
    then cut the same number of chunks, and `loss_fn` sees this rank's rows only.

    Mixed precision: `encode` enters autocast around the model's forward only and returns float32
    embeddings, so that the loss and dL/dz are float32. `scale` multiplies what each replay
    backpropagates through the encoder, where fp16 gradients can underflow: pass a GradScaler's
    `scale`. The loss's own backward, to the float32 embeddings only, needs none.
    """
    starts = range(0, n, chunk_size)
    states, embeddings = [], []
    with torch.no_grad():
        for start in starts:
            states.append(_rng_state())
            embeddings.append(_split(encode(start, min(start + chunk_size, n)))[0])
    z = torch.cat(embeddings).requires_grad_()
    loss = loss_fn(z)
    loss.backward()
    extra = torch.zeros((), device=z.device)
    for start, state, grad in zip(starts, states, z.grad.split(chunk_size)):
        _restore_rng_state(state)
        chunk, chunk_extra = _split(encode(start, min(start + chunk_size, n)))
        surrogate = (chunk * grad).sum()  # its gradient wrt the chunk's embeddings is the cached dL/dz
        if chunk_extra is not None:
            surrogate = surrogate + chunk_extra
            extra += chunk_extra.detach().float()
        scale(surrogate).backward()
    return CachedStep(loss.detach(), extra, z.detach())
