"""What a decode yields and how it is timed: ``Step`` (one target pass), the clocks, ``summarize``.

Every loop of the engine (AR, speculative, SJD) yields one ``Step`` per target
forward pass; ``summarize`` turns a list of them into the statistics the app and
the benchmark show. Nothing else recomputes them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch


@dataclass
class Step:
    """One target forward pass and the tokens it committed.

    start: position of the first committed token; tokens: committed ids.
    source: per committed token, the draft depth it was accepted at (>= 1; for SJD
        its place in the window), or 0 when the target sampled it (correction, bonus,
        AR, or the prefill's token).
    drafted: draft tokens proposed this step. tvd: per committed token, the mass
        the relaxation moved at that position (0 for exact methods).
    top1: per committed token, the largest probability of the target distribution it
        was accepted or sampled under (after CFG, temperature, top-k/top-p; greedy:
        at temperature 1): low where the target was unsure.
    relaxed_only: per committed token, True for a draft accepted only thanks to the
        relaxation: the exact rule would have rejected it for the same uniform
        (``acceptance``'s module docstring); always False for exact methods.
    Seconds spent, disjoint (their sum is this step's share of ``elapsed`` up to the
    loop's own Python overhead):
        draft_time: drafting: the drafter's passes and its draft distributions, or SJD's
            fresh drafts and redrafts, plus building the verification inputs (tokens,
            positions, tree mask);
        target_time: the target's forward pass alone (prefill, or verifying the
            pending token and the drafts);
        sample_time: turning the target's logits into distributions (CFG, temperature,
            top-k/top-p, softmax) and, for AR and the prefill, the draw;
        accept_time: the acceptance rule (exact or relaxed), correction/bonus draws
            included;
        cache_time: cache bookkeeping: the KV caches keep the accepted path, the
            committed tokens and the next step's inputs are recorded.
    elapsed: seconds since decoding started (excluding time the consumer held steps).
    """

    index: int
    start: int
    tokens: list[int]
    source: list[int]
    drafted: int
    tvd: list[float]
    top1: list[float]
    relaxed_only: list[bool]
    elapsed: float = 0.0
    draft_time: float = 0.0
    target_time: float = 0.0
    sample_time: float = 0.0
    accept_time: float = 0.0
    cache_time: float = 0.0
    drafter_passes: int = 0


class Clock:
    """Elapsed decoding time, excluding the time the consumer holds a yielded step."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.outside = 0.0
        self._yielded_at: float | None = None

    def elapsed(self) -> float:
        return time.perf_counter() - self.start - self.outside

    def hold(self, step: Step) -> Step:
        """Call as ``yield clock.hold(step)``, then ``clock.release()`` when resumed."""
        self._yielded_at = time.perf_counter()
        return step

    def release(self) -> None:
        if self._yielded_at is not None:
            self.outside += time.perf_counter() - self._yielded_at
            self._yielded_at = None


def synced(device: torch.device) -> float:
    """``time.perf_counter()`` after the device's queued work has finished (CUDA runs asynchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def summarize(steps: list[Step]) -> dict[str, float]:
    """Statistics of a (possibly partial) run.

    nfe: target forward passes including the prefill; tokens: tokens committed;
    mean_accepted: tokens per target pass (the paper's step compression);
    accepted_drafts / drafted: draft tokens accepted / proposed; acceptance_rate;
    drafter_passes; wall_time (s, prefill to last token); tokens_per_s;
    first_token_latency (s); mean_tvd: mean mass moved by the relaxation per token;
    relaxed_only_share: share of the tokens accepted only thanks to the relaxation;
    mean_top1: mean of the tokens' ``Step.top1`` (the target's top-1 probability);
    draft_time / target_time / sample_time / accept_time / cache_time (s): the
    ``Step`` split summed over the steps (target_time: the target's forward passes
    alone); accept_time_per_step / target_time_per_step (s): per verification step
    (a step that verified drafts).
    """
    if not steps:
        return {}
    tokens = sum(len(s.tokens) for s in steps)
    accepted = sum(1 for s in steps for src in s.source if src > 0)
    drafted = sum(s.drafted for s in steps)
    wall = steps[-1].elapsed
    target_time = sum(s.target_time for s in steps)
    accept_time = sum(s.accept_time for s in steps)
    verify_steps = max(1, sum(1 for s in steps[1:] if s.drafted > 0))
    verify_target = sum(s.target_time for s in steps[1:] if s.drafted > 0)
    return {
        "nfe": float(len(steps)),
        "tokens": float(tokens),
        "mean_accepted": tokens / len(steps),
        "accepted_drafts": float(accepted),
        "drafted": float(drafted),
        "acceptance_rate": accepted / drafted if drafted else 0.0,
        "drafter_passes": float(sum(s.drafter_passes for s in steps)),
        "wall_time": wall,
        "tokens_per_s": tokens / wall if wall > 0 else 0.0,
        "first_token_latency": steps[0].elapsed,
        "mean_tvd": sum(sum(s.tvd) for s in steps) / tokens,
        "relaxed_only_share": sum(sum(s.relaxed_only) for s in steps) / tokens,
        "mean_top1": sum(sum(s.top1) for s in steps) / tokens,
        "draft_time": sum(s.draft_time for s in steps),
        "target_time": target_time,
        "sample_time": sum(s.sample_time for s in steps),
        "accept_time": accept_time,
        "cache_time": sum(s.cache_time for s in steps),
        "accept_time_per_step": accept_time / verify_steps,
        "target_time_per_step": verify_target / verify_steps,
    }
