"""The decoding half of ``diffusers.VQModel`` in plain PyTorch (no ``diffusers`` import).

Importing diffusers costs seconds at start-up (its ``autoencoders`` package imports every
autoencoder, and ``diffusers.utils`` imports ``torch._dynamo``), while the demo only ever
turns token ids into pixels. :class:`VQDecoderNet` holds exactly the modules that
``VQModel.decode(ids, force_not_quantize=True, shape=...)`` runs, under the same
parameter names, so it loads a ``VQModel.save_pretrained`` directory (``config.json`` +
``diffusion_pytorch_model.safetensors``; the encoder's weights are skipped) and computes
the same function (tests compare it with diffusers' own ``VQModel``). Training and
encoding images stay on diffusers.

Supported configs: ``norm_type="group"``, ``act_fn="silu"``, up blocks
``UpDecoderBlock2D`` / ``AttnUpDecoderBlock2D``, single-head attention (as diffusers
builds it for these blocks); anything else raises ``ValueError``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from safetensors.torch import load_file

from .checkpoints import uninitialized

__all__ = ["VQDecoderConfig", "VQDecoderNet"]

#: File written by ``VQModel.save_pretrained`` (safetensors only: no pickles are read).
WEIGHTS_NAME = "diffusion_pytorch_model.safetensors"
#: diffusers' ``eps`` for every GroupNorm in the VQ decoder.
_EPS = 1e-6
_UP_BLOCKS = ("UpDecoderBlock2D", "AttnUpDecoderBlock2D")
#: State-dict prefixes of ``VQModel`` that decoding does not use.
_ENCODE_ONLY = ("encoder.", "quant_conv.")


@dataclass(frozen=True)
class VQDecoderConfig:
    """The ``VQModel`` config fields that shape its decoder (defaults: ``VQModel.__init__``'s)."""

    out_channels: int = 3
    up_block_types: tuple[str, ...] = ("UpDecoderBlock2D",)
    block_out_channels: tuple[int, ...] = (64,)
    layers_per_block: int = 1
    latent_channels: int = 3
    num_vq_embeddings: int = 256
    norm_num_groups: int = 32
    vq_embed_dim: int | None = None
    mid_block_add_attention: bool = True

    @classmethod
    def from_vqmodel(cls, config: Mapping[str, Any]) -> "VQDecoderConfig":
        """From a ``VQModel`` config (``config.json`` or ``vq.config``); unsupported settings raise."""
        if config.get("norm_type", "group") != "group":
            raise ValueError(f"VQ decoder: norm_type {config['norm_type']!r} is not supported (only 'group')")
        if config.get("act_fn", "silu") != "silu":
            raise ValueError(f"VQ decoder: act_fn {config['act_fn']!r} is not supported (only 'silu')")
        kw = {f: config[f] for f in cls.__dataclass_fields__ if f in config}
        for f in ("up_block_types", "block_out_channels"):
            if f in kw:
                kw[f] = tuple(kw[f])
        cfg = cls(**kw)
        bad = [t for t in cfg.up_block_types if t not in _UP_BLOCKS]
        if bad:
            raise ValueError(f"VQ decoder: up block types {bad} are not supported (only {_UP_BLOCKS})")
        if len(cfg.up_block_types) != len(cfg.block_out_channels):
            raise ValueError("VQ decoder: up_block_types and block_out_channels differ in length")
        return cfg

    @property
    def embed_dim(self) -> int:
        """D, the codebook vector size."""
        return self.vq_embed_dim if self.vq_embed_dim is not None else self.latent_channels


class _Resnet(nn.Module):
    """diffusers' ``ResnetBlock2D`` without a time embedding: x + conv(silu(gn(conv(silu(gn(x))))))."""

    def __init__(self, c_in: int, c_out: int, groups: int):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, c_in, eps=_EPS)
        self.conv1 = nn.Conv2d(c_in, c_out, 3, padding=1)
        self.norm2 = nn.GroupNorm(groups, c_out, eps=_EPS)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1)
        self.conv_shortcut = nn.Conv2d(c_in, c_out, 1) if c_in != c_out else None

    def forward(self, x: Tensor) -> Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return (x if self.conv_shortcut is None else self.conv_shortcut(x)) + h


class _Attention(nn.Module):
    """diffusers' single-head spatial self-attention block (GroupNorm, q/k/v/out linears, residual)."""

    def __init__(self, c: int, groups: int):
        super().__init__()
        self.group_norm = nn.GroupNorm(groups, c, eps=_EPS)
        self.to_q = nn.Linear(c, c)
        self.to_k = nn.Linear(c, c)
        self.to_v = nn.Linear(c, c)
        self.to_out = nn.ModuleList([nn.Linear(c, c)])

    def forward(self, x: Tensor) -> Tensor:
        """x [B, C, H, W] -> [B, C, H, W]."""
        b, c, hh, ww = x.shape
        h = self.group_norm(x.view(b, c, hh * ww)).transpose(1, 2)  # [B, HW, C]
        q, k, v = (lin(h)[:, None] for lin in (self.to_q, self.to_k, self.to_v))  # [B, 1, HW, C]
        h = F.scaled_dot_product_attention(q, k, v)[:, 0]
        return self.to_out[0](h).transpose(1, 2).reshape(b, c, hh, ww) + x


class _Upsample(nn.Module):
    """Nearest-neighbour 2x upsampling followed by a 3x3 conv."""

    def __init__(self, c: int):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class _Block(nn.Module):
    """A resolution level: resnets (each followed by attention when ``attn``), then an optional upsampler."""

    def __init__(self, c_in: int, c_out: int, n: int, groups: int, attn: bool, upsample: bool):
        super().__init__()
        self.resnets = nn.ModuleList([_Resnet(c_in if i == 0 else c_out, c_out, groups) for i in range(n)])
        self.attentions = nn.ModuleList([_Attention(c_out, groups) for _ in range(n)] if attn else [])
        self.upsamplers = nn.ModuleList([_Upsample(c_out)] if upsample else [])

    def forward(self, x: Tensor) -> Tensor:
        for i, resnet in enumerate(self.resnets):
            x = resnet(x)
            if self.attentions:
                x = self.attentions[i](x)
        for up in self.upsamplers:
            x = up(x)
        return x


class _MidBlock(nn.Module):
    """resnet, (attention), resnet at the lowest resolution."""

    def __init__(self, c: int, groups: int, attn: bool):
        super().__init__()
        self.resnets = nn.ModuleList([_Resnet(c, c, groups), _Resnet(c, c, groups)])
        self.attentions = nn.ModuleList([_Attention(c, groups)] if attn else [])

    def forward(self, x: Tensor) -> Tensor:
        x = self.resnets[0](x)
        for attn in self.attentions:
            x = attn(x)
        return self.resnets[1](x)


class _Decoder(nn.Module):
    def __init__(self, cfg: VQDecoderConfig):
        super().__init__()
        widths, g = cfg.block_out_channels, cfg.norm_num_groups
        self.conv_in = nn.Conv2d(cfg.latent_channels, widths[-1], 3, padding=1)
        self.mid_block = _MidBlock(widths[-1], g, cfg.mid_block_add_attention)
        rev = list(reversed(widths))
        self.up_blocks = nn.ModuleList(
            _Block(rev[max(i - 1, 0)], rev[i], cfg.layers_per_block + 1, g,
                   attn=t == "AttnUpDecoderBlock2D", upsample=i < len(widths) - 1)
            for i, t in enumerate(cfg.up_block_types)
        )
        self.conv_norm_out = nn.GroupNorm(g, widths[0], eps=_EPS)
        self.conv_out = nn.Conv2d(widths[0], cfg.out_channels, 3, padding=1)

    def forward(self, z: Tensor) -> Tensor:
        x = self.mid_block(self.conv_in(z))
        for block in self.up_blocks:
            x = block(x)
        return self.conv_out(F.silu(self.conv_norm_out(x)))


class _Quantize(nn.Module):
    def __init__(self, n: int, d: int):
        super().__init__()
        self.embedding = nn.Embedding(n, d)


class VQDecoderNet(nn.Module):
    """Codebook lookup + ``post_quant_conv`` + decoder of a ``VQModel``, same parameter names.

    ``decode`` maps token ids to images with ``2 ** (levels - 1)`` pixels per token side.
    """

    def __init__(self, cfg: VQDecoderConfig):
        super().__init__()
        self.cfg = cfg
        self.quantize = _Quantize(cfg.num_vq_embeddings, cfg.embed_dim)
        self.post_quant_conv = nn.Conv2d(cfg.embed_dim, cfg.latent_channels, 1)
        self.decoder = _Decoder(cfg)

    @classmethod
    def from_state_dict(cls, cfg: VQDecoderConfig, sd: Mapping[str, Tensor], what: str = "VQ") -> "VQDecoderNet":
        """Build from ``VQModel`` weights (encoder keys are skipped); other missing or extra keys raise."""
        with uninitialized():
            net = cls(cfg)
        dec = {k: v for k, v in sd.items() if not k.startswith(_ENCODE_ONLY)}
        missing = sorted(set(net.state_dict()) - set(dec))
        unexpected = sorted(set(dec) - set(net.state_dict()))
        if missing or unexpected:
            raise ValueError(f"{what}: weights do not match the decoder: missing {missing[:8]}, "
                             f"unexpected {unexpected[:8]}")
        net.load_state_dict(dict(dec), strict=True, assign=True)
        return net.eval().requires_grad_(False)

    @classmethod
    def from_vqmodel(cls, vq: nn.Module) -> "VQDecoderNet":
        """The decoder of a ``diffusers.VQModel`` instance (its weights are shared, not copied)."""
        p = next(vq.parameters())
        return cls.from_state_dict(VQDecoderConfig.from_vqmodel(vq.config), vq.state_dict()).to(p.device, p.dtype)

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike[str], device: str | torch.device = "cpu",
                        dtype: torch.dtype = torch.float32) -> "VQDecoderNet":
        """From a ``VQModel.save_pretrained`` directory (``config.json`` + safetensors weights)."""
        path = Path(path)
        cfg = VQDecoderConfig.from_vqmodel(json.loads((path / "config.json").read_text()))
        weights = path / WEIGHTS_NAME
        if not weights.is_file():
            raise FileNotFoundError(f"{path}: no {WEIGHTS_NAME} (VQ weights are read from safetensors only)")
        return cls.from_state_dict(cfg, load_file(str(weights)), what=str(path)).to(device=device, dtype=dtype)

    def decode(self, ids: Tensor, shape: tuple[int, int, int, int]) -> Tensor:
        """ids [B, h * w] (raster order) with ``shape`` = (B, h, w, D) -> images [B, out_channels, H, W]
        (unclamped, nominally [-1, 1]); as ``VQModel.decode(ids, force_not_quantize=True, shape=shape).sample``."""
        z = self.quantize.embedding(ids).view(shape).permute(0, 3, 1, 2).contiguous()
        return self.decoder(self.post_quant_conv(z))
