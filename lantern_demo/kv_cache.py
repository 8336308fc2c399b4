"""What a cached decode pass works with: the KV buffer, its attention masks and the decoding weights.

KV cache: ``GPT.prefill`` (and ``Drafter.prefill``) allocates a :class:`KVCache`, one buffer
``[2 (k, v), R, H, P + max_tokens, head_dim]`` per layer (in the weights' dtype), and writes
the prefix; each ``forward`` appends image entries after ``length``; ``keep`` compacts every
layer. A buffer per layer (not one for all layers) is what lets the compiled one-token pass
(``lantern_demo.compiled_pass``) write each layer's buffer in place: views of one shared
buffer given to a compiled graph would make it copy the whole buffer at every pass. Prefix
keys of padded caption positions are masked for every query but their own
(:func:`train_attention_mask`, also what training uses).

Decoding weights (the per-pass cost of a small model on a CPU is mostly operator calls,
not arithmetic): a layer's bias-free linears that read the same input run as ONE matmul
with their weights stacked (q, k and v; gate and up), and decoding multiplies by K-major
copies of those stacks made at prefill (:func:`decode_weight`), which MKL runs faster;
results equal ``F.linear``'s from 4 rows on, within float rounding below. Training uses
the live weights (:func:`stacked_linear` without a decoding weight) so that gradients flow.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["KVCache", "decode_weight", "stacked_linear", "train_attention_mask"]


def train_attention_mask(key_mask: Tensor, seq_len: int) -> Tensor:
    """Causal mask [B, 1, S, S] (True = attend) with masked prefix keys, each position seeing itself."""
    B, P = key_mask.shape
    dev = key_mask.device
    m = torch.ones(seq_len, seq_len, dtype=torch.bool, device=dev).tril()[None].repeat(B, 1, 1)
    m[:, :, :P] &= key_mask[:, None, :]
    m |= torch.eye(seq_len, dtype=torch.bool, device=dev)[None]
    return m[:, None]


def _stack_weights(*linears: nn.Linear) -> Tensor:
    """The weights of bias-free ``linears`` stacked by output row: one matmul computes all their outputs."""
    return torch.cat([m.weight for m in linears])


@torch.inference_mode(False)  # a plain tensor, usable outside inference mode too
@torch.no_grad()
def decode_weight(*linears: nn.Linear) -> Tensor:
    """[K, N]: :func:`_stack_weights` transposed and contiguous, for decoding.

    ``x @ w`` with this K-major copy was measured 1.1-1.7x faster than ``F.linear``'s
    ``x @ W^T`` on the 2-core EPYC for 1-64 rows when the weight is not in cache (MKL
    then streams it without repacking), and gives the same results from 4 rows on.
    """
    return _stack_weights(*linears).t().contiguous()


def stacked_linear(x: Tensor, decode_weight: Tensor | None, *linears: nn.Linear) -> Tensor:
    """x [..., K] through the stacked bias-free ``linears`` -> [..., N]: ``x @ decode_weight`` when
    given (decoding), else ``F.linear`` of the live weights (training: gradients reach them)."""
    if decode_weight is not None:
        return x @ decode_weight
    return F.linear(x, _stack_weights(*linears))


class KVCache:
    """K/V buffers ``kv[layer] [2 (k, v), R, H, prefix + capacity, hd]`` plus the image-entry bookkeeping.

    ``prefix`` entries (the condition) come first and are never dropped; ``length``
    counts image entries after them. ``key_mask [R, prefix]`` (or None = all valid)
    masks prefix keys for every image query.
    """

    def __init__(self, n_layer: int, rows: int, n_head: int, head_dim: int, prefix: int, capacity: int,
                 dtype: torch.dtype, device: torch.device, key_mask: Tensor | None = None):
        self.kv = [torch.zeros(2, rows, n_head, prefix + capacity, head_dim, dtype=dtype, device=device)
                   for _ in range(n_layer)]
        self.rows, self.prefix, self.capacity = rows, prefix, capacity
        self.key_mask = key_mask
        self.device = torch.device(device)
        self.length = 0

    def layer(self, i: int) -> Tensor:
        """Layer ``i``'s buffer [2 (k, v), R, H, prefix + capacity, hd]."""
        return self.kv[i]

    def valid_keys(self) -> Tensor:
        """[R, prefix + capacity] bool: the keys an image query may see once written (prefix keys by
        ``key_mask``, every image entry); a pass also hides the entries after its own."""
        valid = torch.ones(self.rows, self.prefix + self.capacity, dtype=torch.bool, device=self.device)
        if self.key_mask is not None:
            valid[:, :self.prefix] = self.key_mask
        return valid

    def prefix_mask(self) -> Tensor:
        """[R, 1, P, P] bool: causal over the prefix, masked keys, diagonal always on."""
        P, dev = self.prefix, self.device
        km = self.key_mask if self.key_mask is not None else torch.ones(self.rows, P, dtype=torch.bool, device=dev)
        return train_attention_mask(km, P)

    def step_mask(self, mask: Tensor | None, T: int) -> Tensor | None:
        """Mask [R|1, 1, T, P + length + T] for appending T entries (None when nothing is masked)."""
        L, P = self.length, self.prefix
        if L + T > self.capacity:
            raise RuntimeError(f"KV cache overflow: {L} + {T} entries > capacity {self.capacity} (raise max_tokens)")
        dev = self.device
        if mask is None:
            if T == 1 and self.key_mask is None:
                return None
            j = torch.arange(L + T, device=dev)
            img = j[None, :] <= (L + torch.arange(T, device=dev))[:, None]
        else:
            if tuple(mask.shape) != (T, L + T):
                raise ValueError(f"mask must be [T, length + T] = {(T, L + T)}, got {tuple(mask.shape)}")
            img = mask.to(device=dev, dtype=torch.bool)
        if self.key_mask is None:
            pre = torch.ones(1, T, P, dtype=torch.bool, device=dev)
            full = torch.cat([pre, img[None]], dim=-1)
        else:
            pre = self.key_mask[:, None, :].expand(self.rows, T, P)
            full = torch.cat([pre, img[None].expand(self.rows, T, L + T)], dim=-1)
        return full[:, None]

    def keep(self, start: int, index: Tensor) -> None:
        L = self.length
        index = torch.as_tensor(index, dtype=torch.long, device=self.device).reshape(-1)
        n = index.numel()
        if not 0 <= start <= L:
            raise ValueError(f"keep start {start} outside 0..{L}")
        if n and (int(index.min()) < 0 or int(index.max()) >= L - start):
            raise ValueError(f"keep index out of range 0..{L - start - 1}")
        # a chain's accepted drafts are already in place (index = 0..n-1): nothing to move
        if n and not torch.equal(index, torch.arange(n, device=index.device)):
            lo = self.prefix + start
            for kv in self.kv:
                kv[..., lo:lo + n, :] = kv.index_select(-2, lo + index)
        self.length = start + n
