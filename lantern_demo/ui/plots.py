"""Pictures, chart data, tables and log lines shown by the app (no Gradio here).

Everything takes the pipeline's own records (``steps.Step`` lists, the
``Generation`` grids, ``steps.summarize`` statistics) and only formats them.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable, Sequence

import numpy as np
import pandas as pd
from PIL import Image, ImageDraw, ImageFont
from torch import Tensor

from ..steps import Step

#: Colours of the token map. Depth d >= 1 uses DEPTH_COLOURS[min(d, len) - 1].
PENDING_COLOUR = (236, 236, 236)
TARGET_COLOUR = (112, 124, 146)
DEPTH_COLOURS = (
    (254, 217, 118),
    (254, 178, 76),
    (253, 141, 60),
    (240, 59, 32),
    (189, 0, 38),
    (128, 0, 38),
)
BORDER_COLOUR = (20, 20, 20)
#: Colour scale of the explain map, from top-1 probability 0 (the target unsure) to 1 (sure): viridis's anchors.
TOP1_ANCHORS = np.array([(68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37)], dtype=float)
#: The explain map's marker on tokens accepted only thanks to the relaxation.
RELAXED_MARK = (255, 32, 96)
LEGEND_HEIGHT = 22
#: Series colours of the charts (the charts carry a caption instead of a legend).
KIND_COLOURS = {"accepted drafts": "#fd8d3c", "sampled by target": "#707c92"}
AR_SERIES = "AR (1 token per pass)"
RUN_COLOURS = {"method": "#f97316", "baseline": "#3b82f6", AR_SERIES: "#9ca3af"}
#: The charts' x axes span at least this many target passes (one pass would give ticks 0.0, 0.1, ...).
MIN_AXIS_PASSES = 10
DISPLAY_SIZE = 256  # images smaller than this are enlarged (nearest neighbour) for display


def enlarge(image: Image.Image | None, size: int = DISPLAY_SIZE) -> Image.Image | None:
    """Enlarge a small image by an integer factor (nearest neighbour: every model pixel stays a crisp block)."""
    if image is None:
        return None
    factor = max(1, size // max(image.size))
    if factor == 1:
        return image
    return image.resize((image.width * factor, image.height * factor), Image.Resampling.NEAREST)


@lru_cache(maxsize=4)
def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=size)
    except (TypeError, OSError):  # Pillow without FreeType: fixed bitmap font
        return ImageFont.load_default()


@lru_cache(maxsize=2048)
def _label(text: str, size: int) -> Image.Image:
    """A text mask (mode L), rendered once per (text, size)."""
    font = _font(size)
    left, top, right, bottom = font.getbbox(text)
    mask = Image.new("L", (max(1, right - left), max(1, bottom - top)), 0)
    ImageDraw.Draw(mask).text((-left, -top), text, fill=255, font=font)
    return mask


@lru_cache(maxsize=8)
def _legend(width: int, height: int = LEGEND_HEIGHT) -> Image.Image:
    im = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(im)
    items = [("target", TARGET_COLOUR)] + [(f"d{d}" if d < len(DEPTH_COLOURS) else f"d{d}+", col)
                                           for d, col in enumerate(DEPTH_COLOURS, 1)]
    items.append(("pending", PENDING_COLOUR))
    x, y = 4, 5
    for name, col in items:
        draw.rectangle([x, y, x + 11, y + 11], fill=col, outline=(90, 90, 90))
        draw.text((x + 14, y + 6), name, fill=(0, 0, 0), font=_font(10), anchor="lm")
        x += 16 + int(draw.textlength(name, font=_font(10))) + 8
    return im


def token_map(source: Tensor, step_of: Tensor, grid: int, width: int = 384) -> Image.Image:
    """The token grid coloured by where each token came from, with verification steps outlined.

    source / step_of: the ``Generation`` grids ([grid*grid], -1 = not generated yet).
    Grey: sampled by the target (prefill, correction, bonus or AR token); warm colours:
    draft token accepted at depth 1, 2, ... (darker = deeper). A dark line separates
    neighbouring tokens committed by different target passes, and the first token of
    each pass carries the pass number when cells are large enough. A legend is drawn below.
    """
    palette = np.array([PENDING_COLOUR, TARGET_COLOUR, *DEPTH_COLOURS], dtype=np.uint8)
    src = source.reshape(grid, grid).numpy()
    im, cell = _grid_picture(palette[np.clip(src + 1, 0, len(palette) - 1)], width, _legend)
    draw = ImageDraw.Draw(im)
    stp = step_of.reshape(grid, grid).numpy()
    done = stp >= 0
    # a boundary wherever two generated neighbours come from different target passes
    left = np.zeros_like(done)
    left[:, 1:] = done[:, 1:] & (stp[:, 1:] != stp[:, :-1])
    top = np.zeros_like(done)
    top[1:, :] = done[1:, :] & (stp[1:, :] != stp[:-1, :])
    for r, c in zip(*np.nonzero(left)):
        draw.line([c * cell, r * cell, c * cell, r * cell + cell - 1], fill=BORDER_COLOUR, width=2)
    for r, c in zip(*np.nonzero(top)):
        draw.line([c * cell, r * cell, c * cell + cell - 1, r * cell], fill=BORDER_COLOUR, width=2)
    if cell >= 18:  # the pass number on the first token of each pass
        flat = stp.reshape(-1)
        first = np.ones_like(flat, dtype=bool)
        first[1:] = flat[1:] != flat[:-1]
        size = max(8, min(11, cell // 2))
        for pos in np.nonzero(first & (flat >= 0))[0]:
            r, c = divmod(int(pos), grid)
            mask = _label(str(int(flat[pos])), size)
            im.paste((0, 0, 0), (c * cell + (cell - mask.width) // 2 + 1, r * cell + (cell - mask.height) // 2),
                     mask)
    return im


def _grid_picture(cells: np.ndarray, width: int, legend: Callable[[int], Image.Image]) -> tuple[Image.Image, int]:
    """cells [grid, grid, 3] uint8 as squares of ``width // grid`` px (at least 4), ``legend(side)``
    below them. Returns (the picture, the cell size in px)."""
    grid = cells.shape[0]
    cell = max(4, width // grid)
    side = cell * grid
    im = Image.new("RGB", (side, side + LEGEND_HEIGHT), "white")
    im.paste(Image.fromarray(cells, "RGB").resize((side, side), Image.Resampling.NEAREST), (0, 0))
    im.paste(legend(side), (0, side))
    return im, cell


def top1_colours(top1: np.ndarray) -> np.ndarray:
    """Colours [..., 3] uint8 of top-1 probabilities [...] in [0, 1], piecewise linear through TOP1_ANCHORS."""
    x = np.clip(top1, 0.0, 1.0) * (len(TOP1_ANCHORS) - 1)
    i = np.minimum(x.astype(int), len(TOP1_ANCHORS) - 2)
    f = (x - i)[..., None]
    return np.round(TOP1_ANCHORS[i] * (1.0 - f) + TOP1_ANCHORS[i + 1] * f).astype(np.uint8)


def _mark(draw: ImageDraw.ImageDraw, cx: float, cy: float, radius: float) -> None:
    """The relaxation-only marker: a dot ringed in white, visible on every colour of the scale."""
    draw.ellipse([cx - radius, cy - radius, cx + radius, cy + radius], fill=RELAXED_MARK, outline=(255, 255, 255),
                 width=max(1, round(radius / 3)))


@lru_cache(maxsize=8)
def _explain_legend(width: int) -> Image.Image:
    """One line: the top-1 colour scale (0 .. 1) and the relaxation-only marker."""
    im = Image.new("RGB", (width, LEGEND_HEIGHT), "white")
    draw = ImageDraw.Draw(im)
    font, y = _font(10), LEGEND_HEIGHT // 2
    x = 4
    for text in ("target's top-1 p:", "0"):
        draw.text((x, y), text, fill=(0, 0, 0), font=font, anchor="lm")
        x += int(draw.textlength(text, font=font)) + 4
    ramp = top1_colours(np.linspace(0.0, 1.0, 60))[None].repeat(11, axis=0)
    im.paste(Image.fromarray(ramp, "RGB"), (x, y - 5))
    x += 64
    draw.text((x, y), "1", fill=(0, 0, 0), font=font, anchor="lm")
    x += 16
    _mark(draw, x + 5, y, 5)
    draw.text((x + 14, y), "accepted only thanks to the relaxation", fill=(0, 0, 0), font=font, anchor="lm")
    return im


def explain_map(top1: Tensor, relaxed_only: Tensor, grid: int, width: int = 384) -> Image.Image:
    """Why relaxation helps, per token, on the token map's grid.

    top1: [grid*grid] the target's top-1 probability where each token was decided (NaN =
    not generated yet; ``Generation.top1``): dark = the target was unsure (many tokens
    about as likely: where LANTERN's relaxation has room), yellow = sure.
    relaxed_only: [grid*grid] bool, tokens the exact rule would have rejected; each gets a
    dot. Exact methods have none. A one-line legend is drawn below.
    """
    t = top1.reshape(grid, grid).numpy()
    done = ~np.isnan(t)
    cells = np.where(done[..., None], top1_colours(np.nan_to_num(t)), np.array(PENDING_COLOUR, dtype=np.uint8))
    im, cell = _grid_picture(cells.astype(np.uint8), width, _explain_legend)
    draw = ImageDraw.Draw(im)
    for r, c in zip(*np.nonzero(relaxed_only.reshape(grid, grid).numpy())):
        _mark(draw, c * cell + cell / 2, r * cell + cell / 2, max(1.5, cell / 4))
    return im


def step_counts(steps: Sequence[Step]) -> tuple[list[int], list[int]]:
    """Per target pass: (accepted draft tokens, tokens sampled by the target)."""
    drafts = [sum(1 for s in st.source if s > 0) for st in steps]
    return drafts, [len(st.tokens) - d for st, d in zip(steps, drafts)]


def per_step_frame(steps: Sequence[Step]) -> pd.DataFrame:
    """Long table for a stacked bar chart: pass (1 = prefill), tokens, kind; passes not run yet up
    to ``MIN_AXIS_PASSES`` have 0 tokens (so that the axis starts with whole-number ticks)."""
    drafts, target = step_counts(steps)
    rows = []
    for i in range(1, max(len(steps), MIN_AXIS_PASSES) + 1):
        d, t = (drafts[i - 1], target[i - 1]) if i <= len(steps) else (0, 0)
        rows.append((i, d, "accepted drafts"))
        rows.append((i, t, "sampled by target"))
    return pd.DataFrame(rows, columns=["target pass", "tokens", "kind"])


def cumulative_frame(runs: dict[str, Sequence[Step]], num_tokens: int) -> pd.DataFrame:
    """Tokens committed after each target pass for every run ("method", "baseline"), plus the AR line
    y = x (at least ``MIN_AXIS_PASSES`` long, so that the axis starts with whole-number ticks)."""
    rows = []
    longest = 1
    for label, steps in runs.items():
        total = 0
        rows.append((0, 0, label))
        for i, st in enumerate(steps, 1):
            total += len(st.tokens)
            rows.append((i, total, label))
        longest = max(longest, len(steps))
    end = min(max(longest, MIN_AXIS_PASSES), num_tokens)
    rows += [(0, 0, AR_SERIES), (end, end, AR_SERIES)]
    return pd.DataFrame(rows, columns=["target passes", "tokens", "run"])


def step_line(label: str, step: Step, committed: int, num_tokens: int, relaxed: bool) -> str:
    """One log line for a target pass."""
    acc = sum(1 for s in step.source if s > 0)
    what = "prefill" if step.index == 0 else f"pass {step.index:>3}"
    line = f"{label:<10} {what}: +{len(step.tokens)} token{'s' if len(step.tokens) != 1 else ''}"
    if step.drafted:
        line += f" ({acc}/{step.drafted} drafts accepted)"
    line += f" -> {committed}/{num_tokens}"
    if relaxed and step.tvd:
        line += f", TVD {max(step.tvd):.3f}"
    return line


STATS_COLUMNS = ["run", "wall time (s)", "target passes", "tokens / pass", "speed-up", "mean TVD",
                 "relaxed-only %", "mean top-1", "tokens/s"]


def stats_row(run: str, stats: dict[str, float], speedup: float | None) -> list:
    """A row of the statistics table (``STATS_COLUMNS``) from ``steps.summarize`` statistics."""
    return [
        run,
        round(stats.get("wall_time", 0.0), 3),
        int(stats.get("nfe", 0)),
        round(stats.get("mean_accepted", 0.0), 3),
        "-" if speedup is None else f"{speedup:.2f}x",
        round(stats.get("mean_tvd", 0.0), 4),
        round(100.0 * stats.get("relaxed_only_share", 0.0), 1),
        round(stats.get("mean_top1", 0.0), 3),
        round(stats.get("tokens_per_s", 0.0), 1),
    ]


def stats_table(rows: list[list]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=STATS_COLUMNS)
