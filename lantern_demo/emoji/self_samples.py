"""The target's own samples, drawn in batches: the drafter's self-distillation data, the model
card's recognition measure and the prefix-completion benchmark (``lantern_demo.bench.completion``).

``sample_tokens`` runs the same ``GPT`` (``prefill_embeds`` + ``forward`` with one
token sequence per row) on many captions at once, with classifier-free guidance
rows and the sampling rules of ``lantern_demo.sampling``. On a CPU a batch of 64
captions costs about as much per step as one caption, so the training emojis'
captions are sampled in minutes instead of the ~1.2 s per image of the engine.
"""

from __future__ import annotations

import time

import torch
from torch import Tensor

from ..sampling import SamplingConfig, pick, probs_from_logits


@torch.no_grad()
def sample_batch(gpt, caption_emb: Tensor, caption_mask: Tensor | None, sampling: SamplingConfig,
                 gen: torch.Generator, num_tokens: int | None = None, prefix: Tensor | None = None) -> Tensor:
    """AR samples of ``gpt`` for B captions. caption_emb [B, L, C]; caption_mask [B, L] bool or None.

    Rows 0..B-1 carry the captions, rows B..2B-1 (when ``sampling.cfg_scale != 1``) the
    unconditional embedding with the same key mask, as in ``GPT.prefill``. ``prefix`` [B, n0]
    (optional) forces the first n0 tokens, which are fed in one pass; sampling continues after
    them (prefix completion). Returns int64 token ids [B, num_tokens] (default: the whole grid,
    grid**2); uniforms come from ``gen``.
    """
    B, N = caption_emb.shape[0], num_tokens or gpt.cfg.grid**2
    n0 = 0 if prefix is None else prefix.shape[1]
    if prefix is not None and (prefix.shape[0] != B or n0 > N):
        raise ValueError(f"prefix must be [{B}, n0 <= {N}], got {tuple(prefix.shape)}")
    if n0 == N:
        return prefix.long().cpu()
    rows = sampling.rows
    emb = caption_emb.repeat(rows, 1, 1)
    mask = None if caption_mask is None else caption_mask.repeat(rows, 1)
    drop = torch.arange(rows * B) >= B
    embeds, key_mask = gpt.embed_prefix(emb, mask, drop)
    logits = gpt.prefill_embeds(embeds, key_mask, N).logits  # [rows * B, V]
    tokens = torch.empty(B, N, dtype=torch.long)
    if n0:
        tokens[:, :n0] = prefix
        logits = gpt.forward(prefix.repeat(rows, 1), torch.arange(n0))[0][:, -1]
    for pos in range(n0, N):
        p = probs_from_logits(logits.view(rows, B, -1), sampling)  # [B, V]
        tokens[:, pos] = pick(p, torch.rand(B, generator=gen).to(p.device), sampling.greedy).cpu()
        if pos + 1 < N:
            step = tokens[:, pos : pos + 1].repeat(rows, 1)  # [rows * B, 1]
            logits = gpt.forward(step, torch.tensor([pos]))[0][:, 0]
    return tokens


def sample_tokens(gpt, text, cap_ids: Tensor, cap_mask: Tensor, sampling: SamplingConfig, seed: int = 0,
                  batch: int = 64, log=print, prefix: Tensor | None = None) -> Tensor:
    """Samples [M, grid**2] for M tokenised captions (``WordTextEncoder.tokenize``), ``batch`` at a time;
    ``prefix`` [M, n0] (optional) forces each sample's first n0 tokens (see ``sample_batch``)."""
    gen = torch.Generator().manual_seed(seed)
    out, t0 = [], time.time()
    for i in range(0, len(cap_ids), batch):
        sl = slice(i, i + batch)
        out.append(sample_batch(gpt, text(cap_ids[sl]), cap_mask[sl], sampling, gen,
                                prefix=None if prefix is None else prefix[sl]))
        log(f"sampled {min(i + batch, len(cap_ids))}/{len(cap_ids)} images of the target ({time.time() - t0:.0f}s)")
    return torch.cat(out) if out else torch.empty(0, gpt.cfg.grid**2, dtype=torch.long)
