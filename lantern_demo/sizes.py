"""Sizes of the ``llamagen-t2i`` components and the GPU memory they need.

    python -m lantern_demo.sizes

Every model is instantiated on the ``meta`` device (no weights, no download):
GPT-XL and its drafter from ``checkpoints.xl_parameter_counts``, the VQ_16
decoder as a ``diffusers.VQModel`` (``vq.llamagen_vq_config``), and the
flan-t5-xl encoder from its published configuration (d_model 2048, d_ff 5120,
24 layers, 32 heads of 64, vocab 32128, gated GELU). Memory assumes bf16
weights, the neighbour table at K = 1000 (int64), and the KV caches of one
request with CFG (2 rows) at prefix + 256 image tokens + a 59-node tree.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from .checkpoints import xl_parameter_counts
from .gpt import GPTConfig

GiB = 1024**3


def t5_xl_config():
    """The flan-t5-xl ``T5Config`` (encoder sizes as published; no download)."""
    from transformers import T5Config

    return T5Config(vocab_size=32128, d_model=2048, d_kv=64, d_ff=5120, num_layers=24, num_heads=32,
                    feed_forward_proj="gated-gelu", tie_word_embeddings=False)


def t5_xl_encoder_parameters() -> int:
    from transformers import T5EncoderModel

    with torch.device("meta"):
        return sum(p.numel() for p in T5EncoderModel(t5_xl_config()).parameters())


def vq16_parameters() -> int:
    from diffusers import VQModel

    from .vq import llamagen_vq_config

    with torch.device("meta"):
        return sum(p.numel() for p in VQModel(**llamagen_vq_config()).parameters())


def llamagen_sizes(tree_tokens: int = 59, k_max: int = 1000, grid: int = 16) -> dict[str, float]:
    """Parameter counts and the bf16 GPU memory estimate (bytes) of a LlamaGen preset
    (``grid`` 16: llamagen-t2i, 256 px; 32: llamagen-t2i-512)."""
    counts = xl_parameter_counts()
    cfg = GPTConfig.llamagen_xl(grid=grid)
    t5 = t5_xl_encoder_parameters()
    vq = vq16_parameters()
    seq = cfg.cls_token_num + cfg.n_image_tokens + tree_tokens
    kv_target = cfg.n_layer * 2 * 2 * cfg.dim * seq * 2  # layers x (k, v) x rows x dim x seq x bf16
    kv_drafter = 1 * 2 * 2 * cfg.dim * seq * 2
    weights = 2 * (counts["gpt_parameters"] + counts["gpt_buffers"] + counts["drafter_parameters"] + t5 + vq)
    neighbors = cfg.vocab_size * k_max * 8
    return {
        "gpt_parameters": counts["gpt_parameters"],
        "drafter_parameters": counts["drafter_parameters"],
        "drafter_trainable": counts["drafter_trainable"],
        "t5_encoder_parameters": t5,
        "vq_parameters": vq,
        "weights_bytes_bf16": weights,
        "kv_cache_bytes": kv_target + kv_drafter,
        "neighbor_table_bytes": neighbors,
        "total_bytes": weights + kv_target + kv_drafter + neighbors,
    }


def main() -> None:
    """Print the table and each preset's estimate; ``--json PATH`` also writes them (the file Spaces.md cites)."""
    ap = argparse.ArgumentParser(description="Parameter counts and GPU memory of the LlamaGen presets")
    ap.add_argument("--json", type=Path, default=None, help="write the estimates here")
    args = ap.parse_args()
    sizes = {preset: llamagen_sizes(grid=grid) for preset, grid in (("llamagen-t2i", 16), ("llamagen-t2i-512", 32))}
    s = sizes["llamagen-t2i"]
    print("| component | parameters |\n|---|---|")
    for key, label in [("gpt_parameters", "GPT-XL target"), ("drafter_parameters", "EAGLE drafter (all)"),
                       ("drafter_trainable", "drafter, trained part"), ("t5_encoder_parameters", "flan-t5-xl encoder"),
                       ("vq_parameters", "VQ_16 tokenizer")]:
        print(f"| {label} | {s[key] / 1e6:.1f}M |")
    for preset, s in sizes.items():
        print(f"\n{preset}: bf16 weights {s['weights_bytes_bf16'] / GiB:.2f} GiB + KV caches "
              f"{s['kv_cache_bytes'] / GiB:.2f} GiB + neighbour table {s['neighbor_table_bytes'] / GiB:.2f} GiB = "
              f"{s['total_bytes'] / GiB:.2f} GiB before activations and the CUDA context.")
    if args.json is not None:
        args.json.write_text(json.dumps(sizes, indent=1) + "\n")


if __name__ == "__main__":
    main()
