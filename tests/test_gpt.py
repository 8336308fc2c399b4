"""Tiny-config checks of lantern_demo.gpt (target) and lantern_demo.drafter."""

from __future__ import annotations

import pytest
import torch

from _models_fixtures import tiny_drafter, tiny_gpt
from lantern_demo.gpt import Caption, prepare_caption
from lantern_demo.rope import apply_rope, rope_for_positions, rope_table

ATOL = 1e-4
N = 10  # image tokens used in the tests (grid 4 -> up to 16)


def _caption(L: int, seed: int = 5) -> torch.Tensor:
    return torch.randn(L, 32, generator=torch.Generator().manual_seed(seed))


def _tokens(n: int = N, seed: int = 7) -> torch.Tensor:
    return torch.randint(0, 64, (n,), generator=torch.Generator().manual_seed(seed))


def _train(model, cap, toks, drop=False):
    with torch.no_grad():
        return model.forward_train(cap[None], toks[None], torch.tensor([drop]))


def _close(a, b, atol=ATOL):
    assert a.shape == b.shape, (a.shape, b.shape)
    torch.testing.assert_close(a.float(), b.float(), atol=atol, rtol=1e-4)


@pytest.mark.parametrize("prefix_rope", ["zero", "identity"])
@pytest.mark.parametrize("L", [6, 3])  # full caption, and a left-padded (masked) one
def test_prefill_incremental_matches_forward_train(L, prefix_rope):
    m = tiny_gpt(prefix_rope=prefix_rope)
    cap, toks = _caption(L), _tokens()
    logits, hidden = _train(m, cap, toks)
    P = m.cfg.cls_token_num
    pre = m.prefill(cap, rows=1, max_tokens=N)
    _close(pre.logits, logits[:, 0])
    _close(pre.hidden, hidden[:, :P])
    emb, _ = m.embed_prefix(cap[None])
    _close(pre.embeds, emb)
    # one token at a time, then the rest in a chunk
    for i in range(4):
        lg, h = m.forward(toks[i:i + 1], torch.tensor([i]))
        _close(lg[:, 0], logits[:, i + 1])
        _close(h[:, 0], hidden[:, P + i])
    lg, h = m.forward(toks[4:N - 1], torch.arange(4, N - 1))
    _close(lg, logits[:, 5:N])
    assert m.length == N - 1


def test_left_padding_and_explicit_mask_agree():
    m = tiny_gpt()
    cap = _caption(3)
    full = torch.cat([torch.randn(3, 32), cap])  # garbage in the padded rows: must be zeroed and masked
    mask = torch.tensor([False] * 3 + [True] * 3)
    e1, m1 = prepare_caption(cap, 6)
    e2, m2 = prepare_caption(Caption(full, mask), 6)
    _close(e1, e2)
    assert torch.equal(m1, m2) and torch.equal(m1, mask)
    from types import SimpleNamespace  # duck-typed like lantern_demo.text.TextEmbedding, batch of 1
    e3, m3 = prepare_caption(SimpleNamespace(emb=full[None], mask=mask[None]), 6)
    _close(e3, e1)
    assert torch.equal(m3, mask)
    a = m.prefill(cap, 2, 4).logits
    b = m.prefill((full, mask), 2, 4).logits
    _close(a, b)
    # masking changes the result compared with attending zero rows
    c = m.prefill(torch.cat([torch.zeros(3, 32), cap]), 2, 4).logits
    assert not torch.allclose(a, c, atol=1e-3)


def _prefix_logits(m, emb, attend):
    """Next-token logits [V] after a prefix emb [P, C] with attention mask ``attend`` [P, P] (True = attend)."""
    from lantern_demo.rope import prefix_rope, qkv_rotation

    with torch.no_grad():
        h = m.cls_embedding.cap_proj(emb[None])
        rotation = qkv_rotation(prefix_rope(m.cfg, emb.shape[0], "cpu"))
        for layer in m.layers:
            h = layer(h, rotation, attend[None, None])
        return m.lm_head(m.norm(h))[0, -1]


@pytest.mark.parametrize("prefix_rope", ["zero", "identity"])
def test_zero_padded_caption_needs_its_mask(prefix_rope):
    """A T5 caption as the text encoder lays it out: [P, C], zero rows first, then the valid tokens.

    Passed alone it is taken as P valid tokens (the zero rows are attended); with its mask the
    padded keys are removed for every other query, as LlamaGen's sampler does."""
    m = tiny_gpt(prefix_rope=prefix_rope)
    P, n_valid = 6, 2
    emb = torch.cat([torch.zeros(P - n_valid, 32), _caption(n_valid)])
    mask = torch.arange(P) >= P - n_valid
    causal = torch.ones(P, P, dtype=torch.bool).tril()
    llamagen = (causal & mask[None, :]) | torch.eye(P, dtype=torch.bool)  # padded keys masked, each sees itself
    unmasked = m.prefill(emb, 1, 4).logits[0]
    masked = m.prefill(Caption(emb, mask), 1, 4).logits[0]
    _close(unmasked, _prefix_logits(m, emb, causal))
    _close(masked, _prefix_logits(m, emb, llamagen))
    assert (masked - unmasked).abs().max() > 1e-2


def test_cfg_rows():
    m = tiny_gpt()
    cap, toks = _caption(6), _tokens()
    pre2 = m.prefill(cap, rows=2, max_tokens=N)
    lg2, _ = m.forward(toks[:5], torch.arange(5))
    # row 1 uses uncond_embedding
    _close(pre2.embeds[1], m.cls_embedding.cap_proj(m.cls_embedding.uncond_embedding))
    logits_u, _ = _train(m, cap, toks, drop=True)
    _close(pre2.logits[1], logits_u[0, 0])
    _close(lg2[1], logits_u[0, 1:6])
    pre_none = m.prefill(None, rows=1, max_tokens=N)
    _close(pre_none.logits[0], pre2.logits[1])
    # row 0 = conditional
    logits_c, _ = _train(m, cap, toks)
    _close(pre2.logits[0], logits_c[0, 0])
    _close(lg2[0], logits_c[0, 1:6])
    assert not torch.allclose(lg2[0], lg2[1], atol=1e-3)


def test_rope_layout_and_prefix_zero():
    m = tiny_gpt()
    cfg = m.cfg
    hd, g = cfg.head_dim, cfg.grid
    r = rope_for_positions(cfg, torch.tensor([0, g + 2, g * g, 99]), n_prefix=cfg.cls_token_num)
    P = cfg.cls_token_num
    assert r.dtype == torch.float32 and r.shape == (P + 4, hd // 2, 2)
    assert torch.all(r[:P] == 0) and torch.all(r[P + 2:] == 0)  # prefix and out-of-range: cos = sin = 0
    inv = 1.0 / 10000 ** (torch.arange(0, hd // 2, 2).float() / (hd // 2))
    ang = torch.cat([1 * inv, 2 * inv])  # position g + 2: row 1, column 2
    _close(r[P + 1, :, 0], torch.cos(ang))
    _close(r[P + 1, :, 1], torch.sin(ang))
    _close(r[P, :, 0], torch.ones(hd // 2))
    # interleaved pairs: (x0, x1) -> (x0 cos - x1 sin, x1 cos + x0 sin)
    x = torch.randn(1, 1, 1, hd)
    y = apply_rope(x, r[P + 1:P + 2])
    c, s = torch.cos(ang), torch.sin(ang)
    _close(y[0, 0, 0, 0::2], x[0, 0, 0, 0::2] * c - x[0, 0, 0, 1::2] * s)
    _close(y[0, 0, 0, 1::2], x[0, 0, 0, 1::2] * c + x[0, 0, 0, 0::2] * s)
    assert torch.all(apply_rope(x.expand(1, P, 1, hd), r[:P]) == 0)
    assert rope_table(g, hd).shape == (g * g, hd // 2, 2)


def test_prefix_rope_identity_keeps_caption_keys():
    zero, ident = tiny_gpt(), tiny_gpt(prefix_rope="identity")
    P, hd = ident.cfg.cls_token_num, ident.cfg.head_dim
    r = rope_for_positions(ident.cfg, torch.tensor([0, 1]), n_prefix=P)
    assert torch.all(r[:P, :, 0] == 1) and torch.all(r[:P, :, 1] == 0)
    _close(r[P:], rope_for_positions(zero.cfg, torch.tensor([0, 1])))  # image positions unchanged
    x = torch.randn(1, P, 1, hd)
    assert torch.equal(apply_rope(x, r[:P]), x)
    # same weights, different prefix table: the caption now reaches the image tokens differently
    cap, toks = _caption(6), _tokens()
    assert not torch.allclose(_train(zero, cap, toks)[0], _train(ident, cap, toks)[0], atol=1e-3)
    with pytest.raises(ValueError, match="prefix_rope"):
        tiny_gpt(prefix_rope="rotate")


def _tree():
    # nodes a, b (children of the last committed token), c, d under a, e under b
    parents = [-1, -1, 0, 0, 1]
    depth = [0, 0, 1, 1, 1]
    return parents, depth


def _tree_mask(parents, L):
    T = len(parents)
    mask = torch.zeros(T, L + T, dtype=torch.bool)
    mask[:, :L] = True
    for t in range(T):
        j = t
        while j >= 0:
            mask[t, L + j] = True
            j = parents[j]
    return mask


@pytest.mark.parametrize("rows,L", [(1, 6), (2, 4)])
def test_tree_verification_and_keep(rows, L):
    m = tiny_gpt()
    cap, toks = _caption(L), _tokens()
    C = 4  # committed tokens
    tree_tok = torch.tensor([11, 12, 13, 14, 15])
    parents, depth = _tree()
    m.prefill(cap, rows, 16)
    m.forward(toks[:C], torch.arange(C))
    pos = C + torch.tensor(depth)
    lg_tree, h_tree = m.forward(tree_tok, pos, _tree_mask(parents, C))
    assert m.length == C + 5

    def branch(path):  # fresh, causal run of committed + path
        m2 = tiny_gpt()
        m2.prefill(cap, rows, 16)
        m2.forward(toks[:C], torch.arange(C))
        seq = tree_tok[path]
        return m2, m2.forward(seq, torch.arange(C, C + len(path)))

    for path in ([0, 2], [0, 3], [1, 4]):
        _, (lg, h) = branch(path)
        _close(lg_tree[:, path], lg)
        _close(h_tree[:, path], h)

    # keep path b -> e, then continue: equals a fresh run on committed + b + e + next
    m.keep(C, torch.tensor([1, 4]))
    assert m.length == C + 2
    nxt = torch.tensor([21, 22])
    lg_k, _ = m.forward(nxt, torch.tensor([C + 2, C + 3]))
    m2, _ = branch([1, 4])
    lg_f, _ = m2.forward(nxt, torch.tensor([C + 2, C + 3]))
    _close(lg_k, lg_f)
    # keep nothing speculative: back to C committed entries
    m.keep(C, torch.tensor([], dtype=torch.long))
    assert m.length == C
    with pytest.raises(ValueError):
        m.keep(C, torch.tensor([0]))


def test_keep_chain_prefix_continues_like_a_fresh_run():
    """keep() of a chain's first drafts (index 0..n-1, moved nothing) then more tokens = a fresh causal run."""
    cap, toks = _caption(5), _tokens()
    m = tiny_gpt()
    m.prefill(cap, 2, 16)
    m.forward(toks[:6], torch.arange(6))
    m.keep(2, torch.tensor([0, 1]))
    assert m.length == 4
    lg_k, h_k = m.forward(toks[6:8], torch.tensor([4, 5]))
    fresh = tiny_gpt()
    fresh.prefill(cap, 2, 16)
    fresh.forward(toks[:4], torch.arange(4))
    lg_f, h_f = fresh.forward(toks[6:8], torch.tensor([4, 5]))
    _close(lg_k, lg_f)
    _close(h_k, h_f)


def test_mask_shape_and_capacity_errors():
    m = tiny_gpt()
    m.prefill(_caption(6), 1, 3)
    with pytest.raises(ValueError):
        m.forward(torch.tensor([1, 2]), torch.tensor([0, 1]), torch.ones(2, 3, dtype=torch.bool))
    m.forward(torch.tensor([1, 2, 3]), torch.arange(3))
    with pytest.raises(RuntimeError):
        m.forward(torch.tensor([4]), torch.tensor([3]))


def test_bf16_smoke():
    m = tiny_gpt()
    cap, toks = _caption(3), _tokens()
    m.prefill(cap, 2, 8)
    ref_lg, _ = m.forward(toks[:3], torch.arange(3))
    mb = tiny_gpt().to(torch.bfloat16)
    pre = mb.prefill(cap, 2, 8)
    assert pre.hidden.dtype == torch.bfloat16 and pre.logits.dtype == torch.float32
    lg, h = mb.forward(toks[:3], torch.arange(3))
    assert torch.isfinite(lg).all()
    assert (lg - ref_lg).abs().max() < 0.1 * ref_lg.abs().max() + 0.05


def test_forward_train_grad_and_shapes():
    m = tiny_gpt().train()
    cap = torch.randn(3, 5, 32)
    toks = torch.randint(0, 64, (3, 16))
    logits, hidden = m.forward_train(cap, toks, torch.tensor([False, True, False]),
                                     caption_mask=torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1], [0, 1, 1, 1, 1]]).bool())
    assert logits.shape == (3, 16, 64) and hidden.shape == (3, 6 + 15, 64)
    torch.nn.functional.cross_entropy(logits.reshape(-1, 64), toks.reshape(-1)).backward()
    assert m.cls_embedding.cap_proj.fc1.weight.grad is not None
    assert m.layers[0].self_attn.q_proj.weight.grad is not None


# ----------------------------------------------------------------------------- drafter


@pytest.mark.parametrize("rows,L,prefix_rope", [(1, 6, "zero"), (2, 3, "zero"), (2, 3, "identity")])
def test_drafter_incremental_matches_forward_train(rows, L, prefix_rope):
    m = tiny_gpt(prefix_rope=prefix_rope)
    d = tiny_drafter(m)
    cap, toks = _caption(L), _tokens()
    P = m.cfg.cls_token_num
    with torch.no_grad():
        caps = cap[None].expand(rows, -1, -1)
        drop = torch.tensor([False, True][:rows])
        _, hidden = m.forward_train(caps, toks[None].expand(rows, -1), drop)
        embeds, key_mask = m.embed_prefix(caps, drop=drop)
        d_logits, d_feat = d.forward_train(embeds, hidden, toks[None].expand(rows, -1), key_mask)
    assert d_logits.shape == (rows, P - 1 + N, 64) and d_feat.shape == (rows, P - 1 + N, 64)
    pre = m.prefill(cap, rows, N)
    d.prefill(cap, rows, pre, N)
    assert d.length == 0
    # committed tokens are fed the target's hidden that predicted them
    lg, f = d.forward(toks[:1], hidden[:, P - 1:P], torch.tensor([0]))
    _close(lg, d_logits[:, P - 1:P])
    _close(f, d_feat[:, P - 1:P])
    lg, f = d.forward(toks[1:N], hidden[:, P:P - 1 + N], torch.arange(1, N))
    _close(lg, d_logits[:, P:])
    _close(f, d_feat[:, P:])
    # logits come from the target's lm_head on the drafter's features (no final norm)
    _close(lg, m.lm_head(f))


def test_drafter_keep_and_tree():
    m = tiny_gpt()
    d = tiny_drafter(m)
    cap, toks = _caption(6), _tokens()
    P = m.cfg.cls_token_num
    _, hidden = _train(m, cap, toks)
    feats = torch.randn(1, 5, 64)
    tree_tok = torch.tensor([11, 12, 13, 14, 15])
    parents, depth = _tree()

    def start():
        d.prefill(cap, 1, m.prefill(cap, 1, 16), 16)
        d.forward(toks[:3], hidden[:, P - 1:P + 2], torch.arange(3))

    start()
    lg_tree, _ = d.forward(tree_tok, feats, 3 + torch.tensor(depth), _tree_mask(parents, 3))
    start()
    lg_b, _ = d.forward(tree_tok[[1, 4]], feats[:, [1, 4]], torch.tensor([3, 4]))
    _close(lg_tree[:, [1, 4]], lg_b)
    nxt_f = torch.randn(1, 1, 64)
    ref, _ = d.forward(torch.tensor([9]), nxt_f, torch.tensor([5]))
    start()
    d.forward(tree_tok, feats, 3 + torch.tensor(depth), _tree_mask(parents, 3))
    d.keep(3, torch.tensor([1, 4]))
    got, _ = d.forward(torch.tensor([9]), nxt_f, torch.tensor([5]))
    _close(got, ref)


def test_drafter_needs_lm_head():
    m = tiny_gpt()
    from lantern_demo.drafter import Drafter

    d = Drafter(m.cfg.as_drafter())
    assert "lm_head.weight" not in d.state_dict()
    d.prefill(None, 1, m.prefill(None, 1, 4), 4)
    with pytest.raises(RuntimeError, match="lm_head"):
        d.forward(torch.tensor([1]), torch.zeros(1, 1, 64), torch.tensor([0]))
    d.set_lm_head(m.lm_head)
    lg, _ = d.forward(torch.tensor([1]), torch.zeros(1, 1, 64), torch.tensor([0]))
    assert lg.shape == (1, 1, 64)
