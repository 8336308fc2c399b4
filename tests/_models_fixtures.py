"""The tests' tiny model shape (the builders are ``lantern_demo.tiny``'s), shared by test_gpt,
test_checkpoints and test_lean_pass."""

from __future__ import annotations

from lantern_demo import tiny
from lantern_demo.gpt import GPT
from lantern_demo.tiny import tiny_drafter

__all__ = ["TINY", "tiny_gpt", "tiny_drafter"]

TINY = dict(vocab_size=64, dim=64, n_layer=2, n_head=4, ffn_hidden=96, cls_token_num=6, caption_dim=32, grid=4)


def tiny_gpt(seed: int = 0, **overrides) -> GPT:
    """``tiny.tiny_gpt`` at :data:`TINY`'s shape (``overrides``: any GPTConfig field)."""
    return tiny.tiny_gpt(seed, **{**TINY, **overrides})
