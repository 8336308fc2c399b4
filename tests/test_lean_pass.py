"""The lean decode pass (fused projections, complex rotation, decoding weights) against a
plain reference written out operation by operation, as LlamaGen computes a block."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from _models_fixtures import tiny_drafter, tiny_gpt
from lantern_demo.gpt import GPT
from lantern_demo.rope import apply_rope, qkv_rotation, rope_for_positions, rotate, rotation_for_positions


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * w


def _rope(x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
    """x [B, T, H, hd], rope [T, hd/2, 2]: the real-valued formula on interleaved pairs."""
    xf = x.float().reshape(*x.shape[:-1], -1, 2)
    cos, sin = rope[None, :, None, :, 0], rope[None, :, None, :, 1]
    x0, x1 = xf[..., 0], xf[..., 1]
    return torch.stack([x0 * cos - x1 * sin, x1 * cos + x0 * sin], dim=-1).flatten(-2).type_as(x)


def _reference_train(m: GPT, cap: torch.Tensor, toks: torch.Tensor) -> torch.Tensor:
    """Logits [1, N, V] of ``forward_train`` computed with separate q/k/v/gate/up matmuls."""
    cfg, P = m.cfg, m.cfg.cls_token_num
    embeds, _ = m.embed_prefix(cap[None])
    x = torch.cat([embeds, m.embed_tokens(toks[None, :-1])], dim=1)
    B, S, D = x.shape
    H, hd = cfg.n_head, cfg.head_dim
    rope = rope_for_positions(cfg, torch.arange(toks.numel() - 1), n_prefix=P)
    for blk in m.layers:
        a, h = blk.self_attn, _rms(x, blk.input_layernorm.weight, cfg.norm_eps)
        q = _rope(a.q_proj(h).view(B, S, H, hd), rope).transpose(1, 2)
        k = _rope(a.k_proj(h).view(B, S, H, hd), rope).transpose(1, 2)
        v = a.v_proj(h).view(B, S, H, hd).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + a.o_proj(y.transpose(1, 2).reshape(B, S, D))
        h, mlp = _rms(x, blk.post_attention_layernorm.weight, cfg.norm_eps), blk.mlp
        x = x + mlp.down_proj(F.silu(mlp.gate_proj(h)) * mlp.up_proj(h))
    return m.lm_head(_rms(x, m.norm.weight, cfg.norm_eps))[:, P - 1:]


def test_rotation_is_the_real_formula_bit_for_bit():
    g = torch.Generator().manual_seed(0)
    cfg = tiny_gpt().cfg
    pos = torch.tensor([0, 3, 15, 16, -1, 7])  # 16 and -1 lie outside the 4x4 image: zero rotation
    rope = rope_for_positions(cfg, pos)
    x = torch.randn(2, pos.numel(), 3, cfg.n_head, cfg.head_dim, generator=g) * 5
    out = rotate(x, rotation_for_positions(cfg, pos))
    assert torch.equal(rotation_for_positions(cfg, pos), qkv_rotation(rope))
    assert torch.equal(out[:, :, 0], _rope(x[:, :, 0], rope))
    assert torch.equal(out[:, :, 1], _rope(x[:, :, 1], rope))
    assert torch.equal(out[:, :, 2], x[:, :, 2])  # v is not rotated
    assert torch.equal(apply_rope(x[:, :, 0], rope), _rope(x[:, :, 0], rope))
    assert torch.all(out[:, 3:5, :2] == 0)


def test_training_pass_equals_separate_projections_bit_for_bit():
    m = tiny_gpt()
    g = torch.Generator().manual_seed(1)
    cap, toks = torch.randn(m.cfg.cls_token_num, 32, generator=g), torch.randint(0, 64, (12,), generator=g)
    with torch.no_grad():
        logits, _ = m.forward_train(cap[None], toks[None])
        ref = _reference_train(m, cap, toks)
    assert torch.equal(logits, ref)


def test_decode_pass_matches_reference_and_sees_new_weights_at_prefill():
    m = tiny_gpt()
    g = torch.Generator().manual_seed(2)
    cap, toks = torch.randn(m.cfg.cls_token_num, 32, generator=g), torch.randint(0, 64, (12,), generator=g)
    with torch.no_grad():
        ref = _reference_train(m, cap, toks)
    P = m.cfg.cls_token_num
    pre = m.prefill(cap, 1, 16)
    torch.testing.assert_close(pre.logits, ref[:, 0], atol=1e-5, rtol=1e-5)
    for i in range(11):  # one token per pass, as AR decoding runs
        logits, _ = m.forward(toks[i:i + 1], torch.tensor([i]))
        torch.testing.assert_close(logits[:, 0], ref[:, i + 1], atol=1e-5, rtol=1e-5)
    assert logits.dtype == torch.float32 and P >= 1
    # the decoding weights are made at prefill: a changed weight shows up at the next one
    with torch.no_grad():
        m.layers[0].mlp.up_proj.weight.mul_(2.0)
        m.lm_head.weight.mul_(-1.0)
        ref2 = _reference_train(m, cap, toks)
    torch.testing.assert_close(m.prefill(cap, 1, 16).logits, ref2[:, 0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(m.forward(toks[:4], torch.arange(4))[0], ref2[:, 1:5], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(ref2, ref, atol=1e-3)


def test_drafter_head_follows_set_lm_head():
    m = tiny_gpt()
    d = tiny_drafter(m)
    other = torch.nn.Linear(m.cfg.dim, m.cfg.vocab_size, bias=False)
    feats = torch.randn(1, 1, m.cfg.dim)
    d.prefill(None, 1, m.prefill(None, 1, 4), 4)
    lg, f = d.forward(torch.tensor([1]), feats, torch.tensor([0]))
    torch.testing.assert_close(lg, m.lm_head(f).detach(), atol=1e-5, rtol=1e-5)
    d.set_lm_head(other)
    d.keep(0, torch.zeros(0, dtype=torch.long))
    lg, f = d.forward(torch.tensor([1]), feats, torch.tensor([0]))
    torch.testing.assert_close(lg, other(f).detach(), atol=1e-5, rtol=1e-5)
