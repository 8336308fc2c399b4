"""Component fetching from a fake, local Hugging Face cache (never the network)."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"

import subprocess
import sys
from pathlib import Path

import pytest

from lantern_demo.hub import (
    PRESETS,
    Component,
    Preset,
    WeightsUnavailable,
    fetch,
    get_preset,
    offline_mode,
)

REV = "0123456789abcdef0123456789abcdef01234567"


def fake_repo(cache: Path, repo_id: str, files: dict[str, bytes], rev: str = REV, ref: str = "main") -> Path:
    """Lay out ``repo_id`` the way huggingface_hub's cache does (real files, no blobs/symlinks)."""
    root = cache / ("models--" + repo_id.replace("/", "--"))
    snap = root / "snapshots" / rev
    for name, data in files.items():
        (snap / name).parent.mkdir(parents=True, exist_ok=True)
        (snap / name).write_bytes(data)
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / ref).write_text(rev)
    return snap


def test_offline_is_on():
    assert offline_mode()


def test_fetch_file_and_snapshot_from_cache(tmp_path):
    snap = fake_repo(tmp_path, "peizesun/llamagen_t2i", {"vq_ds16_t2i.pt": b"vq"})
    p = fetch("peizesun/llamagen_t2i", "vq_ds16_t2i.pt", cache_dir=tmp_path)
    assert p == snap / "vq_ds16_t2i.pt" and p.read_bytes() == b"vq"
    assert fetch("peizesun/llamagen_t2i", "vq_ds16_t2i.pt", revision=REV, cache_dir=tmp_path) == p

    snap2 = fake_repo(tmp_path, "jadohu/LlamaGen-T2I", {"config.json": b"{}", "model.safetensors": b"w"})
    folder = fetch("jadohu/LlamaGen-T2I", cache_dir=tmp_path, required=("config.json", "*.safetensors"))
    assert folder == snap2


def test_missing_file_or_repo_raises_weights_unavailable(tmp_path):
    fake_repo(tmp_path, "peizesun/llamagen_t2i", {"other.pt": b"x"})
    with pytest.raises(WeightsUnavailable) as ei:
        fetch("peizesun/llamagen_t2i", "vq_ds16_t2i.pt", component="VQ image tokenizer", cache_dir=tmp_path)
    msg = str(ei.value)
    assert "VQ image tokenizer" in msg and "peizesun/llamagen_t2i" in msg and "vq_ds16_t2i.pt" in msg
    assert "revision main" in msg and "HF_HUB_OFFLINE" in msg and "HF_HOME" in msg
    assert "hf download peizesun/llamagen_t2i vq_ds16_t2i.pt" in msg
    assert ei.value.repo_id == "peizesun/llamagen_t2i"

    with pytest.raises(WeightsUnavailable, match="jadohu/llamagen_drafter"):
        fetch("jadohu/llamagen_drafter", cache_dir=tmp_path)
    with pytest.raises(WeightsUnavailable, match="revision v2"):
        fetch("peizesun/llamagen_t2i", "other.pt", revision="v2", cache_dir=tmp_path)


def test_partial_snapshot_is_reported(tmp_path):
    fake_repo(tmp_path, "jadohu/LlamaGen-T2I", {"config.json": b"{}"})
    with pytest.raises(WeightsUnavailable, match=r"jadohu/LlamaGen-T2I.*\*\.safetensors"):
        fetch("jadohu/LlamaGen-T2I", cache_dir=tmp_path, required=("config.json", "*.safetensors"))


def test_hf_home_is_respected(tmp_path):
    fake_repo(tmp_path / "hub", "org/name", {"f.txt": b"hello"})
    code = ("from lantern_demo.hub import fetch; "
            "print(fetch('org/name', 'f.txt').read_text())")
    env = {**os.environ, "HF_HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    env.pop("HF_HUB_CACHE", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "hello"


def test_presets():
    p = get_preset("llamagen-t2i")
    assert (p.resolution, p.grid, p.num_tokens, p.needs_gpu) == (256, 16, 256, True)
    assert p.target.repo_id == "jadohu/LlamaGen-T2I" and p.drafter.repo_id == "jadohu/llamagen_drafter"
    assert (p.vq.repo_id, p.vq.filename) == ("peizesun/llamagen_t2i", "vq_ds16_t2i.pt")
    assert p.text_encoder.repo_id == "google/flan-t5-xl"
    q = PRESETS["llamagen-t2i-512"]
    assert (q.resolution, q.grid) == (512, 32)
    assert q.target.repo_id == "jadohu/LlamaGen-T2I-2" and q.drafter.repo_id == "jadohu/llamagen2_drafter"
    assert q.vq == p.vq
    assert any(c.startswith("hf download google/flan-t5-xl --include") for c in p.download_commands())
    with pytest.raises(KeyError, match="llamagen-t2i"):
        get_preset("nope")


def test_preset_fetch_and_missing(tmp_path):
    p = get_preset("llamagen-t2i")
    fake_repo(tmp_path, "peizesun/llamagen_t2i", {"vq_ds16_t2i.pt": b"vq"})
    assert p.fetch("vq", cache_dir=tmp_path).read_bytes() == b"vq"
    missing = p.missing(cache_dir=tmp_path)
    assert [e.component for e in missing] == [
        "target model of preset 'llamagen-t2i'",
        "drafter of preset 'llamagen-t2i'",
        "text encoder of preset 'llamagen-t2i'",
    ]
    with pytest.raises(WeightsUnavailable, match="jadohu/LlamaGen-T2I"):
        p.fetch_all(cache_dir=tmp_path)
    # the drafter is optional: SJD runs without it
    assert "drafter of preset 'llamagen-t2i'" not in [e.component for e in p.missing(False, cache_dir=tmp_path)]


def test_local_preset_hook(tmp_path):
    (tmp_path / "emoji" / "vq").mkdir(parents=True)
    local = Preset(name="emoji", title="Emoji", resolution=64, grid=16, local_dir=str(tmp_path / "emoji"),
                   local_layout={"vq": "vq", "target": "gpt"})
    assert local.components == {}
    assert local.fetch("vq") == tmp_path / "emoji" / "vq"
    with pytest.raises(WeightsUnavailable, match="gpt"):
        local.fetch("target")
    assert [e.path for e in local.missing()] == [str(tmp_path / "emoji" / "gpt")]
    assert isinstance(Component("a/b").command(), str)
