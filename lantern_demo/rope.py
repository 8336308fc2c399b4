"""LlamaGen's 2D rotary position embedding, as tables looked up per position.

Of the ``head_dim / 2`` rotary pairs (adjacent elements ``(2m, 2m+1)``, not the
"rotate_half" layout) the first half rotate with the image row ``i // grid`` and the
second half with the column ``i % grid``; prefix positions follow ``GPTConfig.prefix_rope``;
positions outside the image get zeros (the LANTERN release's padded table). ``cfg`` below
is a ``gpt.GPTConfig`` (its grid, head_dim, rope_base and prefix_rope).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import Tensor

@functools.lru_cache(maxsize=16)
@torch.inference_mode(False)  # a normal tensor even when first asked for inside inference mode
def _rope_table_cached(grid: int, head_dim: int, base: float, device: str) -> Tensor:
    half = head_dim // 2
    # LlamaGen: freqs = 1 / base^(arange(0, half, 2)[:half//2] / half), in float32
    inv = 1.0 / (base ** (torch.arange(0, half, 2)[: half // 2].float() / half))
    t = torch.arange(grid)
    f = torch.outer(t, inv)  # [grid, head_dim/4]
    f2 = torch.cat([f[:, None, :].expand(-1, grid, -1),  # rotates with the row
                    f[None, :, :].expand(grid, -1, -1)], dim=-1)  # with the column
    table = torch.stack([torch.cos(f2), torch.sin(f2)], dim=-1).flatten(0, 1)  # [grid^2, half, 2]
    # one extra all-zero row: where positions outside the image are looked up
    return torch.cat([table, table.new_zeros(1, half, 2)]).to(device)


@functools.lru_cache(maxsize=16)
@torch.inference_mode(False)
def _rotation_table_cached(grid: int, head_dim: int, base: float, device: str) -> Tensor:
    return qkv_rotation(_rope_table_cached(grid, head_dim, base, device))


def padded_rope_table(cfg: Any, device: torch.device | str) -> Tensor:
    """float32 [grid*grid + 1, head_dim/2, 2]: :func:`rope_table` plus a zero row, where positions
    outside the image are looked up (built once per shape)."""
    return _rope_table_cached(cfg.grid, cfg.head_dim, float(cfg.rope_base), str(torch.device(device)))


def rope_table(grid: int, head_dim: int, base: float = 10000.0, device: torch.device | str = "cpu") -> Tensor:
    """float32 [grid*grid, head_dim/2, 2] (cos, sin) for image positions in raster order."""
    return _rope_table_cached(grid, head_dim, float(base), str(torch.device(device)))[:-1]


def table_rows(positions: Tensor, n: int) -> Tensor:
    """Row of a position table with ``n`` image rows plus a zero row: ``positions`` [T] inside
    ``0 .. n-1`` map to themselves, every other position to the zero row ``n``."""
    positions = positions.long()
    return torch.where((positions >= 0) & (positions < n), positions, n)


def rope_for_positions(cfg: Any, positions: Tensor, n_prefix: int = 0) -> Tensor:
    """float32 [n_prefix + T, head_dim/2, 2]: :func:`prefix_rope` for ``n_prefix`` prefix entries, then image positions.

    Positions outside ``0 .. grid*grid-1`` get zeros (no error).
    """
    table = _rope_table_cached(cfg.grid, cfg.head_dim, float(cfg.rope_base), str(positions.device))
    r = table[table_rows(positions, table.shape[0] - 1)]
    if n_prefix:
        r = torch.cat([prefix_rope(cfg, n_prefix, r.device), r], dim=0)
    return r


def rotation_for_positions(cfg: Any, positions: Tensor) -> Tensor:
    """complex64 [T, 3, 1, head_dim/2]: ``qkv_rotation(rope_for_positions(cfg, positions))`` by one lookup
    in a table built once (what a decode pass uses)."""
    table = _rotation_table_cached(cfg.grid, cfg.head_dim, float(cfg.rope_base), str(positions.device))
    return table[table_rows(positions, table.shape[0] - 1)]


def prefix_rope(cfg: Any, n: int, device: torch.device | str) -> Tensor:
    """float32 [n, head_dim/2, 2] rotary table of ``n`` prefix entries (see ``GPTConfig.prefix_rope``).

    "zero" (LlamaGen): cos = sin = 0, so prefix queries and keys are zero and every query gives
    every valid prefix key the attention logit 0. "identity": cos = 1, sin = 0, so prefix keys
    keep their content and image queries can attend to individual caption tokens.
    """
    r = torch.zeros(n, cfg.head_dim // 2, 2, device=device)
    if cfg.prefix_rope == "identity":
        r[..., 0] = 1.0
    return r


def qkv_rotation(rope: Tensor) -> Tensor:
    """complex64 [T, 3, 1, hd/2]: ``rope`` [T, hd/2, 2] (cos, sin) as ``cos + i sin`` for q and k,
    and 1 for v, so that one complex multiply rotates a fused [q | k | v] projection
    ``[B, T, 3, H, hd]`` (v times 1 is exactly v)."""
    r = torch.view_as_complex(rope.float().contiguous())
    return torch.stack([r, r, torch.ones_like(r)], dim=1)[:, :, None]


def rotate(x: Tensor, rotation: Tensor) -> Tensor:
    """Rotate interleaved pairs ``(2m, 2m+1)`` of ``x [..., hd]`` by complex ``rotation``
    (broadcastable to ``[..., hd/2]``), computed in float32: ``(x0 cos - x1 sin, x1 cos + x0 sin)``,
    bit for bit (a complex product rounds each of these four products and one sum, as the
    real formula does)."""
    xc = torch.view_as_complex(x.float().unflatten(-1, (-1, 2)))
    return torch.view_as_real(xc * rotation).flatten(-2).type_as(x)


def apply_rope(x: Tensor, rope: Tensor) -> Tensor:
    """x [B, T, H, hd]; rope [T, hd/2, 2] float32; interleaved pairs, computed in float32."""
    return rotate(x, torch.view_as_complex(rope.float().contiguous())[None, :, None])
