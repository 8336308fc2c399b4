"""Tiny models with random weights: the one place they are built.

Used by the ``tiny-random`` preset (``pipeline.tiny_random_pipeline``: untrained, a
fallback while no trained weights are present), the engine micro-benchmark
(``bench_engine``), the GPU check (``gpu_check``) and the tests. Every builder is
deterministic in its ``seed``.

* :func:`tiny_config`: a LlamaGen-architecture ``GPTConfig`` at a small shape;
* :func:`drafter_for`: an EAGLE drafter that shares a target's ``lm_head`` and copies its
  token embedding (as the released drafter does);
* :func:`tiny_gpt` / :func:`tiny_drafter`: weights larger than the training init, so that
  numerical comparisons between code paths see visibly different logits;
* :func:`tiny_random_pair`: a target and a drafter that knows part of it, so that
  speculative decoding accepts some drafts and rejects others;
* :func:`tiny_components`: text encoder, target, drafter, VQ decoder and neighbour table of
  the ``tiny-random`` preset.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from .drafter import Drafter
from .gpt import GPT, GPTConfig
from .neighbors import neighbor_table
from .text import WordTextEncoder
from .vq import VQDecoder
from .vq_net import VQDecoderConfig, VQDecoderNet

__all__ = ["tiny_config", "drafter_for", "randomise", "tiny_gpt", "tiny_drafter", "tiny_random_pair",
           "tiny_components"]

#: The word vocabulary of the tiny-random preset's text encoder (other words are reported unknown).
TINY_WORDS = "a an the of red green blue yellow face smiling cat dog heart star sun moon tree flag".split()


def tiny_config(vocab_size: int = 256, dim: int = 64, n_layer: int = 2, grid: int = 16, **overrides: Any) -> GPTConfig:
    """4 heads, SwiGLU width ``2 * dim``, 8 caption positions of width 32; ``overrides``: any GPTConfig field."""
    return GPTConfig(**{**dict(vocab_size=vocab_size, dim=dim, n_layer=n_layer, n_head=4, ffn_hidden=2 * dim,
                               cls_token_num=8, caption_dim=32, grid=grid), **overrides})


def drafter_for(target: GPT, n_layer: int = 1) -> Drafter:
    """A randomly initialised drafter of ``target``'s widths that references its ``lm_head`` and copies its embedding."""
    drafter = Drafter(target.cfg.as_drafter(n_layer), lm_head=target.lm_head).eval()
    with torch.no_grad():
        drafter.embed_tokens.weight.copy_(target.embed_tokens.weight)
    return drafter


def randomise(module: nn.Module, seed: int) -> None:
    """Overwrite every parameter and buffer with weights larger than the training init
    (norm weights near 1, matrices of unit gain), from a generator seeded with ``seed``."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) * (0.3 if p.dim() == 1 else 1.0 / p.shape[-1] ** 0.5))
        for b in module.buffers():
            b.copy_(torch.randn(b.shape, generator=g))


def tiny_gpt(seed: int = 0, **config: Any) -> GPT:
    """A :func:`randomise`-d target of ``tiny_config(**config)``."""
    torch.manual_seed(seed)
    model = GPT(tiny_config(**config)).eval()
    randomise(model, seed)
    return model


def tiny_drafter(target: GPT, seed: int = 1) -> Drafter:
    """A :func:`randomise`-d one-layer drafter of ``target`` (its embedding too)."""
    torch.manual_seed(seed)
    drafter = drafter_for(target)
    randomise(drafter, seed)
    return drafter


def tiny_random_pair(
    seed: int = 0, vocab: int = 512, dim: int = 128, n_layer: int = 4, grid: int = 16, mix: float = 1.0,
    **config: Any,
) -> tuple[GPT, Drafter, Tensor]:
    """A random target, a drafter that mimics part of it, and a condition.

    The target's token embeddings have unit scale and its residual writers
    (attention out and MLP down projections) are scaled by ``mix``, so its
    next-token logits are mostly lm_head(norm(embed(t))) plus a context-dependent part;
    the drafter passes its token embedding straight through (fc = [I, 0], its layer's
    writers zeroed), so it predicts exactly that bigram part. lm_head is scaled so that
    distributions are peaked like a trained model's (logit std about 3). ``config``
    overrides ``GPTConfig`` fields (e.g. ``cls_token_num=1``). Returns (target, drafter,
    cond [cls_token_num, caption_dim]).
    """
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    target = GPT(tiny_config(vocab, dim, n_layer, grid, **config)).eval()
    drafter = drafter_for(target)
    with torch.no_grad():
        target.lm_head.weight.normal_(0.0, 3.0 / dim**0.5, generator=gen)
        target.embed_tokens.weight.normal_(0.0, 1.0, generator=gen)
        for block in target.layers:
            block.self_attn.o_proj.weight.mul_(mix)
            block.mlp.down_proj.weight.mul_(mix)
        drafter.embed_tokens.weight.copy_(target.embed_tokens.weight)
        drafter.fc.weight.zero_()
        drafter.fc.weight[:, :dim] = torch.eye(dim)
        for block in drafter.layers:
            block.self_attn.o_proj.weight.zero_()
            block.mlp.down_proj.weight.zero_()
    cond = torch.randn(target.cfg.cls_token_num, target.cfg.caption_dim, generator=gen)
    return target, drafter, cond


def tiny_components(seed: int = 0, vocab: int = 256, dim: int = 64, n_layer: int = 2, grid: int = 16,
                    max_k: int = 32) -> tuple[WordTextEncoder, GPT, Drafter, VQDecoder, Tensor]:
    """The tiny-random preset at the training init: (word encoder over :data:`TINY_WORDS`, target,
    drafter, VQ decoder with 4x upsampling and codebook ``vocab``, neighbour table [vocab, max_k]), on the CPU."""
    torch.manual_seed(seed)
    text = WordTextEncoder(TINY_WORDS, dim=32, max_length=8).eval()
    target = GPT(tiny_config(vocab, dim, n_layer, grid)).eval()
    drafter = drafter_for(target)
    vq = VQDecoderNet(VQDecoderConfig(up_block_types=("UpDecoderBlock2D",) * 3, block_out_channels=(16, 16, 16),
                                      latent_channels=8, num_vq_embeddings=vocab, vq_embed_dim=4, norm_num_groups=8))
    decoder = VQDecoder(vq, grid)
    return text, target, drafter, decoder, neighbor_table(decoder.raw_codebook(), max_k)
