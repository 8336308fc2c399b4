"""VQDecoderNet (the decoding half of diffusers' VQModel) against diffusers' own VQModel.

diffusers is the reference here; the app's import path must not import it (checked in a
fresh interpreter, together with ``torch._dynamo`` and ``transformers``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from diffusers import VQModel
from safetensors.torch import load_file, save_file

from lantern_demo.vq import VQDecoder
from lantern_demo.vq_net import WEIGHTS_NAME, VQDecoderConfig, VQDecoderNet

ROOT = Path(__file__).resolve().parents[1]
EMOJI_VQ = ROOT / "assets" / "emoji" / "vq"


def _reference(vq: VQModel, ids: torch.Tensor, shape: tuple[int, int, int, int]) -> torch.Tensor:
    """``VQModel.decode`` of token ids, whichever way the model is configured to take them."""
    if vq.config.lookup_from_codebook:
        return vq.decode(ids, force_not_quantize=True, shape=shape).sample
    return vq.decode(vq.quantize.get_codebook_entry(ids, shape), force_not_quantize=True).sample


@pytest.mark.skipif(not (EMOJI_VQ / WEIGHTS_NAME).is_file(), reason="no embedded emoji weights")
def test_shipped_emoji_weights_decode_as_diffusers():
    want_model = VQModel.from_pretrained(str(EMOJI_VQ)).eval()
    net = VQDecoderNet.from_pretrained(EMOJI_VQ)
    cfg = net.cfg
    torch.manual_seed(0)
    ids = torch.randint(0, cfg.num_vq_embeddings, (3, 16 * 16))
    shape = (3, 16, 16, cfg.embed_dim)
    with torch.no_grad():
        want = _reference(want_model, ids, shape)
        got = net.decode(ids, shape)
    assert got.shape == want.shape == (3, 3, 64, 64)
    assert (got - want).abs().max() <= 1e-5


RANDOM_CONFIGS = [
    # several levels, conv shortcuts (widths change), plain up blocks, codebook lookup on
    dict(block_out_channels=(8, 16, 32), up_block_types=("UpDecoderBlock2D",) * 3, layers_per_block=1,
         latent_channels=4, num_vq_embeddings=32, vq_embed_dim=3, norm_num_groups=4, lookup_from_codebook=True),
    # LlamaGen-like: attention at the lowest resolution, more layers, lookup off
    dict(block_out_channels=(8, 8, 16), up_block_types=("AttnUpDecoderBlock2D",) + ("UpDecoderBlock2D",) * 2,
         layers_per_block=2, latent_channels=8, num_vq_embeddings=64, vq_embed_dim=4, norm_num_groups=4),
    # one level, no mid-block attention, vq_embed_dim defaulting to latent_channels
    dict(block_out_channels=(16,), up_block_types=("AttnUpDecoderBlock2D",), layers_per_block=0,
         latent_channels=6, num_vq_embeddings=16, norm_num_groups=8, mid_block_add_attention=False),
]


@pytest.mark.parametrize("kw", RANDOM_CONFIGS)
def test_random_configs_decode_as_diffusers(kw, tmp_path):
    torch.manual_seed(1)
    n = len(kw["block_out_channels"])
    vq = VQModel(down_block_types=("DownEncoderBlock2D",) * n, **kw).eval()
    with torch.no_grad():  # diffusers' own init leaves biases / codebook in narrow ranges: spread them
        for p in vq.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    vq.save_pretrained(tmp_path)
    net = VQDecoderNet.from_pretrained(tmp_path)
    h, w = 3, 5
    ids = torch.randint(0, kw["num_vq_embeddings"], (2, h * w))
    shape = (2, h, w, net.cfg.embed_dim)
    with torch.no_grad():
        want = _reference(vq, ids, shape)
        got = net.decode(ids, shape)
        shared = VQDecoderNet.from_vqmodel(vq).decode(ids, shape)
    assert got.shape == want.shape == (2, 3, h * 2 ** (n - 1), w * 2 ** (n - 1))
    assert (got - want).abs().max() <= 1e-5
    assert torch.equal(shared, got)


def test_unsupported_configs_and_mismatched_weights_raise(tmp_path):
    for bad in ({"norm_type": "spatial"}, {"act_fn": "relu"}, {"up_block_types": ["UpBlock2D"]},
                {"up_block_types": ["UpDecoderBlock2D"], "block_out_channels": [8, 8]}):
        with pytest.raises(ValueError):
            VQDecoderConfig.from_vqmodel(bad)
    torch.manual_seed(0)
    VQModel(block_out_channels=(8,), norm_num_groups=4, latent_channels=4, num_vq_embeddings=8).save_pretrained(tmp_path)
    sd = load_file(str(tmp_path / WEIGHTS_NAME))
    del sd["decoder.conv_out.bias"]
    save_file(sd, str(tmp_path / WEIGHTS_NAME))
    with pytest.raises(ValueError, match="decoder.conv_out.bias"):
        VQDecoderNet.from_pretrained(tmp_path)
    (tmp_path / WEIGHTS_NAME).unlink()
    with pytest.raises(FileNotFoundError):
        VQDecoder.from_pretrained(tmp_path, grid=2)


def test_app_import_leaves_heavy_modules_out():
    """``import app`` (which loads the default preset) imports neither diffusers, torch._dynamo nor transformers."""
    code = ("import sys, app; heavy = ('diffusers', 'torch._dynamo', 'transformers'); "
            "print(sorted(m for m in heavy if m in sys.modules))")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout
