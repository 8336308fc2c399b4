"""LlamaGen's text-to-image GPT (the LANTERN *target*).

Architecture (LlamaGen T2I stage I, "GPT-XL" preset ``GPTConfig.llamagen_xl()``):

* a decoder-only Llama: RMSNorm (computed in float32), SwiGLU MLP, no biases,
  multi-head attention (no GQA), ``F.scaled_dot_product_attention``;
* the condition is a T5 caption embedding ``[cls_token_num, caption_dim]``
  projected by ``cls_embedding.cap_proj`` (fc1 -> tanh-GELU -> fc2, no biases);
  its output fills the ``P = cls_token_num`` prefix positions; the unconditional
  row of classifier-free guidance uses the buffer ``cls_embedding.uncond_embedding``;
* image tokens are VQ indices in raster order; image token ``i`` sits at
  sequence position ``P + i``; the logits at sequence position ``P - 1 + i``
  predict image token ``i`` (so the last prefix position predicts token 0);
* 2D rotary embedding as in LlamaGen (``lantern_demo.rope``): pairs rotate with the
  image row or column; prefix positions get ``cos = sin = 0`` (their q and k are zero),
  which is what LlamaGen's released weights were trained with
  (``GPTConfig.prefix_rope = "zero"``); ``"identity"`` keeps the caption keys' content and
  is what the shipped emoji weights use (``assets/emoji/*/config.json``).

Module names follow the HF-style layout (``embed_tokens``, ``layers.i.self_attn.q_proj``,
``mlp.gate_proj``, ``input_layernorm``, ...) so that our ``state_dict`` is the
HF-style checkpoint without its ``model.`` prefix; ``lantern_demo.checkpoints``
converts from/to the original FoundationVision layout.

The condition ``cond`` accepted by :meth:`GPT.prefill` (see :func:`prepare_caption`):

* ``None``: unconditional; every row uses ``uncond_embedding``;
* a tensor ``[L, caption_dim]`` (or ``[1, L, caption_dim]``), ``1 <= L <= P``:
  the *valid* caption tokens in order. When ``L < P`` they are LEFT-padded with
  zero rows to ``P`` (valid tokens at the end, as LlamaGen does) and the padded
  positions are masked out as attention keys;
* a tensor ``[P, caption_dim]``: used as is, every position valid. A zero-padded
  caption (a text encoder's ``emb`` row) passed this way is NOT masked: its zero rows
  are attended like tokens, unlike LlamaGen's sampler, which masks the padded keys;
  pass it with its mask (``Caption(emb, mask)``, or the ``TextEmbedding`` itself);
* a :class:`Caption` ``(emb, mask)`` (or a plain ``(emb, mask)`` tuple, or any
  object with ``.emb``/``.mask`` such as ``lantern_demo.text.TextEmbedding``;
  a leading batch dimension of 1 is dropped) with
  ``emb [L, caption_dim]`` and ``mask [L]`` bool (True = valid token): rows
  with ``mask`` False are zeroed and masked out as keys; ``L < P`` is
  left-padded with masked zero rows.

Masking follows LlamaGen's sampler: padded caption positions are removed as
keys for every query except themselves (each position always attends to itself),
and the *same* key mask is applied to the unconditional row.

``prefill``/``forward`` run under ``torch.no_grad`` (their outputs stay usable in
autograd); the engine runs whole decodes under ``torch.inference_mode``, which skips
autograd's bookkeeping on every operator call. Decoding keeps a ``KVCache`` and multiplies
by decoding copies of the weights made at ``prefill`` (both in ``lantern_demo.kv_cache``);
each attention rotates q, k and v with ONE complex multiply (v's rotation is 1), the norms
are one ``F.rms_norm`` call, and rotations come from a table per image position built once.
Each of these gives bit-identical results to the separate operations (tested). After
:meth:`GPT.compile_one_token` (CPU, float32), passes of one token per row run through the
compiled ``compiled_pass.one_token_pass`` instead (equal to float rounding). Training uses
:meth:`GPT.forward_train` (same modules, no cache, the live weights so that gradients flow).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .compiled_pass import LayerWeights, compiled_one_token_pass, mark_capacity
from .kv_cache import KVCache, decode_weight, stacked_linear, train_attention_mask
from .protocol import Prefix
from .rope import padded_rope_table, prefix_rope, qkv_rotation, rope_for_positions, rotate, rotation_for_positions

logger = logging.getLogger(__name__)

__all__ = [
    "GPTConfig",
    "Caption",
    "GPT",
    "RMSNorm",
    "Attention",
    "MLP",
    "Block",
    "CaptionEmbedder",
    "prepare_caption",
    "prepare_caption_batch",
]


# --------------------------------------------------------------------------- config

PREFIX_ROPE = ("zero", "identity")


@dataclass
class GPTConfig:
    vocab_size: int = 16384
    dim: int = 1280
    n_layer: int = 36
    n_head: int = 20
    ffn_hidden: int = 3584  # SwiGLU intermediate size
    cls_token_num: int = 120  # caption prefix length P
    caption_dim: int = 2048  # T5-XL width
    grid: int = 16  # image is grid x grid tokens
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    class_dropout_p: float = 0.1  # caption dropout used by training code
    init_std: float = 0.02  # weight init for training from scratch
    prefix_rope: str = "zero"  # rotary table of the prefix entries: "zero" (LlamaGen) or "identity"

    def __post_init__(self) -> None:
        if self.dim % self.n_head:
            raise ValueError(f"dim {self.dim} is not divisible by n_head {self.n_head}")
        if self.head_dim % 4:
            raise ValueError(f"head_dim {self.head_dim} must be divisible by 4 for 2D RoPE")
        if self.cls_token_num < 1:
            raise ValueError("cls_token_num must be >= 1")
        if self.prefix_rope not in PREFIX_ROPE:
            raise ValueError(f"prefix_rope must be one of {PREFIX_ROPE}, got {self.prefix_rope!r}")

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_head

    @property
    def n_image_tokens(self) -> int:
        return self.grid * self.grid

    @classmethod
    def llamagen_xl(cls, **overrides: Any) -> "GPTConfig":
        """LlamaGen T2I GPT-XL (stage I, 256 px): 36 x 1280, 20 heads, vocab 16384."""
        base = dict(vocab_size=16384, dim=1280, n_layer=36, n_head=20, ffn_hidden=3584,
                    cls_token_num=120, caption_dim=2048, grid=16)
        base.update(overrides)
        return cls(**base)

    @classmethod
    def llamagen_xl_drafter(cls, **overrides: Any) -> "GPTConfig":
        """The LANTERN drafter for GPT-XL: the same widths, one layer."""
        return cls.llamagen_xl(n_layer=1, **overrides)

    def as_drafter(self, n_layer: int = 1) -> "GPTConfig":
        return dataclasses.replace(self, n_layer=n_layer)


@dataclass
class Caption:
    """A caption condition: ``emb [L, caption_dim]`` and optional ``mask [L]`` (True = valid)."""

    emb: Tensor
    mask: Tensor | None = None


# --------------------------------------------------------------------------- captions


def prepare_caption_batch(emb: Tensor, mask: Tensor | None, prefix_len: int) -> tuple[Tensor, Tensor | None]:
    """Left-pad a batch of captions to the prefix length.

    emb: [B, L, C] with L <= prefix_len; mask: [B, L] bool (True = valid) or None.
    With mask None, all L rows are valid (so if L < prefix_len the padding is masked).
    Returns (emb [B, P, C] with invalid rows zeroed, key_mask [B, P] bool or None
    when every position is valid).
    """
    if emb.dim() != 3:
        raise ValueError(f"caption embedding must be [B, L, C], got {tuple(emb.shape)}")
    B, L, C = emb.shape
    if L < 1 or L > prefix_len:
        raise ValueError(f"caption length {L} must be in 1..{prefix_len}")
    if mask is not None:
        mask = mask.to(device=emb.device, dtype=torch.bool)
        if mask.shape != (B, L):
            raise ValueError(f"caption mask must be {(B, L)}, got {tuple(mask.shape)}")
        emb = emb * mask[..., None].to(emb.dtype)
    pad = prefix_len - L
    if pad:
        emb = torch.cat([emb.new_zeros(B, pad, C), emb], dim=1)
        if mask is None:
            mask = torch.ones(B, L, dtype=torch.bool, device=emb.device)
        mask = torch.cat([torch.zeros(B, pad, dtype=torch.bool, device=emb.device), mask], dim=1)
    if mask is not None and bool(mask.all()):
        mask = None
    return emb, mask


def prepare_caption(cond: Any, prefix_len: int) -> tuple[Tensor | None, Tensor | None]:
    """Normalise a prefill condition (see the module docstring) to ``(emb [P, C] | None, mask [P] | None)``."""
    if cond is None:
        return None, None
    if isinstance(cond, Caption) or hasattr(cond, "emb"):  # also lantern_demo.text.TextEmbedding
        emb, mask = cond.emb, getattr(cond, "mask", None)
    elif isinstance(cond, (tuple, list)) and len(cond) == 2:
        emb, mask = cond
    elif isinstance(cond, Tensor):
        emb, mask = cond, None
    else:
        raise TypeError(f"unsupported condition type {type(cond).__name__}")
    if emb.dim() == 3 and emb.shape[0] == 1:
        emb = emb[0]
        if mask is not None and mask.dim() == 2:
            mask = mask[0]
    if emb.dim() != 2:
        raise ValueError(f"caption embedding must be [L, C] or [1, L, C] (one caption per prefill), got {tuple(emb.shape)}")
    e, m = prepare_caption_batch(emb[None], None if mask is None else mask[None], prefix_len)
    return e[0], None if m is None else m[0]


# --------------------------------------------------------------------------- layers


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        """x [..., dim] -> normalised in float32, cast back to x's dtype, times ``weight``.

        In float32 ``F.rms_norm`` with the weight is that formula in one call, bit for bit (tested).
        """
        if x.dtype == self.weight.dtype == torch.float32:
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        return F.rms_norm(x.float(), self.weight.shape, None, self.eps).type_as(x) * self.weight


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x)). LlamaGen's w1 = gate, w3 = up, w2 = down.

    gate and up run as one matmul (:func:`stacked_linear`).
    """

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)
        self._decode: tuple[Tensor | None, Tensor | None] = (None, None)

    def prepare_decode(self) -> None:
        """Make the decoding weights (:func:`decode_weight`) from the weights as they are now."""
        self._decode = (decode_weight(self.gate_proj, self.up_proj), decode_weight(self.down_proj))

    def forward(self, x: Tensor, decoding: bool = False) -> Tensor:
        """x [..., dim]. ``decoding``: use the weights made by :meth:`prepare_decode`."""
        gate_up, down = self._decode if decoding else (None, None)
        gate, up = stacked_linear(x, gate_up, self.gate_proj, self.up_proj).chunk(2, dim=-1)
        return stacked_linear(F.silu(gate) * up, down, self.down_proj)


class Attention(nn.Module):
    """Multi-head attention; q, k and v run as one matmul and one complex rotation."""

    def __init__(self, dim: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.head_dim = dim // n_head
        self.q_proj = nn.Linear(dim, dim, bias=False)
        self.k_proj = nn.Linear(dim, dim, bias=False)
        self.v_proj = nn.Linear(dim, dim, bias=False)
        self.o_proj = nn.Linear(dim, dim, bias=False)
        self._decode: tuple[Tensor | None, Tensor | None] = (None, None)

    def prepare_decode(self) -> None:
        """Make the decoding weights (:func:`decode_weight`) from the weights as they are now."""
        self._decode = (decode_weight(self.q_proj, self.k_proj, self.v_proj), decode_weight(self.o_proj))

    def forward(
        self,
        x: Tensor,
        rotation: Tensor,
        mask: Tensor | None = None,
        causal: bool = False,
        kv: Tensor | None = None,
        offset: int = 0,
    ) -> Tensor:
        """x [B, T, D]; rotation [T, 3, 1, hd/2] complex (:func:`qkv_rotation`); mask bool
        broadcastable to [B, H, T, S] (True = attend).

        With ``kv`` (this layer's cache buffer [2, B, H, cap, hd]) the layer decodes with the
        weights made by :meth:`prepare_decode`: the new keys/values are written at
        ``offset .. offset+T`` and attention runs over cache entries ``0 .. offset+T``.
        """
        B, T, D = x.shape
        H, hd = self.n_head, self.head_dim
        w_qkv, w_o = self._decode if kv is not None else (None, None)
        qkv = rotate(stacked_linear(x, w_qkv, self.q_proj, self.k_proj, self.v_proj).view(B, T, 3, H, hd), rotation)
        q = qkv[:, :, 0].transpose(1, 2)  # [B, H, T, hd]
        if kv is None:
            k, v = qkv[:, :, 1].transpose(1, 2), qkv[:, :, 2].transpose(1, 2)
        else:
            kv[:, :, :, offset:offset + T] = qkv[:, :, 1:].permute(2, 0, 3, 1, 4)
            k, v = kv[0, :, :, :offset + T], kv[1, :, :, :offset + T]
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and mask is None)
        return stacked_linear(y.transpose(1, 2).reshape(B, T, D), w_o, self.o_proj)


class Block(nn.Module):
    """Pre-norm Llama block. ``input_norm=False`` gives the EAGLE drafter's first layer."""

    def __init__(self, cfg: GPTConfig, input_norm: bool = True):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.dim, cfg.norm_eps) if input_norm else nn.Identity()
        self.self_attn = Attention(cfg.dim, cfg.n_head)
        self.post_attention_layernorm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.mlp = MLP(cfg.dim, cfg.ffn_hidden)

    def prepare_decode(self) -> None:
        """Make the decoding weights from the weights as they are now (call before filling a KV cache)."""
        self.self_attn.prepare_decode()
        self.mlp.prepare_decode()

    def decoding_weights(self) -> LayerWeights:
        """The weights :meth:`prepare_decode` made, with the two norms', in ``compiled_pass`` order."""
        return (*self.self_attn._decode, *self.mlp._decode, self.input_layernorm.weight.detach(),
                self.post_attention_layernorm.weight.detach())

    def forward(self, x: Tensor, rotation: Tensor, mask: Tensor | None = None, causal: bool = False,
                kv: Tensor | None = None, offset: int = 0) -> Tensor:
        """x [B, T, D]; see :meth:`Attention.forward`. With ``kv`` the block decodes with the
        weights made by :meth:`prepare_decode`."""
        x = x + self.self_attn(self.input_layernorm(x), rotation, mask, causal, kv, offset)
        return x + self.mlp(self.post_attention_layernorm(x), decoding=kv is not None)


class CaptionMLP(nn.Module):
    def __init__(self, in_dim: int, dim: int):
        super().__init__()
        self.fc1 = nn.Linear(in_dim, dim, bias=False)
        self.fc2 = nn.Linear(dim, dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class CaptionEmbedder(nn.Module):
    """``cap_proj`` (caption_dim -> dim) and the unconditional caption buffer ``uncond_embedding``."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cap_proj = CaptionMLP(cfg.caption_dim, cfg.dim)
        self.register_buffer(
            "uncond_embedding", torch.randn(cfg.cls_token_num, cfg.caption_dim) / math.sqrt(cfg.caption_dim)
        )

    def forward(self, caption: Tensor, drop: Tensor | None = None) -> Tensor:
        """caption [B, P, C]; drop [B] bool: rows replaced by ``uncond_embedding``. Returns [B, P, D]."""
        if drop is not None:
            caption = torch.where(drop.to(caption.device)[:, None, None], self.uncond_embedding.to(caption.dtype), caption)
        return self.cap_proj(caption)


# --------------------------------------------------------------------------- model


class GPT(nn.Module):
    """LlamaGen T2I GPT implementing the ``Target`` protocol (plus ``forward_train``)."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.vocab_size = cfg.vocab_size
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.cls_embedding = CaptionEmbedder(cfg)
        self.layers = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        self.cache: KVCache | None = None
        self._decode_head: Tensor | None = None  # lm_head for decoding, made at prefill
        self._one_token: Any = None  # the compiled one-token pass, once compile_one_token() turned it on
        self._one_token_inputs: dict[str, Any] = {}  # its inputs that stay fixed from one prefill to the next
        self.apply(self._init)

    def _init(self, m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=self.cfg.init_std)

    # ---- protocol
    @property
    def length(self) -> int:
        return 0 if self.cache is None else self.cache.length

    @property
    def dtype(self) -> torch.dtype:
        return self.embed_tokens.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.embed_tokens.weight.device

    def embed_prefix(self, caption: Tensor, caption_mask: Tensor | None = None,
                     drop: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """caption [B, L, C] -> (prefix input embeddings [B, P, D], key_mask [B, P] | None).

        Left-pads to P (see :func:`prepare_caption_batch`); ``drop [B]`` bool rows use
        ``uncond_embedding`` (keeping the caption's key mask, as LlamaGen's training does).
        """
        emb, key_mask = prepare_caption_batch(caption.to(self.device), caption_mask, self.cfg.cls_token_num)
        return self.cls_embedding(emb.to(self.dtype), drop), key_mask

    def compile_one_token(self, on: bool = True) -> bool:
        """Run every later pass of one token per row through the compiled
        ``compiled_pass.one_token_pass`` (float32 on a CPU, where a pass is mostly operator
        dispatch; the first such pass compiles it); returns False, changing nothing, elsewhere.
        ``on=False`` goes back to the eager pass."""
        if not on or self.device.type != "cpu" or self.dtype != torch.float32:
            self._one_token, self._one_token_inputs = None, {}
            return False
        self._one_token = compiled_one_token_pass()
        return True

    @property
    def one_token_compiled(self) -> bool:
        """Whether passes of one token per row run compiled (``compile_one_token``)."""
        return self._one_token is not None

    def _one_token_pass_inputs(self) -> dict[str, Any]:
        """The inputs of ``compiled_pass.one_token_pass`` that stay fixed until the next prefill:
        this cache's buffers (capacity marked dynamic) and the decoding weights made at prefill."""
        cfg, cache = self.cfg, self.cache
        assert cache is not None
        inputs = dict(valid=cache.valid_keys(), rope=padded_rope_table(cfg, self.device),
                      embed=self.embed_tokens.weight.detach(), kv=cache.kv,
                      layers=[b.decoding_weights() for b in self.layers], norm=self.norm.weight.detach(),
                      head=self._decode_head, n_head=cfg.n_head, eps=cfg.norm_eps)
        mark_capacity(inputs["valid"], cache.kv)
        return inputs

    @torch.no_grad()
    def prefill(self, cond: Any, rows: int, max_tokens: int) -> Prefix:
        """Reset the cache and run the prefix. cond: see the module docstring; rows 1 or 2."""
        P = self.cfg.cls_token_num
        if rows not in (1, 2):
            raise ValueError(f"rows must be 1 or 2, got {rows}")
        emb, mask = prepare_caption(cond, P)
        uncond = self.cls_embedding.uncond_embedding
        cond_row = uncond if emb is None else emb.to(device=self.device, dtype=uncond.dtype)
        caption = torch.stack([cond_row, uncond][:rows]) if rows == 2 else cond_row[None]
        embeds = self.cls_embedding.cap_proj(caption.to(self.dtype))  # [R, P, D]
        key_mask = None if mask is None else mask.to(self.device)[None].expand(rows, P).contiguous()
        return self.prefill_embeds(embeds, key_mask, max_tokens)

    @torch.no_grad()
    def prefill_embeds(self, embeds: Tensor, key_mask: Tensor | None, max_tokens: int) -> Prefix:
        """Reset the cache and run prefix input embeddings ``embeds [R, P, D]`` for any number of rows.

        key_mask [R, P] bool (True = valid) or None. ``prefill`` is this for one caption and
        its CFG row; batched samplers (``lantern_demo.emoji.self_samples``) pass many captions.
        """
        cfg, P = self.cfg, self.cfg.cls_token_num
        rows = embeds.shape[0]
        if embeds.shape[1:] != (P, cfg.dim):
            raise ValueError(f"prefix embeddings must be [R, {P}, {cfg.dim}], got {tuple(embeds.shape)}")
        self.cache = KVCache(cfg.n_layer, rows, cfg.n_head, cfg.head_dim, P, max_tokens,
                             self.dtype, self.device, key_mask)
        rotation = qkv_rotation(prefix_rope(cfg, P, self.device))
        attn_mask = self.cache.prefix_mask()
        self._decode_head = decode_weight(self.lm_head)
        h = embeds
        for i, layer in enumerate(self.layers):
            layer.prepare_decode()
            h = layer(h, rotation, attn_mask, kv=self.cache.layer(i), offset=0)
        if self._one_token is not None:
            self._one_token_inputs = self._one_token_pass_inputs()
        hidden = self.norm(h)
        logits = stacked_linear(hidden[:, -1], self._decode_head).float()
        return Prefix(logits=logits, hidden=hidden, embeds=embeds)

    @torch.no_grad()
    def forward(self, tokens: Tensor, positions: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Append T image tokens: ``tokens [T]`` (the same in every row) or ``[R, T]`` (one sequence
        per row, for batched sampling); positions [T]. Returns (logits [R, T, V] float32, hidden
        [R, T, D] after the final norm)."""
        if self.cache is None:
            raise RuntimeError("call prefill() before forward()")
        c = self.cache
        tokens = tokens.to(self.device)
        tokens = tokens.reshape(-1) if tokens.dim() != 2 else tokens
        T = tokens.shape[-1]
        if tokens.dim() == 2 and tokens.shape[0] != c.rows:
            raise ValueError(f"tokens must be [T] or [{c.rows}, T], got {tuple(tokens.shape)}")
        offset = c.prefix + c.length
        if self._one_token_inputs and T == 1 and mask is None and tokens.dim() == 1 and c.length < c.capacity:
            try:
                logits, hidden = self._one_token(tokens, positions.to(self.device).reshape(1),
                                                 torch.tensor([offset], device=self.device), offset + 1,
                                                 **self._one_token_inputs)
            except Exception:  # compiling a new shape failed (it fails before running): eager from now on
                logger.exception("the compiled one-token pass failed; decoding stays eager")
                self.compile_one_token(False)
            else:
                c.length += 1
                return logits, hidden
        attn_mask = c.step_mask(mask, T)
        rotation = rotation_for_positions(self.cfg, positions.to(self.device).reshape(-1))
        h = self.embed_tokens(tokens)
        h = h.expand(c.rows, T, -1) if tokens.dim() == 1 else h
        for i, layer in enumerate(self.layers):
            h = layer(h, rotation, attn_mask, kv=c.layer(i), offset=offset)
        hidden = self.norm(h)
        c.length += T
        return stacked_linear(hidden, self._decode_head).float(), hidden

    def keep(self, start: int, index: Tensor) -> None:
        if self.cache is None:
            raise RuntimeError("call prefill() before keep()")
        self.cache.keep(start, index)

    # ---- training
    def forward_train(self, caption_emb: Tensor, tokens: Tensor, caption_drop_mask: Tensor | None = None,
                      caption_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Teacher-forced full-sequence pass (no cache), the same modules as decoding.

        caption_emb [B, L, C] (L <= P, left-padded like prefill); tokens [B, N] image ids;
        caption_drop_mask [B] bool (True = use ``uncond_embedding``; the trainer draws it
        with probability ``cfg.class_dropout_p``); caption_mask [B, L] bool or None.
        The input sequence is ``prefix (P) + tokens[:, :-1]`` (length S = P + N - 1).
        Returns (logits [B, N, V] where logits[:, i] predicts tokens[:, i],
        hidden [B, S, D] after the final norm at every sequence position).
        """
        embeds, key_mask = self.embed_prefix(caption_emb, caption_mask, caption_drop_mask)
        tokens = tokens.to(self.device)
        N, P = tokens.shape[1], self.cfg.cls_token_num
        x = torch.cat([embeds, self.embed_tokens(tokens[:, :-1])], dim=1)
        S = x.shape[1]
        rotation = qkv_rotation(rope_for_positions(self.cfg, torch.arange(N - 1, device=self.device), n_prefix=P))
        attn_mask = None if key_mask is None else train_attention_mask(key_mask, S)
        for layer in self.layers:
            x = layer(x, rotation, attn_mask, causal=True)
        hidden = self.norm(x)
        return self.lm_head(hidden[:, P - 1:]), hidden
