"""The retraining pipeline behind ``python -m lantern_demo.train`` (stage functions + settings).

Output layout (what ``lantern_demo.pipeline`` loads for the ``emoji`` preset):
``vq/`` (``VQModel.save_pretrained``), ``text_encoder/`` (``ClassTextEncoder.save``),
``target/`` (``checkpoints.save_gpt``), ``drafter/`` (``checkpoints.save_drafter``),
``metrics.json`` (every stage's measurements), ``ATTRIBUTION.md``, ``samples.png`` and ``README.md``.

Data (``emoji.data.build_styled``): every kept emoji in every style that draws it, each rendition
with ``Settings.variants`` scale/shift variants. Rows of the token table are renditions x variants;
a row's class is its emoji, so one prompt names several pictures.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch

from ..checkpoints import load_gpt, save_drafter, save_gpt
from ..emoji import data as emoji_data
from ..emoji import features
from ..emoji import styles as emoji_styles
from ..emoji.records import load_metrics, save_metrics, update_metrics
from ..emoji.tokens import background_code, background_patches, encode_ids, load_vq
from ..text import load_text_encoder
from . import precision
from .card import stage_card
from .train_drafter import draw_self_samples, train_drafter
from .train_gpt import ClassBank, train_gpt
from .train_vq import evaluate, neighbour_distances, train_vq


@dataclass
class Settings:
    """Step counts and sizes of one retraining run (``full()`` or ``smoke()``)."""

    smoke: bool = False  # the shipped smoke sources (emoji_data.Sources.smoke) instead of the registry packs
    variants: int = 4  # renditions per emoji and style: the canonical one and scale/shift variants
    vq_codes: int = 4096
    vq_steps: int = 2400
    vq_batch: int = 24
    vq_full_batch: int = 12
    vq_crop_fraction: float = 0.8
    gpt_steps: int = 8000
    gpt_batch: int = 16
    gpt_dim: int = 256
    gpt_layers: int = 6
    gpt_input_noise: float = 0.05  # share of the GPT's input tokens replaced by random codes (train_gpt.corrupt_inputs)
    drafter_steps: int = 1200
    drafter_batch: int = 16
    drafter_self_samples: int = 2048  # target samples mixed into the drafter's batches (0: data only)
    eval_style: str = "fluent"  # the style the evaluation encoder never sees: its recognition ceiling
    eval_epochs: int = 20
    eval_batch: int = 64
    grid_seeds: int = 4  # samples per example prompt in the sample grid
    spec_prompts: int = 8  # prompts per speculative setting measured for the card
    spec_settings: int | None = None  # measure only the first n of card.SPEC_SETTINGS
    recognition_n: int = 128  # known emojis of the recognition measure (lantern_demo.train.recognition)

    @classmethod
    def full(cls) -> "Settings":
        return cls()

    @classmethod
    def smoke_run(cls) -> "Settings":
        return cls(smoke=True, variants=2, vq_codes=64, vq_steps=3, vq_batch=4, vq_full_batch=2, gpt_steps=3,
                   gpt_batch=4, gpt_dim=32, gpt_layers=2, drafter_steps=3, drafter_batch=4, drafter_self_samples=4,
                   eval_epochs=1, eval_batch=8, grid_seeds=2, spec_prompts=1, spec_settings=2, recognition_n=4)


def stage_data(out: Path, cache: Path, seed: int, s: Settings, log) -> emoji_data.StyledDataset:
    t = time.time()
    ds, dropped = emoji_data.load_or_build_styled(cache, smoke=s.smoke, seed=seed, variants=s.variants, log=log)
    (out / "ATTRIBUTION.md").write_text(emoji_styles.attribution())
    update_metrics(out, "data", {
        "emojis": len(ds.emojis), "renditions": int(len(ds.images)), "variants": int(ds.images.shape[1]),
        "per_style": {st: int((ds.style == i).sum()) for i, st in enumerate(emoji_styles.STYLE_NAMES)},
        "heldout_renditions": int(ds.heldout.sum()), "dropped": dropped, "augment": emoji_data.AUGMENT,
        "image_size": int(ds.images.shape[2]), "seed": seed, "seconds": round(time.time() - t, 1),
        "sources": "smoke file" if s.smoke else "registry packages",
    })
    return ds


def stage_vq(out: Path, ds: emoji_data.StyledDataset, seed: int, s: Settings, log) -> None:
    train = ds.images[~ds.heldout].reshape(-1, *ds.images.shape[2:])
    _, m = train_vq(train, ds.images[ds.heldout, 0], out / "vq", steps=s.vq_steps, batch=s.vq_batch,
                    full_batch=s.vq_full_batch, crop_fraction=s.vq_crop_fraction, seed=seed,
                    restart_every=max(1, min(100, s.vq_steps // 4)), config_overrides={"num_vq_embeddings": s.vq_codes},
                    log=log)
    m["neighbour_distance"] = neighbour_distances(out / "vq")
    update_metrics(out, "vq", m)


def row_classes(ds: emoji_data.StyledDataset) -> np.ndarray:
    """int [M * V]: the class (emoji) of every row of :func:`token_ids`."""
    return np.repeat(ds.item, ds.images.shape[1])


def row_split(ds: emoji_data.StyledDataset) -> tuple[np.ndarray, np.ndarray]:
    """(training rows: every variant of the renditions not held out; held-out rows: their canonical variant)."""
    v = ds.images.shape[1]
    held = np.repeat(ds.heldout, v)
    return np.nonzero(~held)[0], np.nonzero(ds.heldout)[0] * v


def token_ids(out: Path, cache: Path, ds: emoji_data.StyledDataset, log) -> torch.Tensor:
    """VQ token ids [M * V, 256] of every rendition variant under the background rule, cached by VQ weights.

    The background code is chosen on the training rows (``emoji.tokens.background_code``); the rule's
    effect on held-out reconstruction is recorded in metrics.json ("tokens").
    """
    images = ds.images.reshape(-1, *ds.images.shape[2:])
    wfile = out / "vq" / "diffusion_pytorch_model.safetensors"
    key = hashlib.sha1(wfile.read_bytes()).hexdigest()[:12] + f"_{len(images)}_bg"
    p = cache / f"ids_{key}.pt"
    if p.exists():
        return torch.load(p, weights_only=True)
    t = time.time()
    vq = load_vq(out / "vq")
    ids = encode_ids(vq, images)
    bg = background_patches(images, ids.shape[1])
    train = torch.from_numpy(np.isin(np.arange(len(images)), row_split(ds)[0]))
    code = background_code(ids[train], bg[train])
    ids[bg] = code
    ids = ids.reshape(len(images), -1)
    cache.mkdir(parents=True, exist_ok=True)
    torch.save(ids, p)
    m = {"background_code": code, "background_fraction": float(bg.float().mean()), "seconds": round(time.time() - t, 1),
         "heldout": evaluate(vq, ds.images[ds.heldout, 0], background=code)}
    update_metrics(out, "tokens", m)
    log(f"encoded {len(images)} images to tokens in {time.time() - t:.0f}s; background code {code}, {m}")
    return ids


def stage_gpt(out: Path, ds: emoji_data.StyledDataset, ids: torch.Tensor, seed: int, s: Settings, log,
              state_path: Path | None = None, resume: bool = False, time_limit: float | None = None) -> None:
    train_rows, held_rows = row_split(ds)
    dim = s.gpt_dim
    gpt, text, m = train_gpt(ids, ds.captions, train_rows, held_rows, vocab_size=s.vq_codes, steps=s.gpt_steps,
                             batch=s.gpt_batch, seed=seed, log=log, eval_batch=s.eval_batch,
                             input_noise=s.gpt_input_noise, condition="class", names=ds.names, symbols=ds.emojis,
                             row_class=row_classes(ds),
                             config_overrides={"dim": dim, "n_layer": s.gpt_layers, "n_head": max(1, dim // 32),
                                               "ffn_hidden": int(dim * 8 / 3) // 16 * 16, "prefix_rope": "identity"},
                             state_path=state_path, resume=resume, time_limit=time_limit)
    save_gpt(gpt, out / "target")
    text.save(out / "text_encoder")
    update_metrics(out, "gpt", m)


def stage_drafter(out: Path, ds: emoji_data.StyledDataset, ids: torch.Tensor, seed: int, s: Settings, log) -> None:
    gpt = load_gpt(out / "target")
    text = load_text_encoder(out / "text_encoder")
    train_rows, held_rows = row_split(ds)
    bank = ClassBank.of_classes(row_classes(ds))
    samples, sample_seconds = None, None
    if s.drafter_self_samples:
        t = time.time()
        samples = draw_self_samples(gpt, text, bank, train_rows, s.drafter_self_samples, seed, log)
        sample_seconds = round(time.time() - t, 1)
    drafter, m = train_drafter(gpt, text, ids, bank, train_rows, held_rows, steps=s.drafter_steps,
                               batch=s.drafter_batch, seed=seed, log=log, eval_batch=s.eval_batch,
                               self_samples=samples)
    if samples is not None:
        m.update(self_samples=len(samples[0]), self_sample_seconds=sample_seconds)
    save_drafter(drafter, out / "drafter")
    update_metrics(out, "drafter", m)


def stage_eval(out: Path, cache: Path, s: Settings, log) -> None:
    """The evaluation encoder on every style but ``s.eval_style`` (``emoji.features.styled_set``), saved in
    ``out/eval`` (the card reads it from there; ``assets/eval`` is the shipped copy)."""
    data = features.styled_set(cache, s.eval_style, smoke=s.smoke)
    _, report = features.train(data, out / "eval", epochs=s.eval_epochs, log=log)
    update_metrics(out, "eval", report)


def run(out: Path, cache: Path, stages: list[str], seed: int = 0, smoke: bool = False, log=print,
        drafter_self_samples: int | None = None, resume: bool = False, time_limit: float | None = None) -> dict:
    """Run ``stages``; returns metrics.json's content. ``resume`` / ``time_limit`` (seconds): see
    ``lantern_demo.train.resume`` (the GPT stage's state is kept in ``cache/resume/gpt.pt``); when the
    limit stops a stage, the later stages are not run and ``resume.Paused`` propagates."""
    s = Settings.smoke_run() if smoke else Settings.full()
    if drafter_self_samples is not None:
        s = replace(s, drafter_self_samples=drafter_self_samples)
    out, cache = Path(out), Path(cache)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    np.random.seed(seed)
    previous = load_metrics(out)
    timings, machines = previous.get("timings", {}), previous.get("machines", {})

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
        ids = token_ids(out, cache, ds, log)
        state = cache / "resume" / ("gpt_smoke.pt" if smoke else "gpt.pt")
        timed("gpt", lambda: stage_gpt(out, ds, ids, seed, s, log, state_path=state, resume=resume,
                                       time_limit=time_limit))
    if "drafter" in stages:
        ids = token_ids(out, cache, ds, log)
        timed("drafter", lambda: stage_drafter(out, ds, ids, seed, s, log))
    if "eval" in stages:
        timed("eval", lambda: stage_eval(out, cache, s, log))
    if "card" in stages:
        timed("card", lambda: stage_card(out, ds, seed, s, log))
    m = load_metrics(out)
    m["settings"] = asdict(s)
    save_metrics(out, m)
    return m
