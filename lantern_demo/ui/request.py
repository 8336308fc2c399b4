"""One request of the /generate endpoint: its inputs by name, checked and turned into configs; cancelling.

``build_request`` takes the endpoint's values by input name (``INPUT_NAMES``) and
returns a ``Request``; every range check is the pipeline's (``LanternPipeline.check``,
``DecodeConfig.validate``), whose ValueError (or PresetUnavailable) becomes a
``gr.Error`` here. ``supersede`` / ``alive_check`` let a newer request of the same
browser session stop a running one at its next step.
"""

from __future__ import annotations

import dataclasses
import secrets
import threading
from typing import Any, Callable, Mapping

import gradio as gr

from ..methods import BASELINES, TITLES, DecodeConfig, whole_number
from ..pipeline import LanternPipeline, PresetUnavailable
from . import models as registry

#: Inputs of the /generate endpoint, in order (names are the API's parameter names, and those of
#: ``presets.CONTROL_DEFAULTS``).
INPUT_NAMES = ("prompt", "model", "method", "baseline", "seed", "randomize_seed", "delta", "lam", "k", "draft",
               "gamma", "confidence", "depth", "branching", "tree_tokens", "temperature", "top_k", "top_p", "cfg_scale",
               "window", "init", "coupled")
#: Outputs of the /generate endpoint, in order (the session cache, a gr.State, is not part of the API).
OUTPUT_NAMES = ("image", "baseline_image", "token_map", "explain", "per_step", "cumulative", "log", "compare",
                "table", "seed", "notice", "stats")
#: The relaxation's inputs: a baseline (exact) leaves them at ``DecodeConfig``'s defaults.
RELAXATION_INPUTS = ("delta", "k", "lam")
MAX_SEED = 2**31 - 1
#: What the baseline may be: an exact method, or none.
BASELINE_CHOICES = (*BASELINES, "none")


@dataclasses.dataclass
class Request:
    """A checked /generate request: the pipeline, the method's config and the baseline's (None = no baseline)."""

    pipe: LanternPipeline
    model: str
    prompt: str
    seed: int
    config: DecodeConfig
    baseline: DecodeConfig | None


def build_request(values: Mapping[str, Any]) -> Request:
    """Check the inputs (by name, ``INPUT_NAMES``) and turn them into a ``Request``; raises
    ``gr.Error`` with a clear message."""
    prompt, model = values["prompt"], values["model"]
    if not isinstance(prompt, str) or not prompt.strip():
        raise gr.Error("Please enter a prompt (it is empty).", title="Empty prompt")
    try:
        pipe = registry.current().get(model)
    except PresetUnavailable as err:
        raise gr.Error(str(err), title="Model unavailable") from None
    try:
        seed = _seed(values)
        config = DecodeConfig.from_values(values)
        pipe.check(config)
        base = None
        if values["baseline"] not in BASELINE_CHOICES:
            raise ValueError(f"unknown baseline {values['baseline']!r}; choose one of {BASELINE_CHOICES}")
        if values["baseline"] != "none":
            exact = {n: v for n, v in values.items() if n not in RELAXATION_INPUTS}
            base = DecodeConfig.from_values(exact, method=values["baseline"], draft="auto")
            pipe.check(base)
    except PresetUnavailable as err:  # a method that needs the missing drafter
        raise gr.Error(str(err), title="No drafter") from None
    except ValueError as err:
        raise gr.Error(f"Invalid settings: {err}.", title="Invalid settings") from None
    return Request(pipe, model, prompt, seed, config, base)


def _seed(values: Mapping[str, Any]) -> int:
    """The request's seed: a fresh one if ``randomize_seed``; ValueError outside [0, MAX_SEED]."""
    if values["randomize_seed"]:
        return secrets.randbelow(MAX_SEED + 1)
    seed = whole_number("seed", values["seed"] if values["seed"] is not None else 0)
    if not 0 <= seed <= MAX_SEED:
        raise ValueError(f"seed must be in [0, {MAX_SEED}], got {seed}")
    return seed


def describe(config: DecodeConfig) -> str:
    """A method's parameters for the log, e.g. "δ=0.25, k=16; dynamic tree depth 4, top-4, 16 tokens; T=1, cfg=3"."""
    parts = []
    if config.info.uses_lam:
        parts.append(f"λ={config.lam:g}, δ≤{config.delta:g}, k={config.k}")
    elif config.relaxed:
        parts.append(f"δ={config.delta:g}, k={config.k}")
    shape = config.shape
    if shape == "chain":
        parts.append(f"chain γ={config.gamma}" + (f", stop below {config.confidence:g}" if config.confidence else ""))
    elif shape == "window":
        parts.append(f"window {config.window}, {config.init} drafts, "
                     + ("coupled" if config.coupled else "independent") + " redrafts")
    elif shape is not None:
        kind = "static" if shape == "static" else "dynamic"
        parts.append(f"{kind} tree depth {config.depth}, top-{config.branching}, {config.tree_tokens} tokens")
    s = config.sampling
    parts.append(f"T={s.temperature:g}, cfg={s.cfg_scale:g}" + (f", top-k {s.top_k}" if s.top_k else "")
                 + (f", top-p {s.top_p:g}" if s.top_p < 1 else ""))
    return "; ".join(parts)


def titles(req: Request) -> tuple[str, str | None]:
    """Labels of the method's run and the baseline's (None without a baseline)."""
    main = TITLES[req.config.method]
    return main, (f"{TITLES[req.baseline.method]} baseline" if req.baseline else None)


# Per browser session, a counter bumped when the user starts tuning a slider again (or
# presses Stop): a run that sees its session's counter move stops at its next step.
# (Gradio's own cancels are aimed at a function, not at one call: a late cancel could
# hit the re-run that the same drag starts. On ZeroGPU the run lives in another
# process and does not see the bump; Stop still cancels it through Gradio.)
_EPOCHS: dict[str, int] = {}
_EPOCHS_LOCK = threading.Lock()


def supersede(session: str | None) -> None:
    """Make the running generation of ``session`` (if any) stop at its next step."""
    if session:
        with _EPOCHS_LOCK:
            _EPOCHS[session] = _EPOCHS.get(session, 0) + 1


def alive_check(session: str | None) -> Callable[[], bool]:
    """A callable telling whether no newer run was asked for in ``session`` since now."""
    if not session:
        return lambda: True
    epoch = _EPOCHS.get(session, 0)
    return lambda: _EPOCHS.get(session, 0) == epoch
