"""Every preset's settings in one table: control defaults, neighbour-table size, text encoder.

The app's controls start at ``controls(name)``, the benchmark's defaults and the
training's measurements use the same values, and the pipeline sizes the neighbour
table and picks the text encoder from here. The control names are the public API's
parameter names (``ui.INPUT_NAMES``) and, for decoding, ``DecodeConfig`` /
``SamplingConfig`` field names (``DecodeConfig.from_values`` reads them).

Where the weights of a preset come from is ``hub.Preset``: the LlamaGen ones are
registered in ``hub.py``, the two local ones (below) here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .hub import Preset, register_preset
from .methods import DecodeConfig
from .sampling import SamplingConfig

ASSETS = Path(__file__).resolve().parent.parent / "assets"
EMBEDDED = "emoji"
TINY_RANDOM = "tiny-random"

#: Start-up values of every control (CPU-sensible); a preset's ``controls`` override them.
CONTROL_DEFAULTS: dict[str, Any] = {
    "method": "lantern",
    "baseline": "ar",
    "seed": 0,
    "randomize_seed": False,
    "delta": 0.25,
    "lam": 2.0,
    "k": 16,
    "draft": "auto",
    "gamma": 4,
    "confidence": 0.0,
    "depth": 4,
    "branching": 4,
    "tree_tokens": 16,
    "temperature": 1.0,
    "top_k": 0,
    "top_p": 1.0,
    "cfg_scale": 3.0,
    "window": 16,
    "init": "vertical",
    "coupled": True,
}


@dataclass(frozen=True)
class PresetSettings:
    """What a preset needs beyond its weights.

    max_k: neighbour-table columns (the largest k offered). text_encoder: "saved" (our
    word/class encoder in ``text_encoder/``), "t5" (flan-t5 from the Hub) or "random"
    (built with random weights). controls: overrides of ``CONTROL_DEFAULTS``. drafts: the
    draft shape a method runs on this preset when the draft control says "auto", where it is
    not ``methods.DEFAULT_DRAFT``'s (the benchmark's fastest shape at acceptable quality).
    """

    max_k: int
    text_encoder: str
    controls: dict[str, Any] = field(default_factory=dict)
    drafts: dict[str, str] = field(default_factory=dict)


#: LlamaGen: the LANTERN release's generator settings and EAGLE-2 tree, delta/k of the
#: paper's high-speed example.
LLAMAGEN = PresetSettings(1000, "t5", {"delta": 0.4, "k": 1000, "depth": 5, "branching": 10, "tree_tokens": 59,
                                       "top_k": 2000, "cfg_scale": 3.0})
#: The embedded model: sampling, method and drafting chosen by measurement on 2 CPU cores
#: (assets/emoji/README.md, docs/benchmarks.md; also what the model card measures). The method
#: is SJD+LANTERN, the benchmark's fastest setting of acceptable quality: 1.30x [1.18, 1.44] vs
#: AR and 1.19x [1.03, 1.37] vs coupled SJD. Drafter LANTERN drafts SD's chain here: 0.78x vs AR
#: on it against 0.47x on the 16-token tree ("lantern chain8 c=0.5 d=0.4 k=128" and "lantern
#: d=0.4 k=128" in docs/bench/results.json); below AR because AR's one-token passes run
#: compiled and verification passes do not.
EMOJI = PresetSettings(128, "saved", {"method": "sjd+lantern", "cfg_scale": 2.0, "temperature": 1.0, "top_k": 64,
                                      "gamma": 8, "confidence": 0.5, "delta": 0.4, "k": 128, "window": 16,
                                      "init": "vertical", "coupled": True},
                       drafts={"lantern": "chain"})

SETTINGS: dict[str, PresetSettings] = {
    EMBEDDED: EMOJI,
    TINY_RANDOM: PresetSettings(32, "random"),
    "llamagen-t2i": LLAMAGEN,
    "llamagen-t2i-512": LLAMAGEN,
}


def settings(preset: Preset) -> PresetSettings:
    """The settings of ``preset``; a preset registered elsewhere gets the embedded model's
    when its weights are local, else LlamaGen's."""
    return SETTINGS.get(preset.name) or (EMOJI if preset.local_dir is not None else LLAMAGEN)


def controls(name: str) -> dict[str, Any]:
    """Start-up values of every control for preset ``name`` (by input name)."""
    overrides = SETTINGS[name].controls if name in SETTINGS else {}
    return {**CONTROL_DEFAULTS, **overrides}


def config(name: str, values: dict[str, Any] | None = None, **overrides: Any) -> DecodeConfig:
    """The decoding config of control ``values`` (default: ``controls(name)``) with ``overrides``
    on preset ``name``: draft "auto" resolves to the preset's shapes (``PresetSettings.drafts``)."""
    drafts = SETTINGS[name].drafts if name in SETTINGS else {}
    return DecodeConfig.from_values(controls(name) if values is None else values, drafts, **overrides)


def sampling(name: str) -> SamplingConfig:
    """The sampling settings of preset ``name``."""
    return config(name).sampling


register_preset(Preset(
    name=EMBEDDED,
    title="Emoji (embedded tiny LlamaGen)",
    resolution=64,
    grid=16,
    local_dir=str(ASSETS / "emoji"),
    notes="Runs on CPU; trained by lantern_demo.train.",
), replace=True)
register_preset(Preset(
    name=TINY_RANDOM,
    title="Tiny random (untrained: noise)",
    resolution=64,
    grid=16,
    notes="Random weights at the embedded model's shape; for tests and as a fallback.",
), replace=True)
