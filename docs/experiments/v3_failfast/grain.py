"""Tokenise the styled data with pixel grain on the emoji: python grain.py SIGMA RUN_DIR (SIGMA in 1/255 units).

The design note's per-token source of ambiguity (../shared/design/embedded-model.md):
grain switches a patch between look-alike codes, all inside LANTERN's neighbour sets,
where style and position are settled by the first rows. Grain: i.i.d. Gaussian per pixel
and channel, s.d. SIGMA/255, on the pixels whose darkest channel is below 250 (the white
background stays clean and keeps its one code), a fresh draw per training image. First
prints the phenomenon in the data (64 images x 8 grain draws: per token position, the
share of draws that give the most common code, and how many of the other codes are among
its 128 nearest codebook entries), then writes RUN_DIR/ids.pt, which gpt.py trains on.
"""
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from lantern_demo.neighbors import build_neighbor_table
from lantern_demo.train import train_vq as TV

CACHE = Path(os.environ.get("LANTERN_CACHE", Path.home() / ".cache" / "lantern-demo"))  # the data and runs
torch.set_num_threads(1)
sigma, out = float(sys.argv[1]), Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
flat = np.load(CACHE / 'v3data.npz')['images'].reshape(-1, 64, 64, 3)
vq = TV.load_vq('vq1024')
rng = np.random.default_rng(0)


def grain(images: np.ndarray) -> np.ndarray:
    foreground = images.min(-1, keepdims=True) < 250
    noisy = images.astype(np.float32) + rng.normal(0, sigma, images.shape).astype(np.float32) * foreground
    return np.clip(np.rint(noisy), 0, 255).astype(np.uint8)


sub = flat[rng.choice(len(flat), 64, replace=False)]
background = TV.background_patches(sub, 16)
codes = torch.stack([TV.encode_ids(vq, grain(sub)) for _ in range(8)])  # [draws, images, 16, 16]
neighbors = build_neighbor_table(vq.quantize.embedding.weight.detach(), 128)
mode = codes.mode(0).values
share = (codes == mode).float().mean(0)
differs = codes != mode.expand_as(codes)
inside = (neighbors[mode.expand_as(codes)[differs]] == codes[differs][:, None]).any(-1).float().mean().item()
print(f'sigma {sigma}: mode share all {share.mean():.3f} not-background {share[~background].mean():.3f}; '
      f'other codes inside k=128: {inside:.2f}', flush=True)
t = time.time()
ids = TV.encode_ids(vq, grain(flat))
background = TV.background_patches(flat, ids.shape[1])
ids[background] = 893  # vq1024's background code (gpt.py's rule: the code clean white patches get most)
torch.save(ids.reshape(len(flat), -1), out / 'ids.pt')
print(f'encoded {len(flat)} with grain {sigma}/255 in {time.time() - t:.0f}s; background share {background.float().mean():.3f}',
      flush=True)
