"""The optimiser settings the GPT and drafter trainings share: weight-decay groups and the schedule."""

from __future__ import annotations

import math

import torch


def param_groups(modules: list[torch.nn.Module], wd: float) -> list[dict]:
    """AdamW groups of the trainable parameters of ``modules``: weight decay ``wd`` on matrices,
    none on vectors and embeddings."""
    decay, no_decay = [], []
    for m in modules:
        for n, p in m.named_parameters():
            if not p.requires_grad:
                continue
            (decay if p.dim() >= 2 and "embed" not in n else no_decay).append(p)
    return [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]


def lr_schedule(step: int, steps: int, lr: float, warm: int, floor: float = 0.1) -> float:
    """Learning rate at ``step`` of ``steps``: linear warm-up over ``warm`` steps, then a cosine from
    ``lr`` down to ``floor * lr``."""
    if step < warm:
        return lr * (step + 1) / warm
    t = (step - warm) / max(1, steps - warm)
    return lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * t)))
