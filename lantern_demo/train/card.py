"""Final stage of the retraining: sample grid, the model's measurements, model card.

Everything here goes through the app's own code paths: ``ClassTextEncoder`` ->
``engine.generate`` (AR, exact speculative decoding, LANTERN, SJD) on the saved
``GPT``/``Drafter`` -> ``VQDecoder``. What is measured, and why:

- token ambiguity: the mean top-1 probability of the target's guided, filtered
  distribution along AR samples, over all tokens and over the tokens that are not the
  plain background code, with histograms (LANTERN pays only where this is low);
- speculative decoding on the same prompts and seeds: tokens per target pass of each
  exact setting and its relaxed counterpart (``SPEC_SETTINGS``);
- recognition of known emojis against the held-out style's ceiling (``recognition.measure_known``);
- diversity: mean pairwise distance of evaluation features between samples of one prompt,
  against that between the real renditions of the same emoji.
"""

from __future__ import annotations

import time
from itertools import combinations
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont

from ..emoji import data as emoji_data
from ..emoji import styles as emoji_styles
from ..emoji.features import load as load_encoder
from ..emoji.records import load_metrics, update_metrics
from ..engine import DecodeConfig, generate
from ..neighbors import build_neighbor_table
from ..presets import EMBEDDED, controls
from ..sampling import SamplingConfig, probs_from_logits
from .recognition import measure_known
from .weights import caption_of, load_all

#: The model card's "Quality notes" come from this file in the output folder: what a person
#: sees in samples.png, written after looking at it (a retrain keeps the file; update it).
NOTES_FILE = "quality_notes.md"

#: Sampling used for every measurement: the app's emoji defaults.
EMOJI_SETTINGS = controls(EMBEDDED)
GRID_SAMPLING = {k: EMOJI_SETTINGS[k] for k in ("cfg_scale", "temperature", "top_k")}
GAMMA = int(EMOJI_SETTINGS["gamma"])
CONFIDENCE = float(EMOJI_SETTINGS["confidence"])
DELTA, K = float(EMOJI_SETTINGS["delta"]), int(EMOJI_SETTINGS["k"])
_CHAIN = dict(draft="chain", gamma=GAMMA, confidence=CONFIDENCE)
_SJD = dict(window=int(EMOJI_SETTINGS["window"]), init=str(EMOJI_SETTINGS["init"]), coupled=bool(EMOJI_SETTINGS["coupled"]))
#: (label, DecodeConfig fields) measured for the card; each relaxed row follows its exact counterpart.
SPEC_SETTINGS = (
    ("sd chain", dict(method="sd", **_CHAIN)),
    ("lantern chain", dict(method="lantern", delta=DELTA, k=K, **_CHAIN)),
    ("sjd coupled", dict(method="sjd", **_SJD)),
    ("sjd+lantern coupled", dict(method="sjd+lantern", delta=DELTA, k=K, **_SJD)),
    ("lantern chain d0.1", dict(method="lantern", delta=0.1, k=K, **_CHAIN)),
    ("lantern chain d0.25", dict(method="lantern", delta=0.25, k=K, **_CHAIN)),
)
#: The app's default method for this model (``presets.py``) at its default delta: a ``SPEC_SETTINGS`` label.
DEFAULT_SETTING = next(label for label, fields in SPEC_SETTINGS
                       if fields["method"] == EMOJI_SETTINGS["method"] and fields.get("delta", DELTA) == DELTA)


@torch.no_grad()
def top1_probabilities(gpt, cond, tokens: torch.Tensor, sampling) -> np.ndarray:
    """float [n]: top-1 probability of the target's (guided, filtered) distribution at each position of ``tokens``."""
    n = tokens.numel()
    pre = gpt.prefill(cond, sampling.rows, n)
    logits, _ = gpt.forward(tokens[:-1], torch.arange(n - 1))
    all_logits = torch.cat([pre.logits[:, None], logits], dim=1)  # [R, n, V]
    return probs_from_logits(all_logits, sampling).max(-1).values.flatten().numpy()


def sample_grid(path: Path, rows: list[tuple[str, np.ndarray, list[np.ndarray]]], scale: int = 2) -> None:
    """rows: (prompt, real uint8 HxWx3, samples). One row per prompt: the real emoji, a gap, the samples."""
    h = rows[0][1].shape[0] * scale
    label = 150
    n = max(len(s) for _, _, s in rows)
    im = Image.new("RGB", (label + (n + 1) * (h + 4) + 8, len(rows) * (h + 4)), "white")
    d = ImageDraw.Draw(im)
    font = ImageFont.load_default()
    for r, (prompt, real, samples) in enumerate(rows):
        y = r * (h + 4)
        d.text((4, y + h // 2 - 6), prompt[:24], fill=(0, 0, 0), font=font)
        for c, img in enumerate([real] + samples):
            x = label + c * (h + 4) + (8 if c else 0)
            im.paste(Image.fromarray(img).resize((h, h), Image.Resampling.NEAREST), (x, y + 2))
    im.save(path, optimize=True)


def _pairwise(feats: np.ndarray) -> float:
    """Mean pairwise L2 distance of L2-normalised features [n, d] (n >= 2)."""
    f = feats / np.linalg.norm(feats, axis=1, keepdims=True)
    return float(np.mean([np.linalg.norm(f[a] - f[b]) for a, b in combinations(range(len(f)), 2)]))


def stage_card(out: Path, ds: emoji_data.StyledDataset, seed: int, s, log) -> dict:
    """Measure the model in ``out`` on ``ds`` (``emoji_data.StyledDataset``); writes metrics.json's "card"
    entry, ``samples.png`` and the model card."""
    t0 = time.time()
    text, gpt, drafter, vq = load_all(out)
    encoder = load_encoder(out / "eval")
    sampling = SamplingConfig(**GRID_SAMPLING)
    n_tok = gpt.cfg.grid**2
    background = load_metrics(out).get("tokens", {}).get("background_code")
    k = min(K, vq.codebook_size - 1)  # a smoke run's small codebook has fewer neighbours than the app's k
    neighbors = build_neighbor_table(vq.raw_codebook(), k)
    configs = {label: DecodeConfig(sampling=sampling, **{**kw, "k": k}) for label, kw in SPEC_SETTINGS}

    # sample grid and diversity: every example emoji, grid_seeds samples of the app's default setting
    grid, within, real_within = [], [], []
    for e in emoji_data.REQUIRED:
        c = ds.emojis.index(e)
        prompt = ds.names[c][0]
        imgs = [vq.decode(generate(gpt, drafter, caption_of(text, prompt), configs[DEFAULT_SETTING], n_tok, seed=seed + j,
                                   neighbors=neighbors).tokens[None])[0].numpy() for j in range(s.grid_seeds)]
        reals = ds.images[ds.item == c, 0]
        grid.append((prompt, reals[0], imgs))
        within.append(_pairwise(encoder.embed_images(np.stack(imgs))))
        real_within.append(_pairwise(encoder.embed_images(reals)))
    sample_grid(out / "samples.png", grid)

    # token ambiguity along AR samples, and speculative decoding, on spec_prompts known emojis
    rng = np.random.default_rng(seed)
    prompts = [ds.names[c][0] for c in rng.choice(len(ds.emojis), size=min(s.spec_prompts, len(ds.emojis)), replace=False)]
    top_all, top_fg = [], []
    for j, p in enumerate(prompts):
        cond = caption_of(text, p)
        res = generate(gpt, None, cond, DecodeConfig(method="ar", sampling=sampling), n_tok, seed=seed + j)
        t1 = top1_probabilities(gpt, cond, res.tokens, sampling)
        top_all.append(t1)
        top_fg.append(t1[res.tokens.numpy() != background])
    top_all, top_fg = np.concatenate(top_all), np.concatenate(top_fg)
    spec = []
    for label, _ in SPEC_SETTINGS[: s.spec_settings]:
        stats = [generate(gpt, drafter, caption_of(text, p), configs[label], n_tok, seed=seed + j, neighbors=neighbors,
                          row_length=gpt.cfg.grid).stats for j, p in enumerate(prompts)]
        row = {"setting": label, **{k: float(np.mean([st[k] for st in stats]))
                                    for k in ("mean_accepted", "nfe", "mean_tvd", "wall_time")}}
        spec.append(row)
        log(f"card: {row}")
    recognition = measure_known(gpt, text, vq, ds, encoder, s.eval_style, n=s.recognition_n,
                                relaxed=(configs[DEFAULT_SETTING], drafter, neighbors), log=log)
    bins = np.linspace(0, 1, 11)
    m = update_metrics(out, "card", {
        "sampling": GRID_SAMPLING,
        "examples": [p for p, _, _ in grid],
        "mean_top1_probability": float(top_all.mean()),
        "mean_top1_probability_foreground": float(top_fg.mean()) if len(top_fg) else None,
        "foreground_share": len(top_fg) / len(top_all),
        "top1_histogram": {"bins": bins.tolist(), "all": np.histogram(top_all, bins)[0].tolist(),
                           "foreground": np.histogram(top_fg, bins)[0].tolist()},
        "speculative": spec,
        "spec_prompts": prompts,
        "recognition": recognition,
        "diversity": {"samples": float(np.mean(within)), "real_renditions": float(np.mean(real_within))},
        "seconds": round(time.time() - t0, 1),
    })
    write_model_card(out, m)
    return m


def _stage_table(tm: dict, machines: dict) -> str:
    rows = ["| stage | seconds | CPU | threads | precision |", "|---|---|---|---|---|"]
    for name, v in tm.items():
        mc = machines.get(name, {})
        rows.append(f"| {name} | {v} | {mc.get('cpu', 'not recorded')} {mc.get('cpu_capability', '')} | "
                    f"{mc.get('threads', '')} | {mc.get('precision', '')} |")
    total = sum(v for v in tm.values() if isinstance(v, (int, float)))
    rows.append(f"| total | {total:.0f} ({total / 60:.0f} min) | | | |")
    return "\n".join(rows)


def _size(out: Path) -> float:
    return sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) / 1e6


def _num(x, fmt: str = ".3f") -> str:
    return format(x, fmt) if isinstance(x, (int, float)) else "n/a"


def _intro_and_data(d: dict) -> str:
    """The card's title, licence and data sections; ``d``: metrics.json's "data"."""
    dropped = ", ".join(f"{k} {v}" for k, v in (d.get("dropped") or {}).items())
    return f"""# Embedded default model: a tiny class-conditional LlamaGen drawing emojis in six styles

An image model with exactly the LlamaGen code paths of this demo (`lantern_demo.gpt.GPT`,
`lantern_demo.drafter.Drafter`, a `diffusers.VQModel` tokenizer), at a size that runs on CPU,
trained from scratch by `lantern_demo.train`. A prompt names an emoji (its class: LlamaGen's
class-to-image prefix); the model draws it in any of the styles it was trained on, so one prompt
samples a distribution of pictures, and its token predictions spread over look-alike codes the way
a real text-to-image AR model's do.

## Licence and attribution

The weights are shared under CC BY-SA 4.0. Training images (see `ATTRIBUTION.md`):

{emoji_styles.attribution().split(chr(10), 2)[2]}
## Data

- {d.get('emojis', 'n/a')} emojis, {d.get('renditions', 'n/a')} renditions (per style: {d.get('per_style', 'n/a')}),
  each with {d.get('variants', 'n/a')} variants (the canonical one, then scale {emoji_data.AUGMENT['scale']} and shift
  up to {emoji_data.AUGMENT['shift']} px); {d.get('heldout_renditions', 'n/a')} renditions held out of the GPT's training.
- Kept: fully-qualified emojis of the groups {', '.join(emoji_data.GROUPS)} drawn in at least
  {emoji_data.MIN_STYLES} styles; dropped: {dropped}. Reasons: {'; '.join(f'{k}: {v}' for k, v in emoji_data.CURATION.items() if k != 'budget')};
  group: not an everyday group (flags, components); styles: fewer than {emoji_data.MIN_STYLES} styles draw it;
  budget: beyond the {emoji_data.STYLED_BUDGET} with the shortest names.
- Renditions are cropped to their visible pixels and padded to a 4 px margin on white
  (`lantern_demo.emoji.styles.normalise`).

"""


def _models_and_training(out: Path, m: dict) -> str:
    """The card's models and training sections; ``m``: metrics.json's content."""
    vq, gpt, dr = (m.get(k, {}) for k in ("vq", "gpt", "drafter"))
    cfg = gpt.get("config", {})
    chunks = "\n".join(f"| {i + 1} | {c['start_step']}-{c['end_step']} | {c['seconds']:.0f} | "
                       f"{c['machine'].get('cpu', '')} {c['machine'].get('cpu_capability', '')}, "
                       f"{c['machine'].get('threads', '')} thread(s) | {c['ended']} |"
                       for i, c in enumerate(gpt.get("chunks", [])))
    return f"""## Models

| part | what |
|---|---|
| `vq/` | `diffusers.VQModel`, 64 px -> 16x16 tokens, {vq.get('codebook_size', 'n/a')} L2-normalised codes of 8 dims (LlamaGen's design) |
| `text_encoder/` | `ClassTextEncoder`: {gpt.get('classes', 'n/a')} classes matched by the words of their names and aliases, or by the emoji character |
| `target/` | LlamaGen GPT: dim {cfg.get('dim')}, {cfg.get('n_layer')} layers, {cfg.get('n_head')} heads, SwiGLU {cfg.get('ffn_hidden')}, vocab {cfg.get('vocab_size')}; {gpt.get('params_gpt', 'n/a')} params |
| `drafter/` | EAGLE one-layer drafter, trained on data and {dr.get('self_samples', 0)} of the target's own samples; {dr.get('params_trained', 'n/a')} trained params |

All files: {_size(out):.1f} MB.

## Training

`python -m lantern_demo.train --out assets/emoji` (resumable GPT chunks: `--time-limit MIN`, `--resume`).
What was measured to choose the recipe: `docs/training.md` in the demo's repository.

{_stage_table(m.get('timings', {}), m.get('machines', {}))}

GPT chunks:

| chunk | steps | seconds | machine | ended |
|---|---|---|---|---|
{chunks}

"""


def _measurements(m: dict) -> str:
    """The card's measurements section; ``m``: metrics.json's content."""
    vq, tok, gpt, dr, card = (m.get(k, {}) for k in ("vq", "tokens", "gpt", "drafter", "card"))
    held = tok.get("heldout", {})
    spec = {r["setting"]: r for r in card.get("speculative", [])}
    spec_rows = "\n".join(f"| {r['setting']} | {r['mean_accepted']:.2f} | {r['nfe']:.0f} | {r['mean_tvd']:.3f} | "
                          f"{r['wall_time']:.2f} |" for r in spec.values())

    def ratio(a: str, b: str) -> str:
        return _num(spec[a]["mean_accepted"] / spec[b]["mean_accepted"], ".2f") if a in spec and b in spec else "n/a"

    rec = card.get("recognition", {})
    hist = card.get("top1_histogram", {})
    hist_rows = "\n".join(f"| {lo:.1f}-{lo + 0.1:.1f} | {a} | {b} |" for lo, a, b in
                          zip(hist.get("bins", [])[:-1], hist.get("all", []), hist.get("foreground", [])))
    div = card.get("diversity", {})
    return f"""## Measurements

| metric | value |
|---|---|
| VQ held-out PSNR (background rule) | {_num(held.get('psnr_mean'), '.2f')} dB |
| VQ codes used on held-out renditions / perplexity | {held.get('codes_used', 'n/a')} / {_num(held.get('perplexity'), '.0f')} |
| Distance to the k-th nearest code (10/50/90%) | {vq.get('neighbour_distance', 'n/a')} |
| GPT held-out / training NLL | {_num(gpt.get('heldout_nll'))} / {_num(gpt.get('train_nll'))} nats per token |
| Drafter top-1 agreement, held-out | {_num(dr.get('heldout_top1_agreement'))} |
| Mean top-1 probability while sampling, all tokens / not background | {_num(card.get('mean_top1_probability'))} / {_num(card.get('mean_top1_probability_foreground'))} |
| LANTERN / SD tokens per pass (chain, same prompts and seeds) | {ratio('lantern chain', 'sd chain')} |
| SJD+LANTERN / coupled SJD tokens per pass | {ratio('sjd+lantern coupled', 'sjd coupled')} |
| Recognised, {rec.get('n', 'n/a')} known emojis (AR sampled / greedy / {rec.get('relaxed_setting', 'relaxed')}; ceiling: real {rec.get('held_style', '')} renditions; chance {_num(rec.get('chance'), '.0f')}) | {rec.get('sampled', 'n/a')} / {rec.get('greedy', 'n/a')} / {rec.get('relaxed', 'n/a')} (ceiling {rec.get('real_images', 'n/a')}) |
| Diversity: mean pairwise evaluation-feature distance, samples of one prompt / real renditions of one emoji | {_num(div.get('samples'))} / {_num(div.get('real_renditions'))} |

Top-1 probability histogram (tokens of AR samples):

| top-1 | all | not background |
|---|---|---|
{hist_rows}

Speculative decoding on {len(card.get('spec_prompts', []))} known emojis (sampling {GRID_SAMPLING}):

| setting | tokens / target pass | target passes | mean TVD | wall s |
|---|---|---|---|---|
{spec_rows}

"""


def write_model_card(out: Path, m: dict) -> None:
    """``out/README.md`` from metrics.json's content ``m`` and ``out/quality_notes.md``."""
    notes_file = out / NOTES_FILE
    notes = notes_file.read_text().strip() if notes_file.exists() else f"No notes for this run (write `{NOTES_FILE}`)."
    tail = f"""## Quality notes

{notes}

## Samples

`samples.png`: each example prompt with a real rendition (left) and samples of the app's default
setting ({DEFAULT_SETTING}), one per seed.
"""
    (out / "README.md").write_text(_intro_and_data(m.get("data", {})) + _models_and_training(out, m) + _measurements(m)
                                   + tail)
