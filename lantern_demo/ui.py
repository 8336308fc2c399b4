"""The Gradio app: streaming generation, per-step accepted tokens, live relaxation sliders, baseline.

``load_models()`` loads the presets at start-up (ZeroGPU style: at import, before
any request), ``build_demo(models)`` builds the page, ``launch_kwargs()`` gives what
Gradio 6 wants at ``launch()`` (theme, CSS); ``create_app()`` does the first two and
queues the app, and ``app.py`` calls it.

Environment (read by ``load_models``):
- ``LANTERN_PRESETS``: comma-separated presets offered in the model selector
  (default: every registered preset, unavailable ones listed with the reason);
- ``LANTERN_DEFAULT_PRESET``: the preset selected at start (default: the embedded
  ``emoji`` model when its weights exist, else the first offered preset that can
  run, else ``tiny-random``);
- ``LANTERN_PRELOAD``: ``all`` (default: load every available offered preset at
  start-up) or ``default`` (only the default; others on first use);
- ``LANTERN_DEVICE``: ``cpu`` / ``cuda`` (default: CUDA when available);
- ``LANTERN_QUEUE_SIZE`` (default 16), ``LANTERN_GPU_DURATION`` (seconds asked of
  ZeroGPU per generation, default 90).

The public API endpoint is ``/generate`` (see README "Using the API"): its
inputs are the controls in ``INPUT_NAMES`` order and it streams the outputs in
``OUTPUT_NAMES`` order; the last output, ``stats``, is a JSON summary of both runs.
"""

from __future__ import annotations

from .spaces_compat import GPU  # noqa: I001  (before torch, for ZeroGPU)

import collections
import contextlib
import dataclasses
import logging
import os
import secrets
import threading
import time
from typing import Any, Callable, Iterator

import gradio as gr
import torch

from . import ui_plots as plots
from .engine import DRAFTER_FREE, METHODS, RELAXED, DecodeConfig
from .hub import PRESETS, get_preset
from .pipeline import (
    ASSETS,
    EMBEDDED,
    EMOJI_SETTINGS,
    TINY_RANDOM,
    LanternPipeline,
    PresetUnavailable,
    default_device,
    load_pipeline,
    preset_status,
)
from .sampling import SamplingConfig

logger = logging.getLogger(__name__)

# ----------------------------------------------------------------------------- defaults

#: Start-up values of every control (CPU-sensible, for the embedded model). One
#: place to change them; ``PRESET_DEFAULTS`` overrides per preset.
DEFAULTS: dict[str, Any] = {
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

#: Per preset overrides of ``DEFAULTS`` (applied when the preset is selected).
#: LlamaGen: the LANTERN release's generator settings and EAGLE-2 tree, delta/k of
#: the paper's high-speed example. Emoji: ``pipeline.EMOJI_SETTINGS`` (sampling and
#: chain drafting measured best on 2 CPU cores).
PRESET_DEFAULTS: dict[str, dict[str, Any]] = {
    "emoji": dict(EMOJI_SETTINGS),
    "llamagen-t2i": {"delta": 0.4, "k": 1000, "depth": 5, "branching": 10, "tree_tokens": 59,
                     "top_k": 2000, "cfg_scale": 3.0},
    "llamagen-t2i-512": {"delta": 0.4, "k": 1000, "depth": 5, "branching": 10, "tree_tokens": 59,
                         "top_k": 2000, "cfg_scale": 3.0},
}

#: What "auto" means for the drafting shape of each drafter method.
AUTO_DRAFT = {"sd": "chain", "eagle": "tree", "lantern": "tree", "lantern++": "static"}

METHOD_TITLES = {"ar": "AR", "sd": "SD", "eagle": "EAGLE-2", "lantern": "LANTERN", "lantern++": "LANTERN++",
                 "sjd": "SJD", "sjd+lantern": "SJD+LANTERN"}
METHOD_CHOICES = [
    ("AR (plain, 1 token per pass)", "ar"),
    ("SD (exact speculative, chain)", "sd"),
    ("EAGLE-2 (exact, dynamic tree)", "eagle"),
    ("LANTERN (relaxed, δ and k)", "lantern"),
    ("LANTERN++ (relaxed, λ and k, static tree)", "lantern++"),
    ("SJD (exact, no drafter: Jacobi window)", "sjd"),
    ("SJD+LANTERN (relaxed, no drafter, δ and k)", "sjd+lantern"),
]
BASELINES = ("ar", "sd", "eagle", "sjd", "none")
BASELINE_CHOICES = [("AR", "ar"), ("SD", "sd"), ("EAGLE-2", "eagle"), ("SJD", "sjd"), ("none", "none")]
DRAFT_CHOICES = ["auto", "chain", "tree", "static"]
INIT_CHOICES = ["vertical", "left", "random"]
SJD_METHODS = ("sjd", "sjd+lantern")

EXAMPLES = [
    "red heart",
    "a cat face emoji",
    "smiling face with sunglasses",
    "an emoji of a rocket",
    "deciduous tree",
    "grinning face with big eyes",
]

#: Inputs of the /generate endpoint, in order (names are the API's parameter names).
INPUT_NAMES = ("prompt", "model", "method", "baseline", "seed", "randomize_seed", "delta", "lam", "k", "draft",
               "gamma", "confidence", "depth", "branching", "tree_tokens", "temperature", "top_k", "top_p", "cfg_scale",
               "window", "init", "coupled")
#: Outputs of the /generate endpoint, in order (the session cache, a gr.State, is not part of the API).
OUTPUT_NAMES = ("image", "baseline_image", "token_map", "per_step", "cumulative", "log", "compare", "table",
                "seed", "notice", "stats")

DEBOUNCE_S = 0.3  # a slider release waits this long (cancelled by further slider input) before running
STREAM_SHARE = 0.1  # Gradio-side cost of streamed frames, as a share of elapsed time (plus the decode share)
MAX_GAP_S = 0.5  # ... but a new partial image is sent at least this often
DECODE_SHARE = 0.1  # partial VQ decodes, as a share of elapsed time (pipeline.stream)
LOG_LINES = 600  # enough for a method and an AR baseline of 256 tokens
GPU_DURATION = int(os.environ.get("LANTERN_GPU_DURATION", "90"))

# ----------------------------------------------------------------------------- models


@dataclasses.dataclass
class Models:
    """The presets offered by this process, their status and the loaded pipelines."""

    offered: list[str]
    status: dict[str, str | None]  # None = usable here, else why not
    pipelines: dict[str, LanternPipeline]
    default: str
    device: torch.device
    startup_notes: list[str] = dataclasses.field(default_factory=list)

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
        return pipe

    def choices(self) -> list[tuple[str, str]]:
        out = []
        for name in self.offered:
            title = get_preset(name).title
            reason = self.status.get(name)
            out.append((f"{title} — unavailable: {_short(reason)}" if reason else title, name))
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
            lines.append(f"ℹ️ **No drafter here for `{name}`** ({_short(pipe.drafter_missing)}): the drafter "
                         "methods are off; AR, SJD and SJD+LANTERN need none.")
        unavailable = [f"`{n}` ({_short(r)})" for n, r in self.status.items() if r and n in self.offered]
        if unavailable:
            lines.append("Unavailable here: " + "; ".join(unavailable) + ".")
        return "\n\n".join(lines)


def _short(reason: str | None, n: int = 90) -> str:
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
        notes.append(f"The model {default!r} could not be loaded ({_short(models.status.get(default))}); "
                     f"using {fallback!r}.")
        models.default = fallback
    return models


_MODELS: Models | None = None


def _models() -> Models:
    if _MODELS is None:
        raise RuntimeError("build_demo(load_models()) has not been called")
    return _MODELS


def preset_values(name: str) -> dict[str, Any]:
    """Control values for a preset: ``DEFAULTS`` with its overrides, k capped at its table size,
    and the drafter-free methods where the preset's drafter is unavailable."""
    values = {**DEFAULTS, **PRESET_DEFAULTS.get(name, {})}
    pipe = _models().pipelines.get(name)
    if pipe is not None:
        values["k"] = max(1, min(int(values["k"]), pipe.max_k))
        if pipe.drafter is None:
            values.update(method="sjd+lantern", baseline="sjd")
    return values


# ----------------------------------------------------------------------------- requests


@dataclasses.dataclass
class Request:
    pipe: LanternPipeline
    model: str
    prompt: str
    seed: int
    config: DecodeConfig
    baseline: DecodeConfig | None


def _integer(name: str, value: Any) -> int:
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise gr.Error(f"{name} must be a number, got {value!r}.") from None
    if not f.is_integer():
        raise gr.Error(f"{name} must be a whole number, got {value!r}.")
    return int(f)


def build_request(prompt, model, method, baseline, seed, randomize_seed, delta, lam, k, draft, gamma, confidence,
                  depth, branching, tree_tokens, temperature, top_k, top_p, cfg_scale, window, init,
                  coupled) -> Request:
    """Validate the controls and turn them into a ``Request``; raises ``gr.Error`` with a clear message."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise gr.Error("Please enter a prompt (it is empty).", title="Empty prompt")
    models = _models()
    try:
        pipe = models.get(model)
    except PresetUnavailable as err:
        raise gr.Error(str(err), title="Model unavailable") from None
    if method not in METHODS:
        raise gr.Error(f"Unknown method {method!r}; choose one of {', '.join(METHODS)}.")
    if baseline not in BASELINES:
        raise gr.Error(f"Unknown baseline {baseline!r}; choose one of {', '.join(BASELINES)}.")
    if draft not in DRAFT_CHOICES:
        raise gr.Error(f"Unknown draft shape {draft!r}; choose one of {', '.join(DRAFT_CHOICES)}.")
    if init not in INIT_CHOICES:
        raise gr.Error(f"Unknown draft initialisation {init!r}; choose one of {', '.join(INIT_CHOICES)}.")
    if not isinstance(coupled, bool):
        raise gr.Error(f"coupled must be true or false, got {coupled!r}.")
    for name in (method, baseline):
        if name in METHOD_TITLES and name not in DRAFTER_FREE and pipe.drafter is None:
            raise gr.Error(f"{METHOD_TITLES[name]} needs a drafter, and model {model!r} has none here "
                           f"({_short(pipe.drafter_missing, 200)}). Choose AR, SJD or SJD+LANTERN.",
                           title="No drafter")
    k = _integer("k", k)
    if method in RELAXED and not 1 <= k <= pipe.max_k:
        raise gr.Error(f"k must be in [1, {pipe.max_k}] for model {model!r}, got {k}.", title="Invalid settings")
    seed = secrets.randbelow(2**31) if randomize_seed else _integer("seed", seed if seed is not None else 0)
    if not 0 <= seed < 2**31:
        raise gr.Error(f"seed must be in [0, {2**31 - 1}], got {seed}.")
    sampling = SamplingConfig(cfg_scale=float(cfg_scale), temperature=float(temperature),
                              top_k=_integer("top_k", top_k), top_p=float(top_p))
    common = dict(gamma=_integer("gamma", gamma), min_confidence=float(confidence),
                  depth=_integer("depth", depth), top_k=_integer("branching", branching),
                  total_tokens=_integer("tree_tokens", tree_tokens), window=_integer("window", window), init=init,
                  coupled=coupled, sampling=sampling)
    try:
        config = DecodeConfig(method, draft=None if method in DRAFTER_FREE else AUTO_DRAFT[method] if draft == "auto"
                              else draft, delta=float(delta), k=k, lam=float(lam), **common)
        config.validate()
        base = None
        if baseline != "none":
            base = DecodeConfig(baseline, draft=AUTO_DRAFT.get(baseline), **common)
            base.validate()
    except ValueError as err:
        raise gr.Error(f"Invalid settings: {err}.", title="Invalid settings") from None
    return Request(pipe, model, prompt, seed, config, base)


# ----------------------------------------------------------------------------- streaming


@dataclasses.dataclass
class _Run:
    """One finished (or running) generation as the page shows it."""

    label: str
    config: DecodeConfig
    steps: list = dataclasses.field(default_factory=list)
    image: Any = None
    tokens: list[int] = dataclasses.field(default_factory=list)
    stats: dict[str, float] = dataclasses.field(default_factory=dict)
    reused: bool = False
    notices: list[str] = dataclasses.field(default_factory=list)
    first_image_s: float | None = None
    final_image_s: float | None = None
    frames: int = 0

    def as_json(self, num_tokens: int) -> dict[str, Any]:
        return {
            "method": self.config.method,
            "draft": self.config.shape,
            "config": dataclasses.asdict(self.config),
            "stats": self.stats,
            "accepted_per_step": [len(s.tokens) for s in self.steps],
            "num_tokens": num_tokens,
            "tokens": self.tokens,
            "reused": self.reused,
            "first_image_s": self.first_image_s,
            "final_image_s": self.final_image_s,
            "frames": self.frames,
        }


class _Log:
    """The log box: a header line, then the last ``LOG_LINES`` lines (one per target pass), newest first."""

    def __init__(self, header: str):
        self.header = header
        self.lines: collections.deque[str] = collections.deque(maxlen=LOG_LINES)

    def add(self, line: str) -> None:
        self.lines.append(line)

    def text(self) -> str:
        return "\n".join([self.header, *reversed(self.lines)])


def _log_stopped(text: str | None) -> str:
    """The log box after Stop: the note goes right under the header (newest first)."""
    header, _, rest = (text or "").partition("\n")
    return "\n".join(filter(None, [header, "stopped by the user", rest]))


def describe(config: DecodeConfig) -> str:
    """A method's parameters for the log, e.g. "δ=0.25, k=16; dynamic tree depth 4, top-4, 16 tokens; T=1, cfg=3"."""
    parts = []
    if config.method in ("lantern", "sjd+lantern"):
        parts.append(f"δ={config.delta:g}, k={config.k}")
    elif config.method == "lantern++":
        parts.append(f"λ={config.lam:g}, δ≤{config.delta:g}, k={config.k}")
    shape = config.shape
    if shape == "chain":
        parts.append(f"chain γ={config.gamma}" + (f", stop below {config.min_confidence:g}"
                                                    if config.min_confidence else ""))
    elif shape == "window":
        parts.append(f"window {config.window}, {config.init} drafts, "
                     + ("coupled" if config.coupled else "independent") + " redrafts")
    elif shape is not None:
        kind = "static" if shape == "static" else "dynamic"
        parts.append(f"{kind} tree depth {config.depth}, top-{config.top_k}, {config.total_tokens} tokens")
    s = config.sampling
    parts.append(f"T={s.temperature:g}, cfg={s.cfg_scale:g}" + (f", top-k {s.top_k}" if s.top_k else "")
                 + (f", top-p {s.top_p:g}" if s.top_p < 1 else ""))
    return "; ".join(parts)


def _outputs(**values: Any) -> tuple:
    """The /generate output tuple plus the session cache; outputs not named are left unchanged."""
    return tuple(values.get(name, gr.skip()) for name in OUTPUT_NAMES + ("cache",))


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


def _alive_check(session: str | None) -> Callable[[], bool]:
    """A callable telling whether no newer run was asked for in ``session`` since now."""
    if not session:
        return lambda: True
    epoch = _EPOCHS.get(session, 0)
    return lambda: _EPOCHS.get(session, 0) == epoch


class _Superseded(Exception):
    pass


def _baseline_key(req: Request) -> tuple:
    assert req.baseline is not None
    return (req.model, req.prompt, req.seed, repr(req.baseline))


def _stream_run(req: Request, config: DecodeConfig, label: str, role: str, log: "_Log",
                others: dict[str, list], t_click: float,
                alive: Callable[[], bool]) -> Iterator[tuple[_Run, dict[str, Any]]]:
    """Run one generation, yielding (run, outputs to update) whenever a frame is worth sending.

    Frames are sent while their cost (building them, and Gradio processing and
    sending them: from building to our resumption) stays within ``STREAM_SHARE`` of
    the elapsed time, and at least every ``MAX_GAP_S`` when the pipeline has a new
    image; the first frame (right after the prefill) and the last are always sent.
    The pipeline itself keeps partial VQ decodes within ``DECODE_SHARE``. Raises
    ``_Superseded`` (after closing the pipeline's stream) when ``alive()`` turns false.
    """
    pipe = req.pipe
    n = pipe.num_tokens
    run = _Run(label, config)
    relaxed = config.relaxed
    image_key = "image" if role == "method" else "baseline_image"
    committed = seen = 0
    ui_time = last_cost = last_frame = 0.0
    t0 = time.perf_counter()
    with contextlib.closing(pipe.stream(req.prompt, config, req.seed, decode_share=DECODE_SHARE)) as stream:
        for gen in stream:
            if not alive():
                raise _Superseded
            for step in gen.steps[seen:]:
                committed += len(step.tokens)
                log.add(plots.step_line(label, step, committed, n, relaxed))
            seen = len(gen.steps)
            run.steps, run.notices = gen.steps, gen.notices
            if gen.image is None and not gen.done:
                continue
            t_frame = time.perf_counter()
            within_budget = ui_time + last_cost <= STREAM_SHARE * (t_frame - t0 + last_cost)
            if not gen.done and run.frames and not within_budget and t_frame - last_frame < MAX_GAP_S:
                continue
            if gen.done:
                run.image, run.tokens, run.stats = gen.image, gen.tokens.tolist(), gen.stats
            frame = {image_key: gen.image,
                     "cumulative": plots.cumulative_frame({**others, role: gen.steps}, n),
                     "log": log.text()}
            if role == "method":
                frame["per_step"] = plots.per_step_frame(gen.steps)
                frame["token_map"] = plots.token_map(gen.source, gen.step_of, pipe.target.cfg.grid)
            if run.first_image_s is None:
                run.first_image_s = time.perf_counter() - t_click
            if gen.done:
                run.final_image_s = time.perf_counter() - t_click
            run.frames += 1
            yield run, frame
            last_frame = time.perf_counter()
            last_cost = last_frame - t_frame  # building the frame + Gradio sending it
            ui_time += last_cost
    # streaming overhead: the pipeline's streaming work (partial decodes included) and the frames,
    # as a share of the run (the final decode excluded)
    run.stats["ui_time"] = ui_time
    run.stats["stream_overhead"] = (ui_time + run.stats.get("stream_time", 0.0)) / max(
        run.stats.get("end_to_end_time", 0.0), 1e-9)


def _generate(req: Request, cache: dict | None, alive: Callable[[], bool]) -> Iterator[tuple]:
    t_click = time.perf_counter()
    n = req.pipe.num_tokens
    main_label = METHOD_TITLES[req.config.method]
    base_label = f"{METHOD_TITLES[req.baseline.method]} baseline" if req.baseline else None
    notice = _models().notice(req.model)
    log = _Log(f"model {req.model}, seed {req.seed}, {n} tokens: {main_label} ({describe(req.config)})"
               + (f" vs {base_label} ({describe(req.baseline)})" if req.baseline else ""))
    reuse = bool(req.baseline and cache and cache.get("key") == _baseline_key(req))
    base_value = cache["run"].image if reuse else None
    yield _outputs(image=gr.update(label=main_label),
                   baseline_image=gr.update(value=base_value, label=base_label or "Baseline (none)"),
                   compare=None, table=plots.stats_table([]), seed=req.seed, notice=notice,
                   log=log.text())
    shown: dict[str, Any] = {"baseline_image": base_value, "seed": req.seed, "notice": notice}

    main, noticed = None, False
    for main, frame in _stream_run(req, req.config, main_label, "method", log, {}, t_click, alive):
        if not noticed and main.notices:  # the first frame: prompt notices (cut, unknown words)
            noticed = True
            for message in main.notices:
                gr.Warning(message)
            frame["notice"] = "\n\n".join(filter(None, [notice] + [f"ℹ️ {m}" for m in main.notices]))
        shown.update(frame)
        yield _outputs(**frame)
    assert main is not None

    base = None
    if req.baseline is not None:
        if reuse:
            base = dataclasses.replace(cache["run"], reused=True)
            log.add(f"{base_label}: reused from the previous run (same model, prompt, seed and settings)")
            shown["cumulative"] = plots.cumulative_frame({"method": main.steps, "baseline": base.steps}, n)
        else:
            for base, frame in _stream_run(req, req.baseline, base_label, "baseline", log,
                                           {"method": main.steps}, t_click, alive):
                shown.update(frame)
                yield _outputs(**frame)
            cache = {"key": _baseline_key(req), "run": dataclasses.replace(base, reused=False)}

    speedup = None
    if base is not None:
        speedup = base.stats["wall_time"] / max(main.stats["wall_time"], 1e-9)
        rows = [plots.stats_row(main_label, main.stats, speedup),
                plots.stats_row(base_label + (" (reused)" if base.reused else ""), base.stats, 1.0)]
    else:
        rows = [plots.stats_row(main_label, main.stats, None)]
    summary = f"{main_label}: {main.stats['nfe']:.0f} target passes, {main.stats['wall_time']:.2f} s"
    if base is not None:
        summary += (f"; {base_label}: {base.stats['nfe']:.0f} passes, {base.stats['wall_time']:.2f} s"
                    f" -> speed-up {speedup:.2f}x")
    log.add(summary)
    stats = {
        "model": req.model,
        "prompt": req.prompt,
        "seed": req.seed,
        "notices": main.notices,
        "main": main.as_json(n),
        "baseline": base.as_json(n) if base is not None else None,
        "speedup": speedup,
        "total_s": time.perf_counter() - t_click,
    }
    # the slider does not scale small images up: send them enlarged
    compare = (plots.enlarge(main.image), plots.enlarge(base.image)) if base is not None else None
    # the last message carries every output, so that an API caller's result is complete
    yield _outputs(**{**shown, "compare": compare, "table": plots.stats_table(rows), "log": log.text(),
                      "stats": stats, "cache": cache})


@GPU(duration=GPU_DURATION)
def generate(prompt, model, method, baseline, seed, randomize_seed, delta, lam, k, draft, gamma, confidence,
             depth, branching, tree_tokens, temperature, top_k, top_p, cfg_scale, window, init, coupled,
             cache=None, session=None):
    """Generate an image with ``method``, then with ``baseline`` (same prompt, seed and sampling), streaming both.

    Yields the outputs in ``OUTPUT_NAMES`` order (+ the session cache). Raises
    ``gr.Error`` for an empty prompt, an unavailable model or settings out of range.
    Stops quietly when ``supersede(session)`` is called meanwhile.
    """
    alive = _alive_check(session)
    req = build_request(prompt, model, method, baseline, seed, randomize_seed, delta, lam, k, draft, gamma,
                        confidence, depth, branching, tree_tokens, temperature, top_k, top_p, cfg_scale, window,
                        init, coupled)
    try:
        yield from _generate(req, cache, alive)
    except _Superseded:
        return
    except gr.Error:
        raise
    except Exception as err:  # keep the message; the pipeline itself stays healthy (its lock is released)
        logger.exception("generation failed")
        raise gr.Error(f"Generation failed: {type(err).__name__}: {err}") from err


def rerun(prompt, model, method, baseline, seed, randomize_seed, delta, lam, k, draft, gamma, confidence,
          depth, branching, tree_tokens, temperature, top_k, top_p, cfg_scale, window, init, coupled,
          cache=None, session=None):
    """Slider release: wait ``DEBOUNCE_S``, then re-run with the same seed unless the user moved a slider again."""
    if method not in RELAXED or not isinstance(prompt, str) or not prompt.strip():
        yield _outputs()
        return
    alive = _alive_check(session)
    time.sleep(DEBOUNCE_S)
    if not alive():  # the user is dragging again: a newer release will follow
        yield _outputs()
        return
    yield from generate(prompt, model, method, baseline, seed, False, delta, lam, k, draft, gamma,
                        confidence, depth, branching, tree_tokens, temperature, top_k, top_p, cfg_scale, window,
                        init, coupled, cache, session)


# ----------------------------------------------------------------------------- page


def _Slider(*args: Any, **kwargs: Any) -> gr.Slider:  # noqa: N802
    """A ``gr.Slider`` whose out-of-range error names the parameter (its elem_id), for API callers.

    (The instance's ``preprocess`` is wrapped: a subclass would make Gradio write a
    ``.pyi`` stub next to this module.)
    """
    slider = gr.Slider(*args, **kwargs)
    check = slider.preprocess

    def preprocess(payload: float) -> float:
        try:
            return check(payload)
        except gr.Error as err:
            raise gr.Error(f"{slider.elem_id}: {err.message}", title="Invalid settings") from None

    slider.preprocess = preprocess  # type: ignore[method-assign]
    return slider


CSS = """
.pixelated img { image-rendering: pixelated; }
/* model images are sent at their own resolution (64 px for the emoji model) and enlarged here */
#main-image img, #baseline-image img, #token-map img {
  width: 100%; height: 100%; object-fit: contain; padding-top: 34px; box-sizing: border-box; }
#compare img { image-rendering: pixelated; }
#notice:empty { display: none; }
.footer-note { font-size: 0.85em; opacity: 0.85; }
"""

_SYSTEM_FONTS = ["ui-sans-serif", "system-ui", "-apple-system", "Segoe UI", "Roboto", "Helvetica", "Arial",
                 "sans-serif"]
_MONO_FONTS = ["ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "monospace"]


def theme() -> gr.themes.Base:
    """The default theme with system fonts (no web-font download: the page works offline)."""
    return gr.themes.Default(font=_SYSTEM_FONTS, font_mono=_MONO_FONTS, primary_hue="orange")


HEADER = """
# LANTERN: relaxed speculative decoding for visual autoregressive models
A visual AR model draws an image as a sequence of codebook tokens, one target pass per token.
A small drafter proposes several tokens and the target checks them in one pass. **LANTERN** also accepts a
draft when the target preferred one of its *k* nearest codebook neighbours, moving at most **δ** of
probability mass (total variation distance) per position — many tokens look alike, so images barely change
while far fewer target passes are needed. Move δ or k and release the slider: the same seed runs again.
No drafter? **SJD** (speculative Jacobi decoding) drafts from the target's own previous pass, and
**SJD+LANTERN** relaxes its acceptance the same way.
"""

FOOTER = """
---
<div class="footer-note">

Emoji images: [OpenMoji](https://openmoji.org) – the open-source emoji and icon project.
License: [CC BY-SA 4.0](https://creativecommons.org/licenses/by-sa/4.0/). The embedded model was trained
on them; its outputs are adaptations shared under the same licence.
Papers: [LANTERN (arXiv 2410.03355)](https://arxiv.org/abs/2410.03355) ·
[LANTERN++ (arXiv 2502.06352)](https://arxiv.org/abs/2502.06352).
Token map: grey = sampled by the target, warm colours = accepted draft token by draft depth (darker = deeper;
for SJD, the place in the window),
dark lines separate tokens committed by different target passes, numbers = pass index.
</div>
"""

LAUNCH_KWARGS: dict[str, Any] = {"css": CSS}


def launch_kwargs() -> dict[str, Any]:
    """Keyword arguments for ``demo.launch()`` (Gradio 6 takes theme and CSS there)."""
    return {**LAUNCH_KWARGS, "theme": theme()}


def _method_visibility(method: str, baseline: str) -> tuple:
    """Visibility of δ, λ, k, the drafting accordion and the Jacobi-window accordion."""
    relaxed = method in RELAXED
    return (gr.update(visible=relaxed), gr.update(visible=method == "lantern++"), gr.update(visible=relaxed),
            gr.update(visible=method not in DRAFTER_FREE),
            gr.update(visible=method in SJD_METHODS or baseline in SJD_METHODS))


def build_demo(models: Models) -> gr.Blocks:
    """The page; ``models`` becomes the process-wide model registry used by the handlers."""
    global _MODELS
    _MODELS = models
    v = preset_values(models.default)
    max_k = models.pipelines[models.default].max_k
    # the API accepts k up to the largest table loaded (checked per model in build_request);
    # a page shows its model's own range (set on load and on model change)
    api_max_k = max(p.max_k for p in models.pipelines.values())
    with gr.Blocks(title="LANTERN demo: relaxed speculative decoding for image generation") as demo:
        gr.Markdown(HEADER)
        notice = gr.Markdown(models.notice(models.default), label="notice", elem_id="notice")
        with gr.Row(equal_height=False):
            with gr.Column(scale=4, min_width=320):
                prompt = gr.Textbox(label="Prompt", placeholder="e.g. grinning face (Enter generates)", lines=1,
                                    max_lines=3, elem_id="prompt")
                with gr.Row():
                    run_btn = gr.Button("Generate", variant="primary", elem_id="generate-btn")
                    stop_btn = gr.Button("Stop", variant="stop", elem_id="stop-btn")
                gr.Examples(examples=[[e] for e in EXAMPLES], inputs=[prompt], label="Example prompts")
                model = gr.Dropdown(models.choices(), value=models.default, label="Model", elem_id="model")
                method = gr.Radio(METHOD_CHOICES, value=v["method"], label="Method", elem_id="method")
                baseline = gr.Radio(BASELINE_CHOICES, value=v["baseline"], elem_id="baseline",
                                    label="Baseline (runs after, same prompt, seed and sampling)")
                with gr.Row():
                    seed = gr.Number(v["seed"], label="Seed", precision=0, minimum=0, maximum=2**31 - 1,
                                     elem_id="seed")
                    randomize = gr.Checkbox(v["randomize_seed"], label="Randomise seed on Generate")
                relaxed0 = v["method"] in RELAXED
                delta = _Slider(0.0, 1.0, value=v["delta"], step=0.01, label="δ: relaxation budget (TVD)",
                                info="probability mass that may move onto the draft per position; "
                                     "for LANTERN++ a cap (1 = none)", visible=relaxed0, elem_id="delta")
                lam = _Slider(1.0, 10.0, value=v["lam"], step=0.1, label="λ (LANTERN++)",
                              info="relaxed mass ≤ λ · p(draft)", visible=v["method"] == "lantern++",
                              elem_id="lam")
                k = _Slider(1, api_max_k, value=min(v["k"], max_k), step=1, label="k: nearest codebook neighbours",
                            visible=relaxed0, elem_id="k")
                with gr.Accordion("Drafting", open=False, visible=v["method"] not in DRAFTER_FREE) as drafting:
                    draft = gr.Radio(DRAFT_CHOICES, value=v["draft"], label="Draft shape",
                                     info="auto: SD chain, EAGLE-2/LANTERN dynamic tree, LANTERN++ static tree")
                    gamma = _Slider(1, 16, value=v["gamma"], step=1, label="Chain length γ (most drafts per pass)",
                                    elem_id="gamma")
                    confidence = _Slider(0.0, 0.99, value=v["confidence"], step=0.01,
                                         label="Chain: stop below confidence",
                                         info="stop drafting once the product of the drafts' probabilities "
                                              "falls below this (0 = always γ drafts)", elem_id="confidence")
                    depth = _Slider(1, 12, value=v["depth"], step=1, label="Tree depth", elem_id="depth")
                    branching = _Slider(1, 16, value=v["branching"], step=1, label="Tree top-k (children per node)",
                                        elem_id="branching")
                    tree_tokens = _Slider(2, 128, value=v["tree_tokens"], step=1,
                                          label="Tree total tokens (incl. the root)", elem_id="tree_tokens")
                with gr.Accordion("Jacobi window (SJD, no drafter)", open=False, elem_id="jacobi",
                                  visible=v["method"] in SJD_METHODS or v["baseline"] in SJD_METHODS) as jacobi:
                    window = _Slider(1, 64, value=v["window"], step=1, label="Window L (drafts verified per pass)",
                                     elem_id="window")
                    init = gr.Radio(INIT_CHOICES, value=v["init"], label="New drafts start as",
                                    info="vertical: the token one row above · left: the token to the left · "
                                         "random: a uniform code", elem_id="init")
                    coupled = gr.Checkbox(v["coupled"], label="Coupled redrafts (SCD / MC-SJD)",
                                          info="redraw each draft coupled with its previous value, so it changes "
                                               "only where the target's distribution moved (still exact)",
                                          elem_id="coupled")
                with gr.Accordion("Sampling", open=False):
                    temperature = _Slider(0.0, 2.0, value=v["temperature"], step=0.05, label="Temperature",
                                          info="0 = greedy", elem_id="temperature")
                    top_k = _Slider(0, 16384, value=v["top_k"], step=1, label="Top-k (0 = all tokens)", elem_id="top_k")
                    top_p = _Slider(0.01, 1.0, value=v["top_p"], step=0.01, label="Top-p", elem_id="top_p")
                    cfg_scale = _Slider(0.0, 20.0, value=v["cfg_scale"], step=0.1, label="CFG scale",
                                        info="classifier-free guidance; 1 = off", elem_id="cfg_scale")
            with gr.Column(scale=7):
                with gr.Row():
                    image = gr.Image(label=METHOD_TITLES[v["method"]], type="pil", format="png", interactive=False,
                                     height=300, elem_id="main-image", elem_classes="pixelated",
                                     buttons=["download", "fullscreen"])
                    base_image = gr.Image(label=f"{METHOD_TITLES[v['baseline']]} baseline", type="pil",
                                          format="png", interactive=False, height=300, elem_id="baseline-image",
                                          elem_classes="pixelated", buttons=["download", "fullscreen"])
                with gr.Row():
                    token_map = gr.Image(label="Token map (source and pass of each token)", type="pil",
                                         format="png", interactive=False, height=300, elem_id="token-map",
                                         buttons=["download", "fullscreen"])
                    with gr.Column():
                        per_step = gr.BarPlot(x="target pass", y="tokens", color="kind",
                                              color_map=plots.KIND_COLOURS, colors_in_legend=[], x_lim=[0, None],
                                              label="Tokens committed per target pass", height=220,
                                              caption="orange: accepted draft tokens · grey: token sampled "
                                                      "by the target (1 per pass)", elem_id="per-step")
                        cumulative = gr.LinePlot(x="target passes", y="tokens", color="run",
                                                 color_map=plots.RUN_COLOURS, colors_in_legend=[],
                                                 label="Tokens vs target passes", height=220,
                                                 caption="orange: chosen method · blue: baseline · grey: AR, "
                                                         "1 token per pass (y = x)", elem_id="cumulative")
                log_box = gr.Textbox(label="Log (one line per target pass, newest first)", lines=6, max_lines=6,
                                     interactive=False, autoscroll=True, elem_id="log")
                compare = gr.ImageSlider(label="Compare: method | baseline (drag the handle)", type="pil",
                                         format="png", interactive=False, elem_id="compare",
                                         elem_classes="pixelated", max_height=320)
                table = gr.Dataframe(plots.stats_table([]), label="Statistics (wall time: prefill to last token)",
                                     interactive=False, elem_id="stats-table")
                with gr.Accordion("Raw statistics (JSON, as returned by the API)", open=False):
                    stats = gr.JSON(label="stats", elem_id="stats-json")
        gr.Markdown(FOOTER, elem_id="footer")
        cache = gr.State(None)
        session = gr.State(None)  # an id per page load (set below), for supersede()
        current_model = gr.State(models.default)

        inputs = [prompt, model, method, baseline, seed, randomize, delta, lam, k, draft, gamma, confidence, depth,
                  branching, tree_tokens, temperature, top_k, top_p, cfg_scale, window, init, coupled, cache, session]
        outputs = [image, base_image, token_map, per_step, cumulative, log_box, compare, table, seed, notice, stats,
                   cache]
        run_evt = gr.on([run_btn.click, prompt.submit], generate, inputs, outputs, api_name="generate",
                        concurrency_id="generate", concurrency_limit=1, show_progress="minimal",
                        show_progress_on=[log_box])
        sliders = [delta, lam, k]
        # moving a relaxation slider stops this session's run at its next step (debounce:
        # a re-run waiting out DEBOUNCE_S gives up too); releasing it queues a re-run
        gr.on([s.input for s in sliders], supersede, session, None, queue=False, api_visibility="private")
        rerun_evt = gr.on([s.release for s in sliders], rerun, inputs, outputs, api_visibility="private",
                          concurrency_id="generate", concurrency_limit=1, trigger_mode="always_last",
                          show_progress="minimal", show_progress_on=[log_box])
        stop_btn.click(None, cancels=[run_evt, rerun_evt])
        stop_btn.click(supersede, session, None, queue=False, api_visibility="private")
        stop_btn.click(_log_stopped, log_box, log_box, queue=False, api_visibility="private")

        gr.on([method.change, baseline.change], _method_visibility, [method, baseline],
              [delta, lam, k, drafting, jacobi], api_visibility="private", queue=False)

        controls = {"method": method, "baseline": baseline, "delta": delta, "lam": lam, "k": k, "draft": draft,
                    "gamma": gamma, "confidence": confidence, "depth": depth, "branching": branching,
                    "tree_tokens": tree_tokens, "window": window, "init": init, "coupled": coupled,
                    "temperature": temperature, "top_k": top_k, "top_p": top_p, "cfg_scale": cfg_scale}

        def select_model(name, previous):
            try:
                pipe = _models().get(name)
            except PresetUnavailable as err:
                gr.Warning(str(err), title="Model unavailable")
                return (previous, *[gr.skip()] * len(controls), _models().notice(previous), previous)
            values = preset_values(name)
            updates = [gr.update(value=values[key]) for key in controls]
            updates[list(controls).index("k")] = gr.update(maximum=pipe.max_k, value=values["k"])
            return (name, *updates, _models().notice(name), name)

        demo.load(lambda: secrets.token_hex(8), None, session, queue=False, api_visibility="private")
        if api_max_k != max_k:
            demo.load(lambda: gr.update(maximum=max_k), None, k, queue=False, api_visibility="private")
        model.select(select_model, [model, current_model], [model, *controls.values(), notice, current_model],
                    api_visibility="private", concurrency_id="load", concurrency_limit=1)
    return demo


def create_app(env: dict[str, str] | None = None) -> tuple[gr.Blocks, Models]:
    """Load the models (start-up) and build the queued app."""
    models = load_models(env)
    demo = build_demo(models)
    demo.queue(max_size=int(os.environ.get("LANTERN_QUEUE_SIZE", "16")), default_concurrency_limit=1)
    return demo, models
