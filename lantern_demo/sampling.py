"""From logits to next-token distributions: CFG, temperature, top-k, top-p, and draws.

Every function works on the last dimension (the vocabulary, size V) and
broadcasts over leading dimensions. Random draws take explicit uniforms so that
callers control the random stream (determinism, fixed-stream tests).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class SamplingConfig:
    """How a distribution is formed from a model's logits.

    cfg_scale: classifier-free guidance scale s; logits = u + s * (c - u). 1 disables CFG.
    temperature: 0 means greedy (argmax); probabilities are then formed at temperature 1
        so that relaxed greedy acceptance can still compare masses.
    top_k: keep the k most likely tokens (0 = all).
    top_p: keep the smallest set whose mass reaches top_p (1 = all).
    """

    cfg_scale: float = 3.0
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0

    @property
    def rows(self) -> int:
        """Model rows needed: 2 (cond, uncond) with CFG, else 1."""
        return 1 if self.cfg_scale == 1.0 else 2

    def validate(self) -> None:
        if not 0.0 <= self.cfg_scale <= 50.0:
            raise ValueError(f"cfg_scale must be in [0, 50], got {self.cfg_scale}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


def guide(logits: Tensor, cfg_scale: float) -> Tensor:
    """Combine CFG rows. logits: [R, ..., V] with R = 1 or 2 -> [..., V] (float32)."""
    logits = logits.float()
    if logits.shape[0] == 1:
        return logits[0]
    cond, uncond = logits[0], logits[1]
    return uncond + cfg_scale * (cond - uncond)


def filter_logits(logits: Tensor, top_k: int = 0, top_p: float = 1.0) -> Tensor:
    """Set logits outside the top-k / top-p (nucleus) set to -inf. [..., V] -> [..., V].

    Top-k is applied first, then top-p on the renormalised survivors; the most
    likely token is always kept. Ties at the k-th value are all kept.
    """
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        sorted_probs = torch.softmax(sorted_logits, dim=-1)
        mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
        drop_sorted = mass_before >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def probs_from_logits(logits: Tensor, cfg: SamplingConfig) -> Tensor:
    """Model logits [R, ..., V] -> next-token probabilities [..., V] (float32).

    Greedy configs use temperature 1 here (the argmax is taken by the caller).
    """
    x = guide(logits, cfg.cfg_scale)
    if not cfg.greedy:
        x = x / cfg.temperature
    x = filter_logits(x, cfg.top_k, cfg.top_p)
    return torch.softmax(x, dim=-1)


def draw(probs: Tensor, u: Tensor) -> Tensor:
    """Inverse-CDF draw. probs: [..., V] (need not be normalised); u: [...] in [0, 1).

    Returns int64 [...]: the first token whose cumulative mass exceeds u * total.
    Tokens with zero mass are never returned.
    """
    cdf = torch.cumsum(probs, dim=-1)
    target = (u * cdf[..., -1]).unsqueeze(-1)
    idx = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    return idx.clamp_(max=probs.shape[-1] - 1)


def pick(probs: Tensor, u: Tensor, greedy: bool) -> Tensor:
    """A token per distribution: the argmax when greedy, else a draw with uniforms u."""
    return probs.argmax(dim=-1) if greedy else draw(probs, u)
