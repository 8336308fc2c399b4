"""A trained weights folder (the emoji preset's layout), loaded through the app's own classes."""

from __future__ import annotations

from pathlib import Path

from ..checkpoints import load_drafter, load_gpt
from ..gpt import Caption
from ..text import TextEncoder, load_text_encoder
from ..vq import VQDecoder


def load_all(out: Path, drafter: bool = True):
    """(text encoder, target, drafter or None when ``drafter`` is False, VQ decoder) from a weights folder."""
    gpt = load_gpt(out / "target").eval()
    drafter = load_drafter(out / "drafter", target=gpt).eval() if drafter else None
    text = load_text_encoder(out / "text_encoder").eval()
    vq = VQDecoder.from_pretrained(out / "vq", gpt.cfg.grid)
    return text, gpt, drafter, vq


def caption_of(text: TextEncoder, prompt: str) -> Caption:
    """The GPT's ``Caption`` for one prompt."""
    e = text.encode([prompt])
    return Caption(e.emb[0], e.mask[0])
