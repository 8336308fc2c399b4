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

``decode_sjd`` is the SJD loop itself: one step verifies the pending token and the
window in one causal target pass with the chain rule, commits the accepted drafts
and the correction (or bonus) token, and turns the target distributions it computed
past the rejection into the next window's drafts; fresh drafts pad the window back
to its length.
"""

from __future__ import annotations

import time
from typing import Iterator

import torch
from torch import Tensor

from .acceptance import Relaxation, verify_chain
from .protocol import Target
from .sampling import SamplingConfig, draw, pick, probs_from_logits
from .steps import Clock, Step, synced

INITS = ("vertical", "left", "random")


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


def decode_sjd(
    target: Target, token: int, num_tokens: int, window: int, init: str, coupled: bool, sampling: SamplingConfig,
    relax: Relaxation | None, row_length: int, gen: torch.Generator, device: torch.device, clock: Clock,
) -> Iterator[Step]:
    """Speculative Jacobi decoding after the prefill's ``token`` 0 (see the module docstring).

    Yields one ``Step`` per target pass. ``seq`` [num_tokens] holds the committed tokens
    followed by the window's drafts; ``q`` [w, V] the distribution each draft was drawn from.
    """
    V = target.vocab_size
    seq = torch.full((num_tokens,), -1, dtype=torch.long, device=device)
    seq[0] = token
    drafts = torch.zeros(0, dtype=torch.long, device=device)
    q = torch.zeros(0, V, device=device)
    committed, index = 1, 1
    while committed < num_tokens:
        t0 = time.perf_counter()
        w = min(window, num_tokens - committed)
        drafts, q = drafts[:w], q[:w]
        if drafts.shape[0] < w:  # pad the window with fresh drafts
            need = w - drafts.shape[0]
            fresh, q_fresh = init_drafts(seq, committed + drafts.shape[0], need, init, V, row_length,
                                         torch.rand(need, generator=gen))
            drafts, q = torch.cat([drafts, fresh]), torch.cat([q, q_fresh])
            seq[committed:committed + w] = drafts
        tokens = torch.cat([seq[committed - 1:committed], drafts])
        positions = torch.arange(committed - 1, committed + w, device=device)
        t1 = synced(device)
        logits, _ = target.forward(tokens, positions)
        t2 = synced(device)
        p = probs_from_logits(logits, sampling)  # [w + 1, V]: position committed + i
        t3 = synced(device)

        u = None if sampling.greedy else torch.rand(w + 1, generator=gen).to(device)
        n_acc, last, tvd, only = verify_chain(p, q, drafts, relax, sampling.greedy, u)
        out = drafts[:n_acc].tolist()
        if committed + n_acc < num_tokens:
            out.append(last)
        top1 = p[:len(out)].amax(-1).tolist()
        t4 = synced(device)
        target.keep(committed - 1, torch.arange(n_acc + 1, device=device))
        seq[committed:committed + len(out)] = torch.tensor(out, device=device)
        t5 = synced(device)

        # the distributions past the rejection become the next window's drafts
        stale = p[n_acc + 1:]
        u = torch.rand(stale.shape[0], generator=gen).to(device)
        drafts = redraft(stale, drafts[n_acc + 1:], q[n_acc + 1:], coupled, sampling.greedy, u)
        q = stale
        start = committed + len(out)
        kept = min(drafts.shape[0], num_tokens - start)
        seq[start:start + kept] = drafts[:kept]
        t6 = synced(device)
        source = list(range(1, n_acc + 1)) + [0] * (len(out) - n_acc)
        yield clock.hold(Step(index, committed, out, source, w, tvd[: len(out)], top1, only[: len(out)],
                              clock.elapsed(), draft_time=(t1 - t0) + (t6 - t5), target_time=t2 - t1,
                              sample_time=t3 - t2, accept_time=t4 - t3, cache_time=t5 - t4))
        clock.release()
        committed += len(out)
        index += 1
