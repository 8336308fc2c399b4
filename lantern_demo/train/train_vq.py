"""Train the emoji VQ tokenizer: a ``diffusers.VQModel`` with 16x16 tokens per 64 px image.

Architecture (``VQ_CONFIG``): 3 encoder levels (32, 64, 128 channels) -> 4x downsample, 1 res
block per level (2 in the decoder, diffusers' rule), a mid block with attention at 16x16, latent
64 channels, ``quant_conv`` to an 8-dim code space; the codebook size is an override
(``retrain.Settings.vq_codes``). Codes (``l2_codes``, the default): LlamaGen's design, the nearest
code by cosine with latents and codes L2-normalised (:func:`quantise_l2`). The codebook is saved
row-normalised, so diffusers' plain L2 lookup (``VQModel.encode`` + ``quantize``) picks the same ids
and ``decode(ids, force_not_quantize=True, shape=(B, 16, 16, 8))`` reproduces training.

Training: the first ``crop_fraction`` of the steps see random 32x32 crops at token-aligned
offsets (a quarter of the compute per sample; the network is convolutional), the rest whole
64x64 images, so that GroupNorm statistics and the mid-block attention are tuned on the real
input size.

Loss: L1 + L2 on pixels in [-1, 1] plus the quantizer's codebook/commitment loss (beta 0.25).
The codebook is initialised from encoder outputs and dead codes (unused during the last
``restart_every`` steps) are re-seeded from random encoder outputs of the current batch, which
keeps usage near the full codebook. Convolutions run under bfloat16 autocast where the CPU runs it
natively (``precision``); the nearest code search and the losses stay in float32.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from diffusers import VQModel

from ..emoji.tokens import encode_ids, load_vq, to_tensor
from ..neighbors import build_neighbor_table
from . import precision

VQ_CONFIG = dict(
    in_channels=3,
    out_channels=3,
    down_block_types=("DownEncoderBlock2D",) * 3,
    up_block_types=("UpDecoderBlock2D",) * 3,
    block_out_channels=(32, 64, 128),
    layers_per_block=1,
    act_fn="silu",
    latent_channels=64,
    sample_size=64,
    num_vq_embeddings=1024,
    norm_num_groups=32,
    vq_embed_dim=8,
    norm_type="group",
    mid_block_add_attention=True,
    lookup_from_codebook=True,
)


def make_vq(**overrides) -> VQModel:
    cfg = dict(VQ_CONFIG)
    cfg.update(overrides)
    return VQModel(**cfg)


def to_uint8(x: torch.Tensor) -> np.ndarray:
    """float [N, 3, H, W] in [-1, 1] -> uint8 [N, H, W, 3]."""
    return ((x.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()


def _encode_latent(vq, x: torch.Tensor, amp: bool) -> torch.Tensor:
    with precision.autocast(enabled=amp):
        h = vq.quant_conv(vq.encoder(x))
    return h.float()


def _decode_quant(vq, q: torch.Tensor, amp: bool) -> torch.Tensor:
    with precision.autocast(enabled=amp):
        dec = vq.decoder(vq.post_quant_conv(q))
    return dec.float()


@torch.no_grad()
def decode_ids(vq, ids: torch.Tensor, batch: int = 64) -> np.ndarray:
    """uint8 images [N, H, W, 3] from token ids [N, h, w] (the app's decode path)."""
    vq.eval()
    n, h, w = ids.shape
    d = vq.config.vq_embed_dim
    out = []
    for i in range(0, n, batch):
        b = ids[i : i + batch]
        x = vq.decode(b.reshape(b.shape[0], -1), force_not_quantize=True, shape=(b.shape[0], h, w, d)).sample
        out.append(to_uint8(x))
    return np.concatenate(out)


def psnr(a_u8: np.ndarray, b_u8: np.ndarray) -> np.ndarray:
    """Per-image PSNR in dB (peak 255)."""
    mse = ((a_u8.astype(np.float64) - b_u8.astype(np.float64)) ** 2).reshape(len(a_u8), -1).mean(1)
    return 10 * np.log10(255.0**2 / np.maximum(mse, 1e-10))


@torch.no_grad()
def evaluate(vq, images_u8: np.ndarray, background: int | None = None) -> dict:
    ids = encode_ids(vq, images_u8, background=background)
    rec = decode_ids(vq, ids)
    p = psnr(images_u8, rec)
    counts = torch.bincount(ids.flatten(), minlength=vq.config.num_vq_embeddings).double()
    prob = counts / counts.sum()
    ent = -(prob[prob > 0] * prob[prob > 0].log()).sum().item()
    return {
        "psnr_mean": float(p.mean()),
        "psnr_median": float(np.median(p)),
        "codes_used": int((counts > 0).sum()),
        "perplexity": float(math.exp(ent)),
    }


def quantise_l2(z: torch.Tensor, codebook: torch.Tensor, beta: float = 0.25):
    """LlamaGen's quantiser: nearest code by cosine, latents and codes L2-normalised.

    z [B, D, h, w] encoder latents, codebook [V, D] (raw). Returns (q [B, D, h, w] with a
    straight-through gradient, codebook + beta * commitment loss, ids [B * h * w]). Saving the
    codebook row-normalised makes diffusers' plain L2 lookup pick the same ids (for unit codes,
    argmin |z - e| = argmax z.e) and decode the same latents.
    """
    b, d, h, w = z.shape
    zf = F.normalize(z.permute(0, 2, 3, 1).reshape(-1, d), dim=-1)
    e = F.normalize(codebook, dim=-1)
    ids = (zf @ e.T).argmax(-1)
    q = e[ids]
    loss = F.mse_loss(q, zf.detach()) + beta * F.mse_loss(zf, q.detach())
    q = zf + (q - zf).detach()
    return q.view(b, h, w, d).permute(0, 3, 1, 2), loss, ids


def _batch(data: torch.Tensor, step: int, crop_steps: int, batch: int, full_batch: int, crop: int, f: int,
           g: torch.Generator) -> torch.Tensor:
    """One step's images [B, 3, h, w] from ``data`` [N, 3, H, W]: during the first ``crop_steps`` steps,
    ``batch`` random crops of side ``crop`` at token-aligned offsets (multiples of ``f``; 4x cheaper per
    sample), then ``full_batch`` whole images (GroupNorm and attention see the real statistics)."""
    n = len(data)
    if step >= crop_steps:
        return data[torch.randint(0, n, (full_batch,), generator=g)]
    idx = torch.randint(0, n, (batch,), generator=g)
    span = (data.shape[-1] - crop) // f + 1
    oy = torch.randint(0, span, (batch,), generator=g) * f
    ox = torch.randint(0, span, (batch,), generator=g) * f
    return torch.stack([data[i, :, y : y + crop, x : x + crop] for i, y, x in zip(idx.tolist(), oy.tolist(), ox.tolist())])


@torch.no_grad()
def _reseed(codebook: torch.Tensor, rows: torch.Tensor, z: torch.Tensor, g: torch.Generator) -> None:
    """Codebook ``rows`` := random encoder outputs of ``z`` [B, D, h, w] plus a little noise."""
    flat = z.detach().permute(0, 2, 3, 1).reshape(-1, z.shape[1])
    pick = torch.randint(0, flat.shape[0], (len(rows),), generator=g)
    codebook.data[rows] = flat[pick] + 0.01 * torch.randn(len(rows), flat.shape[1], generator=g)


def train_vq(images_u8: np.ndarray, heldout_u8: np.ndarray | None, out_dir: str | Path | None, steps: int = 3000,
             batch: int = 32, lr: float = 1e-3, seed: int = 0, restart_every: int = 100, crop: int = 32,
             crop_fraction: float = 0.75, full_batch: int = 16, amp: bool = True, log=print,
             config_overrides: dict | None = None, l2_codes: bool = True):
    """Train and (if ``out_dir``) save with ``save_pretrained`` (safetensors). Returns (vq, metrics).

    images_u8 uint8 [N, H, W, 3]. ``l2_codes``: LlamaGen's code design (:func:`quantise_l2`; the saved
    codebook rows are unit vectors); otherwise diffusers' plain L2 ``VectorQuantizer``.
    """
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    vq = make_vq(**(config_overrides or {}))
    K = vq.config.num_vq_embeddings
    data = to_tensor(images_u8)
    opt = torch.optim.AdamW(vq.parameters(), lr=lr, betas=(0.9, 0.99), weight_decay=0.0)
    warm = max(1, min(100, steps // 10))

    def lr_at(s):
        if s < warm:
            return lr * (s + 1) / warm
        return lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, steps - warm))))

    usage = torch.zeros(K)
    codebook = vq.quantize.embedding.weight
    t0 = time.time()
    restarts = 0
    vq.train()
    crop_steps = int(steps * crop_fraction) if crop and crop < data.shape[-1] else 0
    f = 2 ** (len(vq.config.block_out_channels) - 1)  # pixels per token
    for step in range(steps):
        x = _batch(data, step, crop_steps, batch, full_batch, crop, f, g)
        for gr in opt.param_groups:
            gr["lr"] = lr_at(step)
        z = _encode_latent(vq, x, amp)
        if step == 0:  # codebook init from encoder outputs
            _reseed(codebook, torch.arange(K), z, g)
        if l2_codes:
            q, qloss, ids = quantise_l2(z, codebook)
        else:
            q, qloss, (_, _, ids) = vq.quantize(z)
        rec = _decode_quant(vq, q, amp)
        l1 = (rec - x).abs().mean()
        l2 = F.mse_loss(rec, x)
        loss = l1 + l2 + qloss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        usage += torch.bincount(ids.flatten(), minlength=K).float()
        if (step + 1) % restart_every == 0 and step + 1 < int(steps * 0.9):
            dead = (usage == 0).nonzero().flatten()
            if len(dead):
                _reseed(codebook, dead, z, g)
                restarts += len(dead)
            usage.zero_()
        if step % 100 == 0 or step == steps - 1:
            with torch.no_grad():
                p = 10 * torch.log10(4.0 / F.mse_loss(rec.clamp(-1, 1), x)).item()
            log(f"vq step {step}/{steps} loss {loss.item():.4f} l1 {l1.item():.4f} q {qloss.item():.4f} "
                f"psnr(batch) {p:.2f} restarts {restarts} {time.time() - t0:.0f}s")
    vq.eval()
    if l2_codes:
        with torch.no_grad():
            codebook.data.copy_(F.normalize(codebook.data, dim=-1))
    metrics = {"steps": steps, "l2_codes": l2_codes, "codebook_size": K, "crop_steps": crop_steps, "crop": crop,
               "batch": batch, "full_batch": full_batch, "train_seconds": round(time.time() - t0, 1),
               "dead_code_restarts": restarts}
    if heldout_u8 is not None and len(heldout_u8):
        metrics["heldout"] = evaluate(vq, heldout_u8)
        log(f"vq held-out: {metrics['heldout']}")
    if out_dir is not None:
        vq.save_pretrained(Path(out_dir), safe_serialization=True)
    return vq, metrics


def neighbour_distances(path: str | Path, ks: tuple[int, ...] = (1, 16, 64, 128, 256)) -> dict[str, list[float]]:
    """{k: [10%, 50%, 90%] quantiles over codes of the distance to the k-th nearest code} of a saved VQ's
    codebook (the LANTERN neighbour table's reach: how far apart the codes it treats as look-alikes are)."""
    cb = load_vq(path).quantize.embedding.weight.detach().float()
    ks = tuple(k for k in ks if k < len(cb))
    nb = build_neighbor_table(cb, max(ks))
    d = (cb[nb] - cb[:, None]).norm(dim=-1)
    q = torch.tensor([0.1, 0.5, 0.9])
    return {str(k): [round(float(x), 3) for x in d[:, k - 1].quantile(q)] for k in ks}
