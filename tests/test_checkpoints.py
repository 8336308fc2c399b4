"""Checkpoint layouts, loaders, error messages and XL parameter counts (lantern_demo.checkpoints)."""

from __future__ import annotations

import argparse
import json

import pytest
import torch
from safetensors.torch import save_file

from _models_fixtures import tiny_drafter, tiny_gpt
from lantern_demo.checkpoints import (
    CheckpointError,
    config_from_hf,
    config_to_hf,
    detect_layout,
    load_drafter,
    load_gpt,
    native_to_hf,
    native_to_original,
    original_to_native,
    save_drafter,
    save_gpt,
    xl_parameter_counts,
)
from lantern_demo.gpt import GPTConfig


def _run(m, seed=3):
    g = torch.Generator().manual_seed(seed)
    cap = torch.randn(4, 32, generator=g)
    toks = torch.randint(0, 64, (6,), generator=g)
    pre = m.prefill(cap, 2, 8)
    lg, h = m.forward(toks, torch.arange(6))
    return torch.cat([pre.logits[:, None], lg], 1), h


def _same(a, b):
    for x, y in zip(_run(a), _run(b)):
        torch.testing.assert_close(x, y, atol=0, rtol=0)


def test_layout_tables_round_trip():
    m = tiny_gpt()
    sd = m.state_dict()
    orig = native_to_original(sd)
    assert detect_layout(orig) == "original" and detect_layout(native_to_hf(sd)) == "hf"
    assert "layers.1.attention.wqkv.weight" in orig and orig["layers.1.attention.wqkv.weight"].shape == (192, 64)
    assert torch.equal(orig["layers.1.attention.wqkv.weight"][:64], sd["layers.1.self_attn.q_proj.weight"])
    assert torch.equal(orig["layers.1.attention.wqkv.weight"][128:], sd["layers.1.self_attn.v_proj.weight"])
    assert torch.equal(orig["layers.0.feed_forward.w1.weight"], sd["layers.0.mlp.gate_proj.weight"])
    assert torch.equal(orig["layers.0.feed_forward.w3.weight"], sd["layers.0.mlp.up_proj.weight"])
    assert torch.equal(orig["output.weight"], sd["lm_head.weight"])
    assert set(orig) >= {"tok_embeddings.weight", "cls_embedding.uncond_embedding", "norm.weight",
                         "layers.0.attention_norm.weight", "layers.0.ffn_norm.weight", "layers.0.attention.wo.weight"}
    back = original_to_native(orig)
    assert set(back) == set(sd) and all(torch.equal(back[k], sd[k]) for k in sd)


def test_original_and_hf_files_give_identical_logits(tmp_path):
    m = tiny_gpt()
    # original FoundationVision file: weights under "model", plus an argparse Namespace and rope buffer
    orig = native_to_original(m.state_dict())
    orig["freqs_cis"] = torch.zeros(22, 8, 2)
    pt = tmp_path / "t2i_tiny.pt"
    torch.save({"model": orig, "args": argparse.Namespace(gpt_model="GPT-tiny")}, pt)
    m_orig = load_gpt(pt, head_dim=16, grid=4)
    assert m_orig.cfg == m.cfg
    _same(m, m_orig)
    # HF layout written by save_gpt, read back through config.json
    d = save_gpt(m_orig, tmp_path / "hf")
    conf = json.loads((d / "config.json").read_text())
    assert conf["block_size"] == 16 and conf["cls_token_num"] == 6 and conf["num_hidden_layers"] == 2
    m_hf = load_gpt(d)
    _same(m, m_hf)
    # native layout also accepted
    save_gpt(m, tmp_path / "native", layout="native")
    _same(m, load_gpt(tmp_path / "native"))
    # a non-LlamaGen prefix rotary table survives the round trip (older files default to "zero")
    ident = tiny_gpt(prefix_rope="identity")
    assert conf["prefix_rope"] == "zero" and load_gpt(save_gpt(ident, tmp_path / "ident")).cfg == ident.cfg
    del conf["prefix_rope"]
    assert config_from_hf(conf).prefix_rope == "zero"


def test_original_file_with_a_non_64_head_size(tmp_path):
    """The shapes do not determine the head count: an original file without a rotary table needs
    head_dim (or cfg) and grid, and loads with them to the same logits; a rotary table decides both."""
    m = tiny_gpt(dim=96, n_head=3)  # head_dim 32
    orig = native_to_original(m.state_dict())
    pt = tmp_path / "t2i_heads32.pt"
    torch.save({"model": orig}, pt)
    with pytest.raises(ValueError, match="head_dim and grid"):
        load_gpt(pt)
    with pytest.raises(ValueError, match="does not determine head_dim"):
        load_gpt(pt, grid=4)
    with pytest.raises(ValueError, match="does not determine grid"):
        load_gpt(pt, head_dim=32)
    _same(m, load_gpt(pt, head_dim=32, grid=4))
    _same(m, load_gpt(pt, n_head=3, grid=4))
    _same(m, load_gpt(pt, cfg=m.cfg))
    orig["freqs_cis"] = torch.zeros(6 + 16, 16, 2)  # LlamaGen's table: [P + grid^2, head_dim / 2, 2]
    torch.save({"model": orig}, pt)
    assert load_gpt(pt).cfg == m.cfg
    with pytest.raises(CheckpointError, match="head_dim=64 contradicts"):
        load_gpt(pt, head_dim=64)


def test_hf_bin_and_sharded_safetensors(tmp_path):
    m = tiny_gpt()
    hf = native_to_hf(m.state_dict())
    conf = config_to_hf(m.cfg)
    a = tmp_path / "bin"
    a.mkdir()
    (a / "config.json").write_text(json.dumps(conf))
    torch.save(hf, a / "pytorch_model.bin")
    _same(m, load_gpt(a))
    b = tmp_path / "shards"
    b.mkdir()
    (b / "config.json").write_text(json.dumps(conf))
    keys = sorted(hf)
    shards = {"model-00001-of-00002.safetensors": keys[: len(keys) // 2],
              "model-00002-of-00002.safetensors": keys[len(keys) // 2:]}
    for name, ks in shards.items():
        save_file({k: hf[k].contiguous() for k in ks}, str(b / name))
    (b / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {k: n for n, ks in shards.items() for k in ks}}))
    _same(m, load_gpt(b))
    bf = load_gpt(a, dtype=torch.bfloat16)
    assert bf.lm_head.weight.dtype == torch.bfloat16


def _write_hf(tmp_path, sd, cfg):
    d = tmp_path / "ckpt"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(config_to_hf(cfg)))
    save_file({k: v.contiguous() for k, v in sd.items()}, str(d / "model.safetensors"))
    return d


def test_loader_errors_name_the_keys(tmp_path):
    m = tiny_gpt()
    hf = native_to_hf(m.state_dict())
    bad = dict(hf)
    del bad["model.layers.1.mlp.up_proj.weight"]
    bad["model.layers.0.extra.weight"] = torch.zeros(2)
    with pytest.raises(CheckpointError, match=r"missing keys: model\.layers\.1\.mlp\.up_proj\.weight"):
        load_gpt(_write_hf(tmp_path, bad, m.cfg))
    with pytest.raises(CheckpointError, match=r"unexpected keys: .*layers\.0\.extra\.weight"):
        load_gpt(_write_hf(tmp_path, bad, m.cfg))
    wrong = dict(hf)
    wrong["lm_head.weight"] = torch.zeros(65, 64)
    with pytest.raises(CheckpointError, match=r"shape mismatches: lm_head\.weight \(65, 64\) != \(64, 64\)"):
        load_gpt(_write_hf(tmp_path, wrong, m.cfg))
    stray = dict(hf)
    stray["transformer.h.0.weight"] = torch.zeros(1)
    with pytest.raises(CheckpointError, match=r"unexpected keys in HF-layout checkpoint: transformer\.h\.0\.weight"):
        load_gpt(_write_hf(tmp_path, stray, m.cfg))
    orig = native_to_original(m.state_dict())
    del orig["layers.1.attention.wqkv.weight"]
    torch.save({"model": orig}, tmp_path / "missing.pt")
    with pytest.raises(CheckpointError, match=r"missing keys: layers\.1\.attention\.wqkv\.weight$"):
        load_gpt(tmp_path / "missing.pt", cfg=m.cfg)
    orig["layers.0.attention.bogus"] = torch.zeros(1)
    with pytest.raises(CheckpointError, match=r"layers\.0\.attention\.bogus"):
        original_to_native(orig)
    # corrupt / unsafe files
    d = tmp_path / "corrupt"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(config_to_hf(m.cfg)))
    (d / "model.safetensors").write_bytes(b"\x00garbage" * 10)
    with pytest.raises(CheckpointError, match="corrupt"):
        load_gpt(d)
    evil = tmp_path / "evil.pt"
    torch.save({"model": {"w": torch.zeros(1)}, "obj": torch.nn.Linear(1, 1)}, evil)
    with pytest.raises(CheckpointError, match="weights_only"):
        load_gpt(evil)
    nocfg = tmp_path / "nocfg"
    nocfg.mkdir()
    save_file({"x": torch.zeros(1)}, str(nocfg / "model.safetensors"))
    with pytest.raises(CheckpointError):
        load_drafter(nocfg)
    with pytest.raises(CheckpointError, match="num_attention_heads"):
        config_from_hf({"vocab_size": 4, "hidden_size": 8})
    with pytest.raises(FileNotFoundError):
        load_gpt(tmp_path / "nowhere")


def test_drafter_files(tmp_path):
    m = tiny_gpt()
    d = tiny_drafter(m)
    keys = set(d.state_dict())
    assert keys == {"embed_tokens.weight", "fc.weight", "fc.bias", "layers.0.self_attn.q_proj.weight",
                    "layers.0.self_attn.k_proj.weight", "layers.0.self_attn.v_proj.weight",
                    "layers.0.self_attn.o_proj.weight", "layers.0.mlp.gate_proj.weight",
                    "layers.0.mlp.up_proj.weight", "layers.0.mlp.down_proj.weight",
                    "layers.0.post_attention_layernorm.weight"}

    def outputs(dr):
        cap = torch.randn(6, 32, generator=torch.Generator().manual_seed(0))
        pre = m.prefill(cap, 2, 4)
        dr.prefill(cap, 2, pre, 4)
        return dr.forward(torch.tensor([1, 2]), pre.hidden[:, -2:], torch.arange(2))

    ref = outputs(d)
    save_drafter(d, tmp_path / "st")
    for got in zip(outputs(load_drafter(tmp_path / "st", target=m)), ref):
        torch.testing.assert_close(*got, atol=0, rtol=0)
    # the release's format: config.json (num_hidden_layers 1) + pytorch_model.bin
    b = tmp_path / "bin"
    b.mkdir()
    conf = config_to_hf(m.cfg)
    conf["num_hidden_layers"] = 1
    (b / "config.json").write_text(json.dumps(conf))
    sd = d.state_dict()
    sd["layers.0.self_attn.rotary_emb.inv_freq"] = torch.zeros(4)  # tolerated buffer
    torch.save(sd, b / "pytorch_model.bin")
    loaded = load_drafter(b, target=m)
    assert not loaded.embed_tokens.weight.requires_grad
    for got in zip(outputs(loaded), ref):
        torch.testing.assert_close(*got, atol=0, rtol=0)
    # no embedding in the file: taken from the target
    no_emb = {k: v for k, v in d.state_dict().items() if k != "embed_tokens.weight"}
    torch.save(no_emb, b / "pytorch_model.bin")
    assert torch.equal(load_drafter(b, target=m).embed_tokens.weight, m.embed_tokens.weight)
    with pytest.raises(CheckpointError, match=r"missing keys: embed_tokens\.weight"):
        load_drafter(b)
    # an input norm on layer 0 is not part of this drafter
    extra = dict(d.state_dict())
    extra["layers.0.input_layernorm.weight"] = torch.ones(64)
    torch.save(extra, b / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match=r"unexpected keys: layers\.0\.input_layernorm\.weight"):
        load_drafter(b, target=m)


def test_xl_config_and_parameter_counts():
    lantern_conf = {  # fields as in the HF-style LlamaGen-T2I config.json
        "architectures": ["LlamaForCausalLM"], "hidden_size": 1280, "intermediate_size": 3584,
        "num_attention_heads": 20, "num_hidden_layers": 36, "num_key_value_heads": 20,
        "vocab_size": 16384, "rms_norm_eps": 1e-5, "block_size": 256, "cls_token_num": 120,
        "input_type": "t2i", "caption_dim": 2048, "class_dropout_p": 0.1, "rope_base": 10000,
        "hidden_act": "silu",
    }
    assert config_from_hf(lantern_conf) == GPTConfig.llamagen_xl()
    assert config_from_hf({**lantern_conf, "num_hidden_layers": 1}) == GPTConfig.llamagen_xl_drafter()
    counts = xl_parameter_counts()
    assert counts == {
        "gpt_parameters": 777_678_080,  # ~775M: embeddings 2 x 20.97M + 36 x 20.32M + cap_proj 4.26M
        "gpt_buffers": 245_760,  # uncond_embedding 120 x 2048
        "drafter_parameters": 44_567_040,
        "drafter_trainable": 23_595_520,  # fc 3.28M + one layer 20.32M
        "drafter_embedding": 20_971_520,
    }
