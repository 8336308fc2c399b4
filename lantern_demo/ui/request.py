"""One request of the /generate endpoint: its inputs by name, checked and turned into configs; cancelling.

``build_request`` takes the endpoint's values by input name (``INPUT_NAMES``) and
returns a ``Request``; every range check is the pipeline's (``LanternPipeline.check``,
``DecodeConfig.validate``), whose ValueError (or PresetUnavailable) becomes a
``gr.Error`` here. ``supersede`` / ``alive_check`` let a newer request of the same
browser session stop a running one at its next step.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import threading
from typing import Any, Callable, Mapping

import gradio as gr

from .. import presets
from ..methods import BASELINES, TITLES, DecodeConfig, boolean, whole_number
from ..pipeline import LanternPipeline, PresetUnavailable
from . import models as registry

logger = logging.getLogger(__name__)

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


def user_error(message: str, title: str = "Invalid settings") -> gr.Error:
    """The ``gr.Error`` for a user's mistake: its message reaches the page and the API caller;
    the server logs one line, no traceback. (Gradio shows a ``gr.Error``'s message to the
    client; any other exception becomes its generic "verbose error reporting" message.)"""
    logger.warning("refused a request: %s", message)
    return gr.Error(message, title=title, print_exception=False)


def build_request(values: Mapping[str, Any]) -> Request:
    """Check the inputs (by name, ``INPUT_NAMES``) and turn them into a ``Request``; raises
    ``gr.Error`` (``user_error``) with a message naming the parameter."""
    prompt, model = values["prompt"], values["model"]
    if not isinstance(prompt, str):
        raise user_error(f"prompt must be text, got {prompt!r}")
    if not prompt.strip():
        raise user_error("prompt: Please enter a prompt (it is empty).", title="Empty prompt")
    try:
        pipe = registry.current().get(model)
    except PresetUnavailable as err:
        raise user_error(f"model: {err}", title="Model unavailable") from None
    try:
        seed = _seed(values)
        config = presets.config(model, values)
        pipe.check(config)
        base = None
        if values["baseline"] not in BASELINE_CHOICES:
            raise ValueError(f"unknown baseline {values['baseline']!r}; choose one of {BASELINE_CHOICES}")
        if values["baseline"] != "none":
            exact = {n: v for n, v in values.items() if n not in RELAXATION_INPUTS}
            base = presets.config(model, exact, method=values["baseline"], draft="auto")
            pipe.check(base)
    except PresetUnavailable as err:  # a method that needs the missing drafter
        raise user_error(f"method: {err}", title="No drafter") from None
    except ValueError as err:
        raise user_error(f"Invalid settings: {err}.") from None
    return Request(pipe, model, prompt, seed, config, base)


def _seed(values: Mapping[str, Any]) -> int:
    """The request's seed: a fresh one if ``randomize_seed``; ValueError outside [0, MAX_SEED]."""
    if boolean("randomize_seed", values["randomize_seed"]):
        return secrets.randbelow(MAX_SEED + 1)
    seed = whole_number("seed", values["seed"] if values["seed"] is not None else 0)
    if not 0 <= seed <= MAX_SEED:
        raise ValueError(f"seed must be in [0, {MAX_SEED}], got {seed}")
    return seed


def describe_shape(config: DecodeConfig) -> str | None:
    """The draft shape that runs, e.g. "chain γ=8, stop below 0.5" or "dynamic tree depth 4, top-4,
    16 tokens" (None for AR)."""
    shape = config.shape
    if shape == "chain":
        return f"chain γ={config.gamma}" + (f", stop below {config.confidence:g}" if config.confidence else "")
    if shape == "window":
        return (f"window {config.window}, {config.init} drafts, "
                + ("coupled" if config.coupled else "independent") + " redrafts")
    if shape is not None:
        kind = "static" if shape == "static" else "dynamic"
        return f"{kind} tree depth {config.depth}, top-{config.branching}, {config.tree_tokens} tokens"
    return None


def describe(config: DecodeConfig) -> str:
    """A method's parameters for the log, e.g. "δ=0.25, k=16; dynamic tree depth 4, top-4, 16 tokens; T=1, cfg=3"."""
    parts = []
    if config.info.uses_lam:
        parts.append(f"λ={config.lam:g}, δ≤{config.delta:g}, k={config.k}")
    elif config.relaxed:
        parts.append(f"δ={config.delta:g}, k={config.k}")
    shape = describe_shape(config)
    if shape is not None:
        parts.append(shape)
    s = config.sampling
    parts.append(f"T={s.temperature:g}, cfg={s.cfg_scale:g}" + (f", top-k {s.top_k}" if s.top_k else "")
                 + (f", top-p {s.top_p:g}" if s.top_p < 1 else ""))
    return "; ".join(parts)


def image_label(title: str, config: DecodeConfig) -> str:
    """An image's label: the run's title and the shape it drafts, e.g. "LANTERN · chain γ=8"."""
    shape = {"chain": f"chain γ={config.gamma}", "tree": f"dynamic tree, {config.tree_tokens} tokens",
             "static": f"static tree, {config.tree_tokens} tokens", "window": f"window {config.window}"}
    return f"{title} · {shape[config.shape]}" if config.shape in shape else title


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
