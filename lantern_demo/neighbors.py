"""Codebook neighbour tables for LANTERN's latent proximity sets N_k(x).

Only the K nearest entries of each code are kept (K = the largest k the UI
allows), computed on the model's device in row chunks and cached on disk,
keyed by a hash of the codebook, K and the metric.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor

METRICS = ("l2", "cosine")


def default_cache_dir() -> Path:
    """$LANTERN_CACHE, else ~/.cache/lantern-demo."""
    return Path(os.environ.get("LANTERN_CACHE", Path.home() / ".cache" / "lantern-demo"))


def build_neighbor_table(codebook: Tensor, K: int, metric: str = "l2", chunk: int = 1024) -> Tensor:
    """Nearest codebook entries of every code, closest first, the code itself excluded.

    codebook: [V, C] raw codebook vectors (any device/dtype; computed in float32).
    metric: "l2" (Euclidean, as LANTERN's release) or "cosine".
    Returns int64 [V, K] on the codebook's device. Ties are broken by index.
    """
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
    V = codebook.shape[0]
    if not 0 < K < V:
        raise ValueError(f"K must be in [1, {V - 1}], got {K}")
    x = codebook.float()
    if metric == "cosine":
        x = torch.nn.functional.normalize(x, dim=1)
    sq = (x * x).sum(1)
    rows = []
    for start in range(0, V, chunk):
        block = x[start : start + chunk]
        # squared L2 distance; for unit vectors it is a monotone function of cosine distance
        dist = sq[start : start + chunk, None] + sq[None, :] - 2.0 * block @ x.T
        idx = torch.arange(start, start + block.shape[0], device=x.device)
        dist[torch.arange(block.shape[0], device=x.device), idx] = float("inf")
        rows.append(torch.sort(dist, dim=1, stable=True).indices[:, :K])
    return torch.cat(rows)


def codebook_key(codebook: Tensor, K: int, metric: str) -> str:
    """Cache key: sha256 of the float32 codebook bytes, with K and the metric."""
    digest = hashlib.sha256(codebook.detach().float().cpu().contiguous().numpy().tobytes()).hexdigest()[:16]
    return f"neighbors-{digest}-K{K}-{metric}"


def neighbor_table(
    codebook: Tensor, K: int, metric: str = "l2", cache_dir: Path | None = None
) -> Tensor:
    """The [V, K] table for ``codebook``, from the disk cache when present.

    The table is computed on the codebook's device and returned there (int64).
    Stored as int32 safetensors in ``cache_dir`` (default ``default_cache_dir()``).
    """
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    path = cache_dir / f"{codebook_key(codebook, K, metric)}.safetensors"
    if path.exists():
        return load_file(path)["neighbors"].to(device=codebook.device, dtype=torch.int64)
    table = build_neighbor_table(codebook, K, metric)
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        save_file({"neighbors": table.to(torch.int32).cpu().contiguous()}, tmp)
        tmp.replace(path)
    except OSError:
        pass  # a read-only cache only costs recomputation
    return table
