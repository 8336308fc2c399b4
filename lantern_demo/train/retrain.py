"""The retraining pipeline behind ``python -m lantern_demo.train`` (stage functions + settings).

Output layout (what ``lantern_demo.pipeline`` loads for the ``emoji`` preset):
``vq/`` (``VQModel.save_pretrained``), ``text_encoder/`` (``ClassTextEncoder.save``),
``target/`` (``checkpoints.save_gpt``), ``drafter/`` (``checkpoints.save_drafter``),
``metrics.json`` (every stage's measurements), ``samples.png`` and ``README.md``.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch

from . import emoji_data, precision


@dataclass
class Settings:
    """Step counts and sizes of one retraining run (``full()`` or ``smoke()``)."""

    data_limit: int | None = None
    curate: bool = True  # keep only the emojis a prompt can name (emoji_data.curate)
    vq_steps: int = 2400
    vq_batch: int = 24
    vq_full_batch: int = 12
    vq_crop_fraction: float = 0.8
    gpt_steps: int = 4000
    gpt_batch: int = 16
    gpt_input_noise: float = 0.05  # share of the GPT's input tokens replaced by random codes (train_gpt.corrupt_inputs)
    gpt_content_weight: float = 0.0  # weight of train_gpt.content_loss
    gpt_condition: str = "class"  # train_gpt.make_conditioning: "class" (one embedding per emoji) or "caption"
    gpt_prefix_rope: str = "identity"  # GPTConfig.prefix_rope
    drafter_steps: int = 1200
    drafter_batch: int = 16
    drafter_self_samples: int = 0  # target samples mixed into the drafter's batches (0: data only)
    eval_batch: int = 64
    grid_n: int = 16  # held-out and training captions in the sample grid
    spec_prompts: int = 8  # prompts per speculative setting measured for the card
    spec_settings: int | None = None  # measure only the first n of card.SPEC_SETTINGS
    recognition_n: int = 128  # training captions of the recognition measure (lantern_demo.train.recognition)

    @classmethod
    def full(cls) -> "Settings":
        return cls()

    @classmethod
    def smoke(cls) -> "Settings":
        return cls(data_limit=24, vq_steps=3, vq_batch=4, vq_full_batch=2, gpt_steps=3, gpt_batch=4,
                   drafter_steps=3, drafter_batch=4, eval_batch=8, grid_n=1,
                   spec_prompts=1, spec_settings=2, recognition_n=4)


def _metrics_path(out: Path) -> Path:
    return out / "metrics.json"


def load_metrics(out: Path) -> dict:
    p = _metrics_path(out)
    return json.loads(p.read_text()) if p.exists() else {}


def update_metrics(out: Path, key: str, value) -> dict:
    m = load_metrics(out)
    m[key] = value
    _metrics_path(out).write_text(json.dumps(m, indent=2, ensure_ascii=False))
    return m


def stage_data(out: Path, cache: Path, seed: int, s: Settings, log) -> emoji_data.EmojiDataset:
    t = time.time()
    stem = "emoji64" if s.data_limit is None else f"emoji64_smoke{s.data_limit}"
    cached = (Path(cache) / f"{stem}.npz").exists()
    ds = emoji_data.load_or_build(cache, seed=seed, limit=s.data_limit, log=log)
    rendered = len(ds)
    dropped = None
    if s.curate:
        ds, dropped = emoji_data.curate(ds)
        log(f"emoji_data: curated to {len(ds)} emojis ({int(ds.split.sum())} held-out); dropped {dropped}")
    prev = load_metrics(out).get("data", {})
    update_metrics(out, "data", {
        "render_seconds": prev.get("render_seconds") if cached else round(time.time() - t, 1),
        "rendered": rendered, "dropped": dropped,
        "images": len(ds), "heldout": int(ds.split.sum()), "captions": sum(len(c) for c in ds.captions),
        "image_size": int(ds.images.shape[1]), "seed": seed, "seconds": round(time.time() - t, 1),
    })
    return ds


def stage_vq(out: Path, ds, seed: int, s: Settings, log):
    from .train_vq import train_vq

    tr, he = ds.images[ds.split == 0], ds.images[ds.split == 1]
    vq, m = train_vq(tr, he, out / "vq", steps=s.vq_steps, batch=s.vq_batch, full_batch=s.vq_full_batch, crop_fraction=s.vq_crop_fraction,
                     seed=seed, restart_every=max(1, min(100, s.vq_steps // 4)), log=log)
    update_metrics(out, "vq", m)
    return vq


def token_ids(out: Path, cache: Path, ds, log) -> torch.Tensor:
    """VQ token ids [N, 256] of every image under the background rule, cached next to the dataset.

    The background code is chosen on the training images (``train_vq.background_code``);
    the rule's effect on held-out reconstruction is recorded in metrics.json ("tokens").
    The cache is keyed by the VQ weights.
    """
    import hashlib

    from .train_vq import background_code, background_patches, encode_ids, evaluate, load_vq

    wfile = out / "vq" / "diffusion_pytorch_model.safetensors"
    key = hashlib.sha1(wfile.read_bytes()).hexdigest()[:12] + f"_{len(ds)}_bg"
    p = cache / f"ids_{key}.pt"
    if p.exists():
        return torch.load(p, weights_only=True)
    t = time.time()
    vq = load_vq(out / "vq")
    ids = encode_ids(vq, ds.images)  # [N, h, w], the encoder's own codes
    bg = background_patches(ds.images, ids.shape[1])
    train = torch.from_numpy(ds.split == 0)
    code = background_code(ids[train], bg[train])
    ids[bg] = code  # the background rule (what encode_ids(..., background=code) does)
    ids = ids.reshape(len(ds), -1)
    cache.mkdir(parents=True, exist_ok=True)
    torch.save(ids, p)
    m = {"background_code": code, "background_fraction": float(bg.float().mean()), "seconds": round(time.time() - t, 1)}
    held = ds.images[ds.split == 1]
    if len(held):
        m["heldout"] = evaluate(vq, held, background=code)
    update_metrics(out, "tokens", m)
    log(f"encoded {len(ds)} images to tokens in {time.time() - t:.0f}s; background code {code}, {m}")
    return ids


def run(out: Path, cache: Path, stages: list[str], seed: int = 0, smoke: bool = False, log=print,
        drafter_self_samples: int | None = None, resume: bool = False, time_limit: float | None = None) -> dict:
    """Run ``stages``; returns metrics.json's content. ``resume`` / ``time_limit`` (seconds): see
    ``lantern_demo.train.resume`` (the GPT stage's state is kept in ``cache/resume/gpt.pt``); when the
    limit stops a stage, the later stages are not run and ``resume.Paused`` propagates."""
    s = Settings.smoke() if smoke else Settings.full()
    if drafter_self_samples is not None:
        s = replace(s, drafter_self_samples=drafter_self_samples)
    out, cache = Path(out), Path(cache)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    np.random.seed(seed)
    previous = load_metrics(out)
    timings, machines = previous.get("timings", {}), previous.get("machines", {})
    ds = None

    def timed(name, fn):
        t = time.time()
        log(f"== stage {name}")
        r = fn()
        timings[name] = round(time.time() - t, 1)
        machines[name] = precision.machine()
        update_metrics(out, "timings", timings)
        update_metrics(out, "machines", machines)
        return r

    ds = timed("data", lambda: stage_data(out, cache, seed, s, log))
    if "vq" in stages:
        timed("vq", lambda: stage_vq(out, ds, seed, s, log))
    if "gpt" in stages:
        from .train_gpt import stage_gpt

        ids = token_ids(out, cache, ds, log)
        state = cache / "resume" / ("gpt_smoke.pt" if smoke else "gpt.pt")
        timed("gpt", lambda: stage_gpt(out, ds, ids, seed, s, log, state_path=state, resume=resume,
                                       time_limit=time_limit))
    if "drafter" in stages:
        from .train_drafter import stage_drafter

        ids = token_ids(out, cache, ds, log)
        timed("drafter", lambda: stage_drafter(out, ds, ids, seed, s, log))
    if "card" in stages:
        from .card import stage_card

        full = emoji_data.load_or_build(cache, seed=seed, limit=s.data_limit, log=log)
        timed("card", lambda: stage_card(out, ds, full, seed, s, log))
    m = load_metrics(out)
    m["settings"] = asdict(s)
    _metrics_path(out).write_text(json.dumps(m, indent=2, ensure_ascii=False))
    return m
