"""Drafts without a drafter: the window of speculative Jacobi decoding (SJD).

SJD keeps a window of ``L`` draft tokens after the committed prefix and verifies
all of them in one target pass with the chain rule (``acceptance.chain_accept_prob``,
exact, or LANTERN-relaxed). Each draft carries the distribution ``q`` [V] it was
drawn from, because the acceptance test min(1, p/q) needs it. Two kinds of drafts:

* fresh drafts (``init_drafts``) for positions nothing has predicted yet:
  ``random`` (uniform over the codebook), ``left`` (a copy of the token to the
  left) or ``vertical`` (a copy of the token one image row above; in the first
  row, of the token to the left). A copy is a point mass: q = one-hot.
* redrafts (``redraft``) for positions the last pass computed a target
  distribution at but did not commit (everything after the first rejection):
  the new draft is drawn from that distribution, which becomes its q. Drawn
  independently this is SJD; *coupled* (SCD / MC-SJD) it is drawn by the maximal
  coupling with the position's previous draft (``maximal_coupling``), so that it
  stays the same token as often as any draw with that law can, and the window
  settles into a fixed point sooner.

Both kinds are exact draws from their stored q given everything the target's
distribution at that position depends on, which is all the acceptance rule
needs to be lossless (``tests/test_jacobi.py`` checks the sequence law).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .sampling import draw, pick

INITS = ("random", "left", "vertical")


def one_hot(tokens: Tensor, vocab: int) -> Tensor:
    """Point-mass distributions [n, V] (float32) at ``tokens`` [n]."""
    return torch.zeros(tokens.shape[0], vocab, device=tokens.device).scatter_(1, tokens[:, None], 1.0)


def init_drafts(seq: Tensor, start: int, count: int, init: str, vocab: int, row_length: int,
                u: Tensor) -> tuple[Tensor, Tensor]:
    """Fresh drafts for positions ``start .. start + count - 1``.

    seq: [N] int64 tokens known so far (committed, then the window's drafts), valid
    before ``start``; ``start >= 1``. row_length: image tokens per row (for
    ``vertical``). u: [count] uniforms (used by ``random`` only).
    Returns (tokens [count] int64, q [count, V] float32).
    """
    if init not in INITS:
        raise ValueError(f"unknown draft initialisation {init!r}; choose one of {INITS}")
    device = seq.device
    if init == "random":
        tokens = (u.to(device) * vocab).long().clamp_(max=vocab - 1)
        return tokens, torch.full((count, vocab), 1.0 / vocab, device=device)
    known = seq[:start].tolist()
    for pos in range(start, start + count):
        above = pos - row_length
        known.append(known[above] if init == "vertical" and above >= 0 else known[pos - 1])
    tokens = torch.tensor(known[start:], dtype=torch.long, device=device)
    return tokens, one_hot(tokens, vocab)


def maximal_coupling(old: Tensor, q_old: Tensor, q_new: Tensor) -> Tensor:
    """Law [n, V] of a redraft given the previous draft, under the maximal coupling.

    old: [n] previous drafts, each drawn from its row of q_old [n, V]; q_new: [n, V].
    The old token is kept with probability min(1, q_new(old) / q_old(old)); otherwise
    the redraft comes from normalise(max(0, q_new - q_old)). Averaged over old ~ q_old
    this is exactly q_new, and P(redraft == old) = sum min(q_old, q_new).
    """
    q_o = q_old.gather(1, old[:, None]).squeeze(1)
    q_n = q_new.gather(1, old[:, None]).squeeze(1)
    keep = torch.clamp(q_n / q_o, max=1.0)  # q_o > 0: old was drawn from q_old
    excess = torch.clamp(q_new - q_old, min=0.0)
    total = excess.sum(1, keepdim=True)
    # no excess only where q_new == q_old, and then keep == 1: any residual row will do
    residual = torch.where(total > 0, excess / total.clamp_min(1e-30), q_new)
    law = (1.0 - keep)[:, None] * residual
    return law.scatter_add_(1, old[:, None], keep[:, None])


def redraft(p: Tensor, old: Tensor, q_old: Tensor, coupled: bool, greedy: bool, u: Tensor) -> Tensor:
    """New drafts [m] at positions where the last pass gave target distributions p [m, V].

    The first ``len(old)`` positions had drafts ``old`` (drawn from ``q_old``); the rest
    had none. Each new draft's q is its row of p: independent draws from p, or
    (``coupled``) draws from ``maximal_coupling`` where there was an old draft;
    greedy takes the argmax (Jacobi iteration). u: [m] uniforms.
    """
    if greedy or not coupled or old.numel() == 0:
        return pick(p, u, greedy)
    n = old.shape[0]
    law = torch.cat([maximal_coupling(old, q_old, p[:n]), p[n:]])
    return draw(law, u)
