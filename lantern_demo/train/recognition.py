"""How often samples of training captions show the emoji asked for: the model card's recognition measure.

For ``n`` training emojis (a seeded draw) the prompt "an emoji of <main name>" is
sampled by AR in batches (``self_samples.sample_tokens``) at the emoji preset's
CFG scale, temperature and top-k, and once more greedily. Our evaluation encoder
(``lantern_demo.bench.features``, trained on real images only) embeds every
decoded sample and every prompt; the draw is cut into consecutive groups of
``group`` prompts, and a sample is *recognised* when its own prompt is the most
similar (cosine) within its group. Chance is ``n / group`` recognised.

Two draws (``DRAWS``): ``full`` takes the 128 emojis from the training split of the whole
rendered dataset, as the measure did before the dataset was curated (the issue's gate
is judged there: skin-tone, flag and gender variants among them are asked for by their
full names); ``curated`` takes them from the curated set the model is trained on, whose
look-alikes are fewer but whose real images the evaluation encoder itself recognises
less often (its ceiling, ``real_images``, is reported with every number).

For a class-conditional model (``text.ClassTextEncoder``) a second ceiling,
``class_ceiling``, answers every prompt with the real image of the class the prompt
is mapped to: what a model that draws each of its classes perfectly would score.
A prompt whose emoji is not among the classes (a skin-tone or flag variant of the
``full`` draw, or one left out of the training budget) can at best get a look-alike.

``python -m lantern_demo.train.recognition --weights assets/emoji`` prints both for a
folder of weights (the card stage records them in metrics.json and the model card).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

N_PROMPTS = 128
GROUP = 32
SEED = 7
DRAWS = ("full", "curated")


def prompt_of(captions: list[str]) -> str:
    """The second caption template of the main name ("an emoji of X"), as the benchmark uses."""
    return captions[1] if len(captions) > 1 else captions[0]


def recognised(image_feats: np.ndarray, text_feats: np.ndarray, group: int) -> np.ndarray:
    """bool [n]: sample i's own prompt is its most similar within i's group of ``group`` consecutive items."""
    a = image_feats / np.linalg.norm(image_feats, axis=1, keepdims=True)
    b = text_feats / np.linalg.norm(text_feats, axis=1, keepdims=True)
    hit = np.zeros(len(a), dtype=bool)
    for lo in range(0, len(a), group):
        sim = a[lo : lo + group] @ b[lo : lo + group].T
        hit[lo : lo + group] = sim.argmax(1) == np.arange(len(sim))
    return hit


def class_answers(text, prompts: list[str], class_images: np.ndarray) -> np.ndarray:
    """[len(prompts), H, W, 3] uint8: the real image of the class ``text`` (a ``ClassTextEncoder``) maps each
    prompt to, a blank white image for a prompt that names no class."""
    blank = np.full_like(class_images[0], 255)
    return np.stack([blank if c is None else class_images[c] for c in (text.match(p)[0] for p in prompts)])


def measure(gpt, text, vq, ds, encoder, n: int = N_PROMPTS, group: int = GROUP, seed: int = SEED,
            class_images: np.ndarray | None = None, log=print) -> dict:
    """Recognised samples of ``n`` training captions, sampled and greedy, with chance and the real images'
    own score (the encoder's ceiling) in the same groups. ``class_images`` [C, H, W, 3] uint8, the real
    image of each class of a ``ClassTextEncoder`` ``text``, adds ``class_ceiling`` (module docstring)."""
    from ..presets import EMBEDDED, sampling as preset_sampling
    from ..sampling import SamplingConfig
    from .self_samples import sample_tokens

    tr = ds.indices("train")
    idx = np.random.default_rng(seed).choice(tr, size=min(n, len(tr)), replace=False)
    prompts = [prompt_of(ds.captions[i]) for i in idx]
    ids, mask, _ = text.tokenize(prompts)
    text_feats = encoder.embed_texts(prompts)
    sampled = preset_sampling(EMBEDDED)
    greedy = SamplingConfig(cfg_scale=sampled.cfg_scale, temperature=0.0, top_k=sampled.top_k)
    out = {"n": len(idx), "group": group, "seed": seed, "chance": len(idx) / group,
           "prompt": "an emoji of <main name>", "cfg_scale": sampled.cfg_scale,
           "temperature": sampled.temperature, "top_k": sampled.top_k,
           "real_images": int(recognised(encoder.embed_images(ds.images[idx]), text_feats, group).sum())}
    if class_images is not None:
        answers = class_answers(text, prompts, class_images)
        out["class_ceiling"] = int(recognised(encoder.embed_images(answers), text_feats, group).sum())
    with torch.no_grad():
        for name, sampling in (("sampled", sampled), ("greedy", greedy)):
            tokens = sample_tokens(gpt, text, ids, mask, sampling, seed=seed, log=lambda m: None)
            images = vq.decode(tokens).numpy()
            hits = recognised(encoder.embed_images(images), text_feats, group)
            out[name] = int(hits.sum())
            log(f"recognition: {name} {out[name]}/{len(idx)} (chance {out['chance']:.0f}, "
                f"real images {out['real_images']})")
    return out


def measure_draws(gpt, text, vq, full_ds, encoder, n: int = N_PROMPTS, log=print) -> dict[str, dict]:
    """``measure`` on each of ``DRAWS``: {"full": ..., "curated": ...}; ``full_ds`` is the uncurated dataset.
    A class model's classes are the curated set's training emojis, in order (``train_gpt.make_class_encoder``)."""
    from ..text import ClassTextEncoder
    from .emoji_data import curate

    sets = {"full": full_ds, "curated": curate(full_ds)[0]}
    curated = sets["curated"]
    class_images = curated.images[curated.indices("train")] if isinstance(text, ClassTextEncoder) else None
    out = {}
    for name in DRAWS:
        log(f"recognition: {name} draw")
        out[name] = measure(gpt, text, vq, sets[name], encoder, n=n, class_images=class_images, log=log)
    return out


def measure_known(gpt, text, vq, ds, encoder, held_style: str, n: int = N_PROMPTS, group: int = GROUP,
                  seed: int = SEED, relaxed=None, log=print) -> dict:
    """Recognition on ``n`` emojis the model knows (a seeded draw among those drawn in ``held_style``).

    ds: ``emoji_data.StyledDataset``; the prompt is "an emoji of <main name>". The ceiling
    (``real_images``) is the score of the canonical ``held_style`` renditions of the same emojis: the
    style the evaluation encoder never saw. ``sampled``/``greedy``: AR at the emoji preset's
    sampling, and greedily; ``relaxed`` (a ``DecodeConfig``, optional, with the drafter and neighbour
    table as ``(config, drafter, neighbors)``) adds a row decoded by that setting, prompt by prompt.
    """
    from ..engine import generate
    from ..presets import EMBEDDED, sampling as preset_sampling
    from ..sampling import SamplingConfig
    from . import emoji_styles
    from .card import caption_of
    from .self_samples import sample_tokens

    h = emoji_styles.STYLE_NAMES.index(held_style)
    rows = np.nonzero(ds.style == h)[0]
    pick = np.random.default_rng(seed).choice(rows, size=min(n, len(rows)), replace=False)
    prompts = [prompt_of(ds.captions[ds.item[r]]) for r in pick]
    ids, mask, _ = text.tokenize(prompts)
    text_feats = encoder.embed_texts(prompts)
    sampled = preset_sampling(EMBEDDED)
    greedy = SamplingConfig(cfg_scale=sampled.cfg_scale, temperature=0.0, top_k=sampled.top_k)
    out = {"n": len(pick), "group": group, "seed": seed, "chance": len(pick) / group, "held_style": held_style,
           "prompt": "an emoji of <main name>", "cfg_scale": sampled.cfg_scale, "temperature": sampled.temperature,
           "top_k": sampled.top_k,
           "real_images": int(recognised(encoder.embed_images(ds.images[pick, 0]), text_feats, group).sum())}
    with torch.no_grad():
        for name, sampling in (("sampled", sampled), ("greedy", greedy)):
            tokens = sample_tokens(gpt, text, ids, mask, sampling, seed=seed, log=lambda m: None)
            out[name] = int(recognised(encoder.embed_images(vq.decode(tokens).numpy()), text_feats, group).sum())
        if relaxed is not None:
            config, drafter, neighbors = relaxed
            tokens = torch.stack([generate(gpt, drafter, caption_of(text, p), config, gpt.cfg.grid ** 2, seed=seed + j,
                                           neighbors=neighbors).tokens for j, p in enumerate(prompts)])
            out["relaxed"] = int(recognised(encoder.embed_images(vq.decode(tokens).numpy()), text_feats, group).sum())
            out["relaxed_setting"] = f"{config.method} {config.draft} d{config.delta} k{config.k}"
    log(f"recognition: {json.dumps(out)}")
    return out


def main(argv=None) -> None:
    from ..bench.features import load as load_encoder
    from ..bench.features import load_dataset
    from .card import load_all

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weights", default="assets/emoji", help="a folder in the emoji preset's layout")
    ap.add_argument("--data", default=None, help="dataset folder (default: the benchmark's)")
    ap.add_argument("-n", type=int, default=N_PROMPTS)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    text, gpt, _, vq = load_all(Path(a.weights), drafter=False)
    print(json.dumps(measure_draws(gpt, text, vq, load_dataset(a.data), load_encoder(), n=a.n)))


if __name__ == "__main__":
    main()
