"""VQ decoder: LlamaGen -> diffusers.VQModel conversion and the decode wrapper.

The reference below is an independent, plain-torch re-implementation of the
LlamaGen VQ network written from the layout in shared/design/llamagen-formats.md
(module names chosen so that its state dict has LlamaGen's key names).
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from lantern_demo.vq import (
    PLACEHOLDER_RGB,
    VQDecoder,
    convert_llamagen_vq_state_dict,
    llamagen_vq_config,
    llamagen_vq_config_from_state_dict,
    load_llamagen_checkpoint,
    load_llamagen_vq,
)

# reduced widths: 3 levels -> downsample 4, grid 4x4 -> 16x16 pixels
CH, MULT, Z, V, D, GROUPS, NRES = 8, (1, 2, 2), 16, 64, 4, 4, 2
GRID = 4


def gn(c):
    return nn.GroupNorm(GROUPS, c, eps=1e-6, affine=True)


class RefRes(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.norm1 = gn(cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.norm2 = gn(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        if cin != cout:
            self.nin_shortcut = nn.Conv2d(cin, cout, 1)

    def forward(self, x):
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        skip = self.nin_shortcut(x) if hasattr(self, "nin_shortcut") else x
        return skip + h


class RefAttn(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.norm = gn(c)
        self.q = nn.Conv2d(c, c, 1)
        self.k = nn.Conv2d(c, c, 1)
        self.v = nn.Conv2d(c, c, 1)
        self.proj_out = nn.Conv2d(c, c, 1)

    def forward(self, x):
        b, c, h, w = x.shape
        y = self.norm(x)
        q = self.q(y).reshape(b, c, h * w).transpose(1, 2)  # [b, hw, c]
        k = self.k(y).reshape(b, c, h * w)  # [b, c, hw]
        v = self.v(y).reshape(b, c, h * w)
        att = torch.softmax(torch.bmm(q, k) * c**-0.5, dim=-1)  # [b, hw_q, hw_k]
        out = torch.bmm(v, att.transpose(1, 2)).reshape(b, c, h, w)
        return x + self.proj_out(out)


class RefUp(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class RefDown(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, stride=2, padding=0)

    def forward(self, x):
        return self.conv(F.pad(x, (0, 1, 0, 1)))


class RefEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        n = len(MULT)
        self.conv_in = nn.Conv2d(3, CH, 3, padding=1)
        self.conv_blocks = nn.ModuleList()
        cin = CH
        for i, m in enumerate(MULT):
            blk = nn.Module()
            blk.res = nn.ModuleList()
            blk.attn = nn.ModuleList()
            for _ in range(NRES):
                blk.res.append(RefRes(cin, CH * m))
                cin = CH * m
                if i == n - 1:
                    blk.attn.append(RefAttn(cin))
            if i != n - 1:
                blk.downsample = RefDown(cin)
            self.conv_blocks.append(blk)
        self.mid = nn.ModuleList([RefRes(cin, cin), RefAttn(cin), RefRes(cin, cin)])
        self.norm_out = gn(cin)
        self.conv_out = nn.Conv2d(cin, Z, 3, padding=1)

    def forward(self, x):
        h = self.conv_in(x)
        for blk in self.conv_blocks:
            for j, res in enumerate(blk.res):
                h = res(h)
                if len(blk.attn):
                    h = blk.attn[j](h)
            if hasattr(blk, "downsample"):
                h = blk.downsample(h)
        for m in self.mid:
            h = m(h)
        return self.conv_out(F.silu(self.norm_out(h)))


class RefDecoder(nn.Module):
    def __init__(self):
        super().__init__()
        n = len(MULT)
        cin = CH * MULT[-1]
        self.conv_in = nn.Conv2d(Z, cin, 3, padding=1)
        self.mid = nn.ModuleList([RefRes(cin, cin), RefAttn(cin), RefRes(cin, cin)])
        self.conv_blocks = nn.ModuleList()
        for i in range(n):  # index 0 = lowest resolution
            cout = CH * MULT[n - 1 - i]
            blk = nn.Module()
            blk.res = nn.ModuleList()
            blk.attn = nn.ModuleList()
            for _ in range(NRES + 1):
                blk.res.append(RefRes(cin, cout))
                cin = cout
                if i == 0:
                    blk.attn.append(RefAttn(cin))
            if i != n - 1:
                blk.upsample = RefUp(cin)
            self.conv_blocks.append(blk)
        self.norm_out = gn(cin)
        self.conv_out = nn.Conv2d(cin, 3, 3, padding=1)

    def forward(self, z):
        h = self.conv_in(z)
        for m in self.mid:
            h = m(h)
        for blk in self.conv_blocks:
            for j, res in enumerate(blk.res):
                h = res(h)
                if len(blk.attn):
                    h = blk.attn[j](h)
            if hasattr(blk, "upsample"):
                h = blk.upsample(h)
        return self.conv_out(F.silu(self.norm_out(h)))


class RefQuantize(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(V, D)
        self.register_buffer("codebook_used", torch.zeros(65536))


class RefVQ(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = RefEncoder()
        self.decoder = RefDecoder()
        self.quant_conv = nn.Conv2d(Z, D, 1)
        self.post_quant_conv = nn.Conv2d(D, Z, 1)
        self.quantize = RefQuantize()

    def decode_code(self, ids, grid):
        b = ids.shape[0]
        cb = F.normalize(self.quantize.embedding.weight, p=2, dim=-1)  # L2 at lookup time
        z = cb[ids].reshape(b, grid, grid, D).permute(0, 3, 1, 2)
        return self.decoder(self.post_quant_conv(z))


def make_ref(seed=0):
    torch.manual_seed(seed)
    ref = RefVQ().eval()
    with torch.no_grad():  # perturb norms/biases so that nothing is trivially identity
        for name, p in ref.named_parameters():
            if "norm" in name:
                p.add_(0.3 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
        ref.quantize.embedding.weight.mul_(3.0)  # raw codebook clearly not unit-norm
    return ref


def as_tensor(pil):
    return torch.from_numpy(np.array(pil))


def make_converted(ref):
    from diffusers import VQModel

    conv = convert_llamagen_vq_state_dict(ref.state_dict())
    vq = VQModel(**llamagen_vq_config(ch=CH, ch_mult=MULT, z_channels=Z, codebook_size=V,
                                      codebook_dim=D, num_res_blocks=NRES, norm_groups=GROUPS, image_size=16))
    vq.load_state_dict(conv.state_dict, strict=True)
    return vq.eval(), conv


def test_default_config_is_vq16():
    from diffusers import VQModel

    cfg = llamagen_vq_config()
    assert cfg["block_out_channels"] == (128, 128, 256, 256, 512)
    assert cfg["num_vq_embeddings"] == 16384 and cfg["vq_embed_dim"] == 8
    with torch.device("meta"):
        vq = VQModel(**cfg)
    n = sum(p.numel() for p in vq.parameters())
    assert 71e6 < n < 73e6  # "about 71.9M parameters"


def test_conversion_matches_reference_decoder():
    ref = make_ref()
    vq, conv = make_converted(ref)
    torch.manual_seed(1)
    ids = torch.randint(0, V, (3, GRID * GRID))
    with torch.no_grad():
        want = ref.decode_code(ids, GRID)
        dec = VQDecoder(vq, GRID, raw_codebook=conv.raw_codebook)
        got = dec.decode(ids, output="float")
    assert got.shape == (3, 3, 16, 16)
    assert torch.allclose(got, want.clamp(-1, 1), atol=1e-4), (got - want).abs().max()
    # the raw codebook is kept un-normalised; the converted one is unit-norm
    assert torch.equal(dec.raw_codebook(), ref.quantize.embedding.weight.detach())
    assert torch.allclose(vq.quantize.embedding.weight.norm(dim=-1), torch.ones(V), atol=1e-6)
    assert "quantize.codebook_used" not in conv.state_dict
    # uint8 output agrees with the float output
    u8 = dec.decode(ids)
    assert u8.dtype == torch.uint8 and u8.shape == (3, 16, 16, 3)
    want_u8 = ((want.clamp(-1, 1) + 1) * 127.5).round().int().permute(0, 2, 3, 1)
    assert (u8.int() - want_u8).abs().max() <= 1


def test_conversion_matches_reference_encoder():
    ref = make_ref(2)
    vq, _ = make_converted(ref)
    x = torch.rand(2, 3, 16, 16) * 2 - 1
    with torch.no_grad():
        want = ref.quant_conv(ref.encoder(x))
        got = vq.encode(x).latents
    assert torch.allclose(got, want, atol=1e-4)


def test_config_inferred_from_state_dict():
    sd = make_ref().state_dict()
    cfg = llamagen_vq_config_from_state_dict(sd, norm_groups=GROUPS)
    want = llamagen_vq_config(ch=CH, ch_mult=MULT, z_channels=Z, codebook_size=V, codebook_dim=D,
                              num_res_blocks=NRES, norm_groups=GROUPS)
    for k in ("block_out_channels", "layers_per_block", "latent_channels", "vq_embed_dim", "num_vq_embeddings"):
        assert cfg[k] == want[k], k


def test_checkpoint_loading(tmp_path):
    ref = make_ref()
    sd = ref.state_dict()
    ema = {k: v + 1 for k, v in sd.items()}
    # a training-style checkpoint: args as argparse.Namespace, ema weights
    p = tmp_path / "vq_ds16_t2i.pt"
    torch.save({"model": sd, "ema": ema, "args": argparse.Namespace(codebook_size=V, lr=1e-4), "steps": 10}, p)
    got = load_llamagen_checkpoint(p)
    assert torch.equal(got["decoder.conv_in.weight"], sd["decoder.conv_in.weight"])
    got = load_llamagen_checkpoint(p, use_ema=True)
    assert torch.equal(got["decoder.conv_in.weight"], ema["decoder.conv_in.weight"])

    vq, raw = load_llamagen_vq(p, norm_groups=GROUPS)
    dec = VQDecoder(vq, GRID, raw_codebook=raw)
    ids = torch.randint(0, V, (1, GRID * GRID))
    with torch.no_grad():
        assert torch.allclose(dec.decode(ids, output="float"), ref.decode_code(ids, GRID).clamp(-1, 1), atol=1e-4)


class Evil:  # module-level so that it pickles
    def __reduce__(self):
        return (os.getcwd, ())


def test_checkpoint_with_arbitrary_objects_is_refused(tmp_path):
    p = tmp_path / "bad.pt"
    torch.save({"model": make_ref().state_dict(), "extra": Evil()}, p)
    with pytest.raises(RuntimeError, match="Refusing to load"):
        load_llamagen_checkpoint(p)


def _decoder_and_ids(seed: int) -> tuple[VQDecoder, torch.Tensor]:
    """A decoder of the converted reference VQ and random ids [GRID * GRID] of a whole image."""
    vq, conv = make_converted(make_ref())
    torch.manual_seed(seed)
    return VQDecoder(vq, GRID, raw_codebook=conv.raw_codebook), torch.randint(0, V, (GRID * GRID,))


def test_partial_decode_shows_placeholders():
    dec, full = _decoder_and_ids(3)
    n_done = 6  # first row (4 cells) + 2 cells of the second
    partial = full.clone()
    partial[n_done:] = -1
    img = as_tensor(dec.decode_partial(partial))
    assert img.shape == (16, 16, 3)
    f = dec.factor
    grey = torch.tensor(PLACEHOLDER_RGB, dtype=torch.uint8)
    for cell in range(GRID * GRID):
        r, c = divmod(cell, GRID)
        block = img[r * f:(r + 1) * f, c * f:(c + 1) * f]
        if cell >= n_done:
            assert (block == grey).all(), cell
        else:
            assert not (block == grey).all(dim=-1).all(), cell
    # nothing generated: all grey; everything generated: the full decode
    empty = as_tensor(dec.decode_partial(torch.full((GRID * GRID,), -1)))
    assert (empty == grey).all()
    done = as_tensor(dec.decode_partial(full))
    assert torch.equal(done, dec.decode(full[None])[0])


def test_own_vqmodel_round_trip(tmp_path):
    """A VQModel trained by us (any config, saved with save_pretrained) decodes too."""
    from diffusers import VQModel

    torch.manual_seed(0)
    vq = VQModel(block_out_channels=(8, 16), down_block_types=("DownEncoderBlock2D",) * 2,
                 up_block_types=("UpDecoderBlock2D",) * 2, layers_per_block=1, latent_channels=4,
                 num_vq_embeddings=32, vq_embed_dim=4, norm_num_groups=4, sample_size=8)  # lookup_from_codebook=False
    vq.save_pretrained(tmp_path / "vq")
    dec = VQDecoder.from_pretrained(tmp_path / "vq", grid=4)
    assert dec.image_size == (8, 8) and dec.codebook_size == 32
    ids = torch.randint(0, 32, (2, 16))
    with torch.no_grad():
        z = vq.quantize.embedding.weight[ids].reshape(2, 4, 4, 4).permute(0, 3, 1, 2)
        want = vq.decoder(vq.post_quant_conv(z)).clamp(-1, 1)
    assert torch.allclose(dec.decode(ids, output="float"), want, atol=1e-5)
    assert torch.equal(dec.raw_codebook(), vq.quantize.embedding.weight.detach())
    with pytest.raises(ValueError):
        dec.decode(torch.full((1, 16), 32))


def test_preview_decodes_the_generated_rows_in_one_band():
    from lantern_demo.vq import PREVIEW_CONTEXT, _to_uint8

    dec, full = _decoder_and_ids(4)
    f, grey = dec.factor, torch.tensor(PLACEHOLDER_RGB, dtype=torch.uint8)
    ids = torch.full_like(full, -1)
    ids[:GRID + 2] = full[:GRID + 2]  # row 0 and two cells of row 1
    img = as_tensor(dec.decode_partial(ids))
    assert (img[2 * f:] == grey).all() and (img[f:2 * f, 2 * f:] == grey).all()
    # the shown rows are one decode of rows 0 .. 1 + PREVIEW_CONTEXT (fill tokens where missing)
    b1 = 2 + PREVIEW_CONTEXT
    filled = torch.where(ids < 0, torch.full_like(ids, dec.fill_token), ids)[: b1 * GRID]
    band = _to_uint8(dec._decode_rows(filled[None], b1))[0]
    assert torch.equal(img[:f], band[:f]) and torch.equal(img[f:2 * f, :2 * f], band[f:2 * f, :2 * f])
    # a complete image is decoded whole: exactly the final decode
    assert torch.equal(as_tensor(dec.decode_partial(full)), dec.decode(full[None])[0])



def test_half_precision_checkpoint_decodes_like_float32(tmp_path):
    """An fp16 LlamaGen file decodes like float32 computation on its stored values (limit 1e-3).

    LlamaGen normalises the codebook at lookup, in float32; rounding the normalised rows
    back to fp16 costs about 2e-3 here (conv_out scaled by 4, so that this small decoder
    has an output range like the full-size one's), the float32 codebook about 1e-5.
    """
    sd = make_ref(1).state_dict()
    sd["decoder.conv_out.weight"] = sd["decoder.conv_out.weight"] * 4
    half = {k: v.half() for k, v in sd.items()}
    ref = RefVQ().eval()
    ref.load_state_dict({k: v.float() for k, v in half.items()})  # the stored values, computed in float32
    p = tmp_path / "vq_fp16.pt"
    torch.save({"model": half}, p)
    vq, raw = load_llamagen_vq(p, norm_groups=GROUPS)
    dec = VQDecoder(vq, GRID, raw_codebook=raw)
    ids = torch.randint(0, V, (4, GRID * GRID), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = ref.decode_code(ids, GRID)
    got = dec.decode(ids, output="float", clamp=False)
    assert (got - want).abs().max() < 1e-3
    assert convert_llamagen_vq_state_dict(half).state_dict["quantize.embedding.weight"].dtype == torch.float32


def test_decode_unclamped():
    """Clamped to [-1, 1] by default (images); ``clamp=False`` returns the decoder's floats."""
    dec, ids = _decoder_and_ids(6)
    with torch.no_grad():
        dec.vq.decoder.conv_out.weight.mul_(4)  # outputs well outside [-1, 1]
    raw = dec.decode(ids, output="float", clamp=False)
    assert raw.abs().max() > 1.5
    assert torch.equal(dec.decode(ids, output="float"), raw.clamp(-1, 1))
    with pytest.raises(ValueError, match="clamp"):
        dec.decode(ids, clamp=False)  # uint8 images are always clamped
