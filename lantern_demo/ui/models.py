"""The app's model registry: which presets this process offers, their status, the loaded pipelines.

``load_models`` reads the LANTERN_* environment variables (see ``lantern_demo.ui``)
and loads the presets at start-up; ``register`` makes the result the registry the
request handlers use (``current``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time
from typing import Any

import torch

from ..hub import PRESETS, get_preset
from ..pipeline import LanternPipeline, PresetUnavailable, default_device, load_pipeline, preset_status
from ..presets import ASSETS, EMBEDDED, TINY_RANDOM, controls

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class Models:
    """The presets offered by this process, their status and the loaded pipelines."""

    offered: list[str]
    status: dict[str, str | None]  # None = usable here, else why not
    pipelines: dict[str, LanternPipeline]
    default: str
    device: torch.device
    startup_notes: list[str] = dataclasses.field(default_factory=list)
    compiled: bool = False  # compile() was called: pipelines loaded later compile their one-token pass too

    def compile(self, env: dict[str, str] | None = None) -> None:
        """Compile the one-token decode pass of every loaded pipeline (``LanternPipeline.compile``:
        CPUs only) and of those loaded later. ``app.py`` calls this at launch, not at import, which
        stays light; ``LANTERN_COMPILE=0`` (in ``env``, default the process environment) turns it off."""
        env = dict(os.environ if env is None else env)
        if env.get("LANTERN_COMPILE", "1").strip() == "0":
            return
        self.compiled = True
        for pipe in self.pipelines.values():
            _compile(pipe)

    def get(self, name: str) -> LanternPipeline:
        """The loaded pipeline of ``name`` (loading it now if needed); PresetUnavailable if it can't run."""
        if name not in self.offered:
            raise PresetUnavailable(f"Unknown model {name!r}; choose one of: {', '.join(self.offered)}.")
        if name in self.pipelines:
            return self.pipelines[name]
        if self.status.get(name):
            raise PresetUnavailable(f"Model {name!r} is unavailable here: {self.status[name]}")
        try:
            pipe = load_pipeline(name, self.device)
        except PresetUnavailable as err:
            self.status[name] = str(err)
            raise
        except Exception as err:  # a broken checkpoint must not take the app down
            logger.exception("loading preset %s failed", name)
            self.status[name] = f"failed to load ({type(err).__name__}: {err})"
            raise PresetUnavailable(f"Model {name!r} failed to load: {type(err).__name__}: {err}") from err
        self.pipelines[name] = pipe
        if self.compiled:
            _compile(pipe)
        return pipe

    def choices(self) -> list[tuple[str, str]]:
        out = []
        for name in self.offered:
            title = get_preset(name).title
            reason = self.status.get(name)
            out.append((f"{title} — unavailable: {short(reason)}" if reason else title, name))
        return out

    def notice(self, name: str) -> str:
        """Markdown shown under the title for the selected model."""
        lines = list(self.startup_notes)
        if name == TINY_RANDOM:
            missing = (f" The embedded model needs its weights in `{ASSETS / 'emoji'}`."
                       if EMBEDDED in self.status and self.status[EMBEDDED] else "")
            lines.append("⚠️ **Untrained model.** `tiny-random` has random weights: its images are noise, but "
                         "every method, statistic and chart works." + missing)
        pipe = self.pipelines.get(name)
        if pipe is not None and pipe.drafter is None:
            lines.append(f"ℹ️ **No drafter here for `{name}`** ({short(pipe.drafter_missing)}): the drafter "
                         "methods are off; AR, SJD and SJD+LANTERN need none.")
        unavailable = [f"`{n}` ({short(r)})" for n, r in self.status.items() if r and n in self.offered]
        if unavailable:
            lines.append("Unavailable here: " + "; ".join(unavailable) + ".")
        return "\n\n".join(lines)

    def values(self, name: str) -> dict[str, Any]:
        """Control values for preset ``name``: ``presets.controls``, with the drafter-free methods
        where its drafter is unavailable."""
        values = controls(name)
        pipe = self.pipelines.get(name)
        if pipe is not None and pipe.drafter is None:
            values.update(method="sjd+lantern", baseline="sjd")
        return values


def _compile(pipe: LanternPipeline) -> None:
    seconds = pipe.compile()
    if seconds is not None:
        logger.info("compiled the one-token pass of %s in %.1f s", pipe.preset.name, seconds)


def short(reason: str | None, n: int = 90) -> str:
    """``reason`` cut to ``n`` characters for a one-line notice."""
    reason = (reason or "").strip()
    return reason if len(reason) <= n else reason[: n - 1] + "…"


def load_models(env: dict[str, str] | None = None) -> Models:
    """Load the offered presets now (start-up), following the LANTERN_* environment variables."""
    env = dict(os.environ if env is None else env)
    device = torch.device(env.get("LANTERN_DEVICE") or default_device())
    notes: list[str] = []
    wanted = [n.strip() for n in env.get("LANTERN_PRESETS", "").split(",") if n.strip()] or list(PRESETS)
    unknown = [n for n in wanted if n not in PRESETS]
    if unknown:
        notes.append(f"LANTERN_PRESETS names unknown presets {unknown}; known: {', '.join(PRESETS)}.")
    offered = [n for n in wanted if n in PRESETS]
    status = {n: r for n, r in preset_status(device).items() if n in offered}
    default = env.get("LANTERN_DEFAULT_PRESET", "").strip()
    if default and default not in offered:
        notes.append(f"LANTERN_DEFAULT_PRESET={default!r} is not offered; using the embedded default instead.")
        default = ""
    if not default:  # the embedded model if it can run, else the first offered preset that can, else tiny-random
        default = next((n for n in [EMBEDDED, *offered] if n in offered and status.get(n) is None), TINY_RANDOM)
    preload = env.get("LANTERN_PRELOAD", "all").strip().lower()
    models = Models(offered, status, {}, default, device, notes)
    if default not in models.offered:  # the fallback is always offered
        models.offered.append(default)
        models.status[default] = None
    for name in [default] + [n for n in offered if n != default]:
        if models.status.get(name) is None and (preload == "all" or name == default):
            t0 = time.perf_counter()
            try:
                models.get(name)
                logger.info("loaded preset %s on %s in %.1f s", name, device, time.perf_counter() - t0)
            except PresetUnavailable as err:
                logger.warning("preset %s unavailable: %s", name, err)
    if default not in models.pipelines:
        _fall_back(models)
    return models


def _fall_back(models: Models) -> None:
    """Make the embedded model (else tiny-random, which needs no weights) the default, with a note."""
    for fallback in (EMBEDDED, TINY_RANDOM):
        if fallback in models.offered and models.status.get(fallback) is None:
            with contextlib.suppress(PresetUnavailable):
                models.get(fallback)
                break
    else:  # tiny-random needs no weights: always possible
        fallback = TINY_RANDOM
        if TINY_RANDOM not in models.offered:
            models.offered.append(TINY_RANDOM)
        models.status[TINY_RANDOM] = None
        models.get(TINY_RANDOM)
    models.startup_notes.append(f"The model {models.default!r} could not be loaded "
                                f"({short(models.status.get(models.default))}); using {fallback!r}.")
    models.default = fallback


_MODELS: Models | None = None


def register(models: Models) -> None:
    """Make ``models`` the registry the request handlers use."""
    global _MODELS
    _MODELS = models


def current() -> Models:
    """The registry set by ``register`` (``build_demo`` does it)."""
    if _MODELS is None:
        raise RuntimeError("build_demo(load_models()) has not been called")
    return _MODELS
