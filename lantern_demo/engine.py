"""The decoding engine: AR, speculative chains, EAGLE-2 trees, LANTERN, LANTERN++, SJD.

``decode`` drives a ``Target`` and (for speculative methods) a ``Drafter``
(see ``protocol.py``) and yields one ``Step`` per target forward pass; the
prefill pass, which yields token 0, is step 0. After the prefill it hands over to
one loop by drafting shape: the AR loop here, the drafter loop of
``speculative.py`` (chains and trees) or the SJD loop of ``jacobi.py`` (a window
of drafts kept from pass to pass, no drafter). ``steps.summarize`` turns the
steps into the statistics the app and the benchmark show.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Iterator

import torch
from torch import Tensor

from .acceptance import active
from .jacobi import decode_sjd
from .methods import DecodeConfig
from .protocol import Drafter, Target
from .sampling import SamplingConfig, pick, probs_from_logits
from .speculative import SpecState, spec_step, static_shape
from .steps import Clock, Step, summarize, synced


@torch.inference_mode()  # for each resumption of the generator, not while the consumer holds a step
def decode(
    target: Target,
    drafter: Drafter | None,
    cond: Any,
    config: DecodeConfig,
    num_tokens: int,
    seed: int = 0,
    neighbors: Tensor | None = None,
    row_length: int | None = None,
) -> Iterator[Step]:
    """Generate ``num_tokens`` image tokens, yielding a ``Step`` per target pass.

    cond: the model's condition (see ``Target.prefill``). neighbors: [V, K]
    codebook neighbour table, needed by the relaxed methods (k <= K). row_length: image
    tokens per row, for SJD's vertical draft initialisation (default: the side of
    a square image). Randomness comes only from a CPU ``torch.Generator`` seeded
    with ``seed``: the same inputs give the same tokens on the same device.
    Raises ValueError for invalid settings (``DecodeConfig.validate``) or a missing drafter.
    """
    config.validate(None if neighbors is None else int(neighbors.shape[1]))
    if config.needs_drafter and drafter is None:
        raise ValueError(f"method {config.method!r} needs a drafter")
    relax = active(config.relaxation(neighbors))
    cfg = config.sampling
    gen = torch.Generator().manual_seed(int(seed))
    shape = config.shape
    max_tokens = num_tokens + config.width + 1

    clock = Clock()
    t_start = clock.start
    prefix = target.prefill(cond, cfg.rows, max_tokens)
    device = prefix.logits.device
    t_target = synced(device)
    p0 = probs_from_logits(prefix.logits, cfg)
    token = int(pick(p0, torch.rand((), generator=gen).to(device), cfg.greedy))
    t_sample = synced(device)
    yield clock.hold(Step(0, 0, [token], [0], 0, [0.0], [float(p0.max())], [False], clock.elapsed(),
                          target_time=t_target - t_start, sample_time=t_sample - t_target))
    clock.release()

    if shape is None:
        yield from _decode_ar(target, token, cfg, num_tokens, gen, device, clock)
        return
    if shape == "window":
        row = row_length or math.isqrt(num_tokens)
        yield from decode_sjd(target, token, num_tokens, config.window, config.init, config.coupled, cfg, relax,
                              row, gen, device, clock)
        return
    assert drafter is not None
    t0 = time.perf_counter()
    drafter.prefill(cond, cfg.rows, prefix, max_tokens)
    prefill_draft_time = synced(device) - t0
    state = SpecState(target, drafter, config, relax, gen, device, num_tokens,
                      static_shape(config) if shape == "static" else None)
    new_tokens, features = [token], prefix.hidden[:, -1:]
    committed, index = 1, 1
    while committed < num_tokens:
        step, new_tokens, features = spec_step(state, index, committed, new_tokens, features)
        step.draft_time += prefill_draft_time if index == 1 else 0.0
        step.elapsed = clock.elapsed()
        committed += len(step.tokens)
        yield clock.hold(step)
        clock.release()
        index += 1


def _decode_ar(target: Target, token: int, cfg: SamplingConfig, num_tokens: int, gen: torch.Generator,
               device: torch.device, clock: Clock) -> Iterator[Step]:
    """Plain autoregressive sampling after the prefill's ``token`` 0: one token per target pass."""
    for pos in range(1, num_tokens):
        t0 = time.perf_counter()
        logits, _ = target.forward(torch.tensor([token], device=device), torch.tensor([pos - 1], device=device))
        t1 = synced(device)
        p = probs_from_logits(logits[:, 0], cfg)
        token = int(pick(p, torch.rand((), generator=gen).to(device), cfg.greedy))
        top1 = float(p.max())
        t2 = synced(device)
        yield clock.hold(Step(pos, pos, [token], [0], 0, [0.0], [top1], [False], clock.elapsed(),
                              target_time=t1 - t0, sample_time=t2 - t1))
        clock.release()


@dataclass
class Result:
    """A finished generation: tokens [N] and its steps."""

    tokens: Tensor
    steps: list[Step]
    config: DecodeConfig
    stats: dict[str, float]


def generate(
    target: Target,
    drafter: Drafter | None,
    cond: Any,
    config: DecodeConfig,
    num_tokens: int,
    seed: int = 0,
    neighbors: Tensor | None = None,
    row_length: int | None = None,
) -> Result:
    """Run ``decode`` to the end and summarise it."""
    steps = list(decode(target, drafter, cond, config, num_tokens, seed, neighbors, row_length))
    tokens = torch.tensor([t for s in steps for t in s.tokens])
    return Result(tokens, steps, config, summarize(steps))
