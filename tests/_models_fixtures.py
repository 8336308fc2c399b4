"""Tiny random GPT / drafter builders shared by tests/test_gpt.py and tests/test_checkpoints.py."""

from __future__ import annotations

import torch

from lantern_demo.drafter import Drafter
from lantern_demo.gpt import GPT, GPTConfig

TINY = dict(vocab_size=64, dim=64, n_layer=2, n_head=4, ffn_hidden=96, cls_token_num=6, caption_dim=32, grid=4)


def tiny_config(**overrides) -> GPTConfig:
    return GPTConfig(**{**TINY, **overrides})


def _randomise(module: torch.nn.Module, seed: int) -> None:
    # larger weights than the training init so that logits differ visibly between paths
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) * (0.3 if p.dim() == 1 else 1.0 / p.shape[-1] ** 0.5))
        for b in module.buffers():
            b.copy_(torch.randn(b.shape, generator=g))


def tiny_gpt(seed: int = 0, **overrides) -> GPT:
    torch.manual_seed(seed)
    model = GPT(tiny_config(**overrides)).eval()
    _randomise(model, seed)
    return model


def tiny_drafter(target: GPT, seed: int = 1) -> Drafter:
    torch.manual_seed(seed)
    d = Drafter(target.cfg.as_drafter(), lm_head=target.lm_head).eval()
    _randomise(d, seed)
    return d
