"""Emoji images as VQ token ids: the tokenizer's encoder and the background rule.

The rule: every token patch whose pixels are all (nearly) pure white gets one code, the one the
encoder most often gives such patches. Why: this VQ's encoder sees beyond its patch (3x3
convolutions and a mid-block attention), so the white background came out as 171 different codes
(37 even for an all-white image), which the GPT can only guess. Snapping them to one code cost
0.8 dB of held-out PSNR and makes half of every image predictable; the look-alike codes stay in
the codebook and keep occurring at stroke edges and in flat colours.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from diffusers import VQModel

BACKGROUND_MIN = 254  # a patch is background when all its pixels are at least this white


def load_vq(path: str | Path) -> VQModel:
    """The whole ``diffusers.VQModel`` (encoder included) saved in ``path``, in eval mode."""
    vq = VQModel.from_pretrained(str(path))
    vq.eval()
    return vq


def to_tensor(images_u8: np.ndarray) -> torch.Tensor:
    """uint8 [N, H, W, 3] -> float [N, 3, H, W] in [-1, 1]."""
    x = torch.from_numpy(np.ascontiguousarray(images_u8)).permute(0, 3, 1, 2).float()
    return x / 127.5 - 1.0


@torch.no_grad()
def encode_ids(vq, images_u8: np.ndarray, batch: int = 64, background: int | None = None) -> torch.Tensor:
    """Token ids [N, h, w] (raster order) of uint8 images, in float32.

    With ``background`` set, every pure-background patch (see :func:`background_patches`)
    gets that one code instead of the encoder's choice (the background rule).
    """
    vq.eval()
    out = []
    for i in range(0, len(images_u8), batch):
        x = to_tensor(images_u8[i : i + batch])
        h = vq.quant_conv(vq.encoder(x))
        _, _, (_, _, idx) = vq.quantize(h)
        out.append(idx.view(h.shape[0], h.shape[2], h.shape[3]))
    ids = torch.cat(out)
    if background is not None:
        ids[background_patches(images_u8, ids.shape[1])] = background
    return ids


def background_patches(images_u8: np.ndarray, grid: int) -> torch.Tensor:
    """bool [N, grid, grid]: token patches whose pixels are all at least ``BACKGROUND_MIN``."""
    n, size = len(images_u8), images_u8.shape[1]
    f = size // grid
    patches = images_u8.reshape(n, grid, f, grid, f, -1).min(axis=(2, 4, 5))
    return torch.from_numpy(patches >= BACKGROUND_MIN)


def background_code(ids: torch.Tensor, background: torch.Tensor) -> int:
    """The code the encoder most often gives pure-background patches.

    ids: the encoder's codes [N, h, w]; background: :func:`background_patches` of the same images.
    """
    return int(ids[background].mode().values)
