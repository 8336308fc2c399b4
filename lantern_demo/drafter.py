"""The EAGLE-style one-layer drafter released with LANTERN (``jadohu/llamagen_drafter``).

Per entry the drafter takes the embedding of a token (its *own* ``embed_tokens``,
a frozen copy of the target's) and the feature that predicted that token,
concatenated **embedding first**, projects them with ``fc`` (Linear 2*dim -> dim,
with bias) and runs decoder layers whose first has NO input norm (post-attention
norm only, later layers if any are ordinary pre-norm blocks); there is no final
norm. Its output feature at an entry predicts the *next* token through the
target's ``lm_head``, which the drafter only references (it is not part of the
drafter's parameters or state dict): pass it at construction
(``Drafter(cfg, lm_head=target.lm_head)``) or later with :meth:`Drafter.set_lm_head`.

Sequence layout (``P = cls_token_num`` of the target; the drafter's prefix has
``P - 1`` entries, 119 for LlamaGen T2I):

* prefix entry ``k`` (``k = 0 .. P-2``) = fc(concat(target embeds[k + 1], target hidden[k]));
* image entry for token ``t_j`` (drafter cache position ``P - 1 + j``) =
  fc(concat(embed(t_j), feature that predicted t_j)); for committed tokens that
  feature is the target's hidden at its sequence position ``P - 1 + j``;
* RoPE: prefix entries get zeros, the entry for ``t_j`` gets image position ``j``
  (row ``j // grid``, column ``j % grid``), as in the release (its table is built
  with 119 zero rows);
* prefix key masking: entry ``k`` is valid iff target prefix position ``k + 1`` is
  (the caption's left padding, see ``lantern_demo.gpt``); each entry sees itself.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from .gpt import Block, GPTConfig, prepare_caption
from .rope import prefix_rope, qkv_rotation, rope_for_positions, rotation_for_positions
from .kv_cache import KVCache, decode_weight, stacked_linear, train_attention_mask
from .protocol import Prefix

__all__ = ["Drafter"]


class Drafter(nn.Module):
    """Implements the ``Drafter`` protocol (plus ``forward_train`` for teacher-forced training).

    cfg: the target's config with ``n_layer`` set to the drafter's depth (``cfg.as_drafter()``).
    """

    def __init__(self, cfg: GPTConfig, lm_head: nn.Module | None = None, freeze_embedding: bool = True):
        super().__init__()
        self.cfg = cfg
        self.vocab_size = cfg.vocab_size
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.fc = nn.Linear(2 * cfg.dim, cfg.dim, bias=True)
        self.layers = nn.ModuleList([Block(cfg, input_norm=i > 0) for i in range(cfg.n_layer)])
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=cfg.init_std)
        nn.init.zeros_(self.fc.bias)
        if freeze_embedding:
            self.embed_tokens.weight.requires_grad_(False)
        self._lm_head: list[nn.Module | None] = [lm_head]  # a list: keeps it out of parameters/state_dict
        self.cache: KVCache | None = None
        self._decode_head: Tensor | None = None  # the lm_head for decoding, made by the first forward

    # ---- lm_head reference
    def set_lm_head(self, lm_head: nn.Module) -> None:
        self._lm_head[0] = lm_head
        self._decode_head = None

    @property
    def lm_head(self) -> nn.Module:
        head = self._lm_head[0]
        if head is None:
            raise RuntimeError("drafter has no lm_head: pass the target's lm_head (Drafter(cfg, lm_head=...))")
        return head

    @property
    def length(self) -> int:
        return 0 if self.cache is None else self.cache.length

    @property
    def dtype(self) -> torch.dtype:
        return self.fc.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.fc.weight.device

    def _entries(self, embeds: Tensor, features: Tensor) -> Tensor:
        return self.fc(torch.cat([embeds.to(self.dtype), features.to(self.dtype)], dim=-1))

    def _head(self, x: Tensor, head_weight: Tensor | None = None) -> Tensor:
        """Logits [..., V] float32 of features x [..., D] through the target's lm_head
        (``head_weight``: its decoding copy, see ``kv_cache.decode_weight``)."""
        return stacked_linear(x.to(self.lm_head.weight.dtype), head_weight, self.lm_head).float()

    # ---- protocol
    @torch.no_grad()
    def prefill(self, cond: Any, rows: int, prefix: Prefix, max_tokens: int) -> None:
        """Reset the cache and encode the P-1 prefix entries from the target's ``Prefix``.

        ``cond`` is the same condition given to the target (only its padding mask is used).
        """
        cfg, P = self.cfg, self.cfg.cls_token_num
        R, Pt, _ = prefix.hidden.shape
        if R != rows or Pt != P:
            raise ValueError(f"prefix has {R} rows x {Pt} positions, expected {rows} x {P}")
        _, mask = prepare_caption(cond, P)
        key_mask = None
        if mask is not None and not bool(mask[1:].all()):
            key_mask = mask[1:].to(self.device)[None].expand(rows, P - 1).contiguous()
        self.cache = KVCache(cfg.n_layer, rows, cfg.n_head, cfg.head_dim, P - 1, max_tokens,
                             self.dtype, self.device, key_mask)
        self._decode_head = None  # the lm_head's weights may have changed since the last decode
        for layer in self.layers:
            layer.prepare_decode()
        if P == 1:  # a one-entry prefix (class conditioning) leaves the drafter no prefix entry
            return
        x = self._entries(prefix.embeds[:, 1:].to(self.device), prefix.hidden[:, :-1].to(self.device))
        rotation = qkv_rotation(prefix_rope(cfg, P - 1, self.device))
        attn_mask = self.cache.prefix_mask()
        for i, layer in enumerate(self.layers):
            x = layer(x, rotation, attn_mask, kv=self.cache.layer(i), offset=0)

    @torch.no_grad()
    def forward(self, tokens: Tensor, features: Tensor, positions: Tensor,
                mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Append entries for T tokens. features [R, T, D]. Returns (logits [R, T, V] float32, features_out [R, T, D])."""
        if self.cache is None:
            raise RuntimeError("call prefill() before forward()")
        c = self.cache
        tokens = tokens.to(self.device).reshape(-1)
        T = tokens.numel()
        if features.shape[:2] != (c.rows, T):
            raise ValueError(f"features must be [{c.rows}, {T}, D], got {tuple(features.shape)}")
        attn_mask = c.step_mask(mask, T)
        rotation = rotation_for_positions(self.cfg, positions.to(self.device).reshape(-1))
        emb = self.embed_tokens(tokens)[None].expand(c.rows, T, -1)
        x = self._entries(emb, features.to(self.device))
        offset = c.prefix + c.length
        for i, layer in enumerate(self.layers):
            x = layer(x, rotation, attn_mask, kv=c.layer(i), offset=offset)
        c.length += T
        if self._decode_head is None:
            self._decode_head = decode_weight(self.lm_head)
        return self._head(x, self._decode_head), x

    def keep(self, start: int, index: Tensor) -> None:
        if self.cache is None:
            raise RuntimeError("call prefill() before keep()")
        self.cache.keep(start, index)

    # ---- training
    def forward_train(self, prefix_embeds: Tensor, hidden: Tensor, tokens: Tensor,
                      key_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Teacher-forced pass over a whole sequence (no cache).

        prefix_embeds [B, P, D]: the target's prefix input embeddings
        (``GPT.embed_prefix``); hidden [B, P + N - 1, D]: the target's hidden states
        after its final norm (``GPT.forward_train``); tokens [B, N]; key_mask [B, P]
        bool (the target's caption key mask) or None.

        The drafter sequence has S = P - 1 + N entries: entry k pairs input embedding
        k + 1 of the target's sequence (prefix embeds, then embed(t_0..t_{N-1})) with
        hidden[:, k]. Returns (logits [B, S, V] float32, features [B, S, D]); training
        targets: features[:, k] ~ hidden[:, k + 1] (k < S - 1) and, for image entry
        j (k = P - 1 + j), logits[:, k] predicts tokens[:, j + 1].
        """
        cfg, P = self.cfg, self.cfg.cls_token_num
        B, N = tokens.shape
        S = P - 1 + N
        if prefix_embeds.shape[:2] != (B, P) or hidden.shape[:2] != (B, S):
            raise ValueError(f"need prefix_embeds [{B}, {P}, D] and hidden [{B}, {S}, D], got "
                             f"{tuple(prefix_embeds.shape)} and {tuple(hidden.shape)}")
        emb = torch.cat([prefix_embeds[:, 1:].to(self.dtype), self.embed_tokens(tokens.to(self.device))], dim=1)
        x = self._entries(emb, hidden)
        rotation = qkv_rotation(rope_for_positions(cfg, torch.arange(N, device=self.device), n_prefix=P - 1))
        attn_mask = None
        if key_mask is not None and not bool(key_mask[:, 1:].all()):
            attn_mask = train_attention_mask(key_mask[:, 1:].to(self.device), S)
        for layer in self.layers:
            x = layer(x, rotation, attn_mask, causal=True)
        return self._head(x), x
