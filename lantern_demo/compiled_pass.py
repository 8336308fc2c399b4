"""The target's one-token decode pass as one compiled graph, for CPUs.

On a CPU a one-token pass of a small model is operator dispatch, not arithmetic: around
its 4 matmuls each layer runs some 40 small operators of 1-3 µs each, and those are most of
the pass (``docs/experiments/compiled_decode.py``). :func:`one_token_pass` is that pass
written for ``torch.compile``, so that inductor fuses everything between the matmuls (the
norms, the rotary, the cache write, the one-query attention, the SwiGLU) into a few C++ loops:

* one graph for every cache length and capacity: the new entry is written at a slot
  *tensor*; attention reads the first ``length`` entries, a symbolic size (dynamo's
  automatic dynamic shapes: the first call compiles for its length, the second for any),
  so it reads only the entries written so far, as the eager pass does; the capacity is
  marked dynamic (:func:`mark_capacity`);
* the one-query attention as products, a masked softmax and a sum, which inductor fuses;
  ``scaled_dot_product_attention`` would stay a separate call per layer.

The matmuls stay the library's. ``GPT.compile_one_token`` turns it on; ``GPT.forward`` then
runs every pass of one token per row (each AR step) through it and longer passes (verifying
drafts) eagerly. It computes what the eager pass computes, to float rounding: the rotary is
the real-valued form of the eager complex product and the attention sums in another order
(tested: logits within 1e-4 of the eager pass).
"""

from __future__ import annotations

import functools
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from .rope import table_rows

__all__ = ["one_token_pass", "mark_capacity", "compiled_one_token_pass"]

#: Per layer: (w_qkv [D, 3D], w_o [D, D], w_gate_up [D, 2F], w_down [F, D], norm1 [D], norm2 [D]),
#: the K-major decoding weights of ``kv_cache.decode_weight`` and the two RMSNorm weights
#: (``gpt.Block.decoding_weights``).
LayerWeights = tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]


def one_token_pass(token: Tensor, position: Tensor, slot: Tensor, length: int, valid: Tensor, rope: Tensor,
                   embed: Tensor, kv: Sequence[Tensor], layers: Sequence[LayerWeights], norm: Tensor, head: Tensor,
                   n_head: int, eps: float) -> tuple[Tensor, Tensor]:
    """Append one image token (the same in every row) and return (logits [R, 1, V], hidden [R, 1, D]).

    token [1] long; position [1] long, its image position (rotary row; positions outside
    ``0 .. N-1`` get the zero row: ``rope.table_rows``); slot [1] long, its index
    in the K/V buffers, and length = slot + 1, the entries it attends to; valid [R, S] bool
    (``KVCache.valid_keys``); rope [N + 1, hd/2, 2] float32 (cos, sin per rotary pair; the last
    row zero); embed [V, D]; kv: per layer [2 (k, v), R, H, S, hd], written at ``slot``; layers:
    see ``LayerWeights``; norm [D] (final RMSNorm); head [D, V]. hidden is after the final norm.
    """
    R, D = valid.shape[0], embed.shape[1]
    visible = valid[:, :length]  # [R, L]
    hd = D // n_head
    h = embed[token].expand(R, 1, D)
    row = table_rows(position, rope.shape[0] - 1)
    cos, sin = rope[row, :, 0], rope[row, :, 1]  # [1, hd/2]
    for buf, (w_qkv, w_o, w_gate_up, w_down, norm1, norm2) in zip(kv, layers):
        qkv = (F.rms_norm(h, (D,), norm1, eps) @ w_qkv).view(R, 3, n_head, hd // 2, 2)
        a, b = qkv[:, :2, ..., 0], qkv[:, :2, ..., 1]  # pairs (2m, 2m+1) of q and k: [R, 2, H, hd/2]
        qk = torch.stack([a * cos - b * sin, b * cos + a * sin], dim=-1).flatten(-2)  # [R, 2, H, hd]
        buf.index_copy_(3, slot, torch.stack([qk[:, 1], qkv[:, 2].flatten(-2)])[:, :, :, None])
        keys, values = buf[0, :, :, :length], buf[1, :, :, :length]  # [R, H, L, hd]
        scores = (qk[:, 0, :, None] * keys).sum(-1) * hd**-0.5  # [R, H, L]
        weights = scores.masked_fill(~visible[:, None], float("-inf")).softmax(-1)
        y = (weights[..., None] * values).sum(2)  # [R, H, hd]
        h = h + y.reshape(R, 1, D) @ w_o
        gate, up = (F.rms_norm(h, (D,), norm2, eps) @ w_gate_up).chunk(2, dim=-1)
        h = h + (F.silu(gate) * up) @ w_down
    hidden = F.rms_norm(h, (D,), norm, eps)
    return hidden @ head, hidden


def mark_capacity(valid: Tensor, kv: Sequence[Tensor]) -> None:
    """Mark the capacity S of a cache's ``valid`` [R, S] and K/V buffers as dynamic, so that one
    graph serves every capacity (the engine sizes the cache per method). Called once compiling
    is on (:func:`compiled_one_token_pass` has imported ``torch._dynamo``)."""
    torch._dynamo.mark_dynamic(valid, 1)
    for buf in kv:
        torch._dynamo.mark_dynamic(buf, 3)


#: Graphs of :func:`one_token_pass` dynamo may keep: two per model shape and number of rows
#: (its default of 8 would be reached by the app's two presets with and without guidance).
RECOMPILE_LIMIT = 64


@functools.cache
def compiled_one_token_pass() -> Callable[..., tuple[Tensor, Tensor]]:
    """:func:`one_token_pass` under ``torch.compile`` (inductor; compiled at its first calls, some
    seconds on a CPU). Called when compiling is turned on, not at start-up: ``torch.compile``
    imports ``torch._dynamo``. Inductor's C++ wrapper calls the graph's kernels and matmuls from
    C++ instead of generated Python: a pass this small is still partly call overhead."""
    import torch._dynamo

    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
    return torch.compile(one_token_pass, fullgraph=True, options={"cpp_wrapper": True})
