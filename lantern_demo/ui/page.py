"""The page: its controls, outputs and events (layout only; the handlers are ``stream.py``'s).

``build_demo(models)`` registers ``models`` as the app's model registry and builds
the page: each control is created once, in ``_controls``, keyed by its input name
(``request.INPUT_NAMES``), and those names are the /generate endpoint's keyword inputs.
"""

from __future__ import annotations

import math
import secrets
from typing import Any

import gradio as gr

from ..jacobi import INITS
from .. import presets
from ..methods import (BASELINES, DEFAULT_DRAFT, DRAFTER_FREE, DRAFTS, METHOD_INFO, METHOD_TABLE, RELAXED,
                       SJD_METHODS, TITLES)
from ..pipeline import PresetUnavailable
from . import client, plots
from . import models as registry
from .models import Models
from .request import INPUT_NAMES, OUTPUT_NAMES, supersede, user_error
from .stream import generate, log_stopped, rerun

METHOD_CHOICES = [(m.choice, m.name) for m in METHOD_TABLE]
BASELINE_CHOICES = [(TITLES[m], m) for m in BASELINES] + [("none", "none")]
DRAFT_CHOICES = ["auto", *(d for d in DRAFTS if d != "window")]
DRAFT_INFO = ("auto: SD chain, LANTERN++ static tree, LANTERN the model's fastest (the embedded model: "
              f"{presets.EMOJI.drafts.get('lantern', DEFAULT_DRAFT['lantern'])}; LlamaGen: "
              f"{presets.LLAMAGEN.drafts.get('lantern', DEFAULT_DRAFT['lantern'])}). EAGLE-2 always drafts its "
              "dynamic tree (a chain would be SD).")

EXAMPLES = [
    "red heart",
    "a cat face emoji",
    "smiling face with sunglasses",
    "an emoji of a rocket",
    "deciduous tree",
    "grinning face with big eyes",
]


def _name_errors(name: str, component: gr.components.Component) -> None:
    """Make ``component``'s input checks name the parameter, and leave wrong types to the handler.

    Gradio's own check (a slider's range, a radio's choices) fails as ``"<name>: <Gradio's
    message>"``, logged as one line. A number box or slider given something that is not a
    number (None, text, a fraction for a whole-number box) passes it on unchanged, so that
    ``DecodeConfig.from_values`` (or the seed's check) refuses it by name, rather than
    Gradio rounding it or failing without a message. (The instance's ``preprocess`` is
    wrapped: a subclass would make Gradio write a ``.pyi`` stub next to this module.)
    """
    check = component.preprocess
    whole = getattr(component, "precision", None) == 0

    def preprocess(payload: Any) -> Any:
        if isinstance(component, (gr.Slider, gr.Number)) and not _plain_number(payload, whole):
            return payload
        try:
            return check(payload)
        except gr.Error as err:
            raise user_error(f"{name}: {err.message}") from None

    component.preprocess = preprocess  # type: ignore[method-assign]
    component.named_errors = name  # type: ignore[attr-defined]


def _keep_names(demo: gr.Blocks, controls: dict[str, Any]) -> None:
    """Keep ``_name_errors`` on the session copies Gradio makes of the controls.

    A handler that updates a control's properties (visibility on a method change, k's range on
    a model change) makes Gradio build a new instance of that component for the session
    (``block.__class__(**kwargs)``), without the wrapper; the session's copy is what checks the
    next request's input. So before each request's inputs are checked, any session copy of a
    control is wrapped too.
    """
    names = {component._id: name for name, component in controls.items()}
    check_inputs = demo.preprocess_data

    async def preprocess_data(block_fn, inputs, state, explicit_call=False):
        for block in block_fn.inputs if state is not None else ():
            if block._id in names and block._id in state:
                copy = state[block._id]
                if getattr(copy, "named_errors", None) is None:
                    _name_errors(names[block._id], copy)
        return await check_inputs(block_fn, inputs, state, explicit_call)

    demo.preprocess_data = preprocess_data  # type: ignore[method-assign]


def _plain_number(value: Any, whole: bool) -> bool:
    """True for a finite int or float (a whole one if ``whole``), bools excluded."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    return not whole or float(value).is_integer()


CSS = """
.pixelated img { image-rendering: pixelated; }
/* model images are sent at their own resolution (64 px for the emoji model) and enlarged here */
#main-image img, #baseline-image img, #token-map img, #explain-map img {
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
Explain map: each token coloured by the target's top-1 probability where it was decided (dark = unsure,
yellow = sure); a dot marks a draft accepted only thanks to the relaxation: the exact rule, with the same
random draw, would have rejected it (never for exact methods).
</div>
"""

def launch_kwargs() -> dict[str, Any]:
    """Keyword arguments for ``demo.launch()`` (Gradio 6 takes theme, CSS and the page's script there)."""
    return {"css": CSS + client.CSS, "js": client.JS, "theme": theme()}


def _method_visibility(method: str, baseline: str) -> tuple:
    """Visibility of δ, λ, k, the drafting accordion and the Jacobi-window accordion."""
    relaxed = method in RELAXED
    return (gr.update(visible=relaxed), gr.update(visible=METHOD_INFO[method].uses_lam), gr.update(visible=relaxed),
            gr.update(visible=method not in DRAFTER_FREE),
            gr.update(visible=method in SJD_METHODS or baseline in SJD_METHODS))


def _controls(models: Models, v: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The left column: (the controls by input name in ``INPUT_NAMES`` order, the buttons,
    accordions and k ranges by name)."""
    max_k = models.pipelines[models.default].max_k
    # the API accepts k up to the largest table loaded (checked per model by the pipeline);
    # a page shows its model's own range (set on load and on model change)
    api_max_k = max(p.max_k for p in models.pipelines.values())
    c: dict[str, Any] = {}
    c["prompt"] = gr.Textbox(label="Prompt", placeholder="e.g. grinning face (Enter generates)", lines=1,
                             max_lines=3, elem_id="prompt")
    with gr.Row():
        run_btn = gr.Button("Generate", variant="primary", elem_id="generate-btn")
        stop_btn = gr.Button("Stop", variant="stop", elem_id="stop-btn")
    gr.Examples(examples=[[e] for e in EXAMPLES], inputs=[c["prompt"]], label="Example prompts")
    c["model"] = gr.Dropdown(models.choices(), value=models.default, label="Model", elem_id="model")
    c["method"] = gr.Radio(METHOD_CHOICES, value=v["method"], label="Method", elem_id="method")
    c["baseline"] = gr.Radio(BASELINE_CHOICES, value=v["baseline"], elem_id="baseline",
                             label="Baseline (runs after, same prompt, seed and sampling)")
    with gr.Row():
        # no Gradio rounding or range here: ``request._seed`` checks it (whole, in range) by name
        c["seed"] = gr.Number(v["seed"], label="Seed", elem_id="seed")
        c["randomize_seed"] = gr.Checkbox(v["randomize_seed"], label="Randomise seed on Generate")
    relaxed0 = v["method"] in RELAXED
    c["delta"] = gr.Slider(0.0, 1.0, value=v["delta"], step=0.01, label="δ: relaxation budget (TVD)",
                         info="probability mass that may move onto the draft per position; "
                              "for LANTERN++ a cap (1 = none)", visible=relaxed0, elem_id="delta")
    c["lam"] = gr.Slider(1.0, 10.0, value=v["lam"], step=0.1, label="λ (LANTERN++)", info="relaxed mass ≤ λ · p(draft)",
                       visible=METHOD_INFO[v["method"]].uses_lam, elem_id="lam")
    c["k"] = gr.Slider(1, api_max_k, value=v["k"], step=1, label="k: nearest codebook neighbours",
                     visible=relaxed0, elem_id="k")
    with gr.Accordion("Drafting", open=False, visible=v["method"] not in DRAFTER_FREE) as drafting:
        _drafting_controls(c, v)
    with gr.Accordion("Jacobi window (SJD, no drafter)", open=False, elem_id="jacobi",
                      visible=v["method"] in SJD_METHODS or v["baseline"] in SJD_METHODS) as jacobi:
        c["window"] = gr.Slider(1, 64, value=v["window"], step=1, label="Window L (drafts verified per pass)",
                              elem_id="window")
        c["init"] = gr.Radio(list(INITS), value=v["init"], label="New drafts start as",
                             info="vertical: the token one row above · left: the token to the left · "
                                  "random: a uniform code", elem_id="init")
        c["coupled"] = gr.Checkbox(v["coupled"], label="Coupled redrafts (SCD / MC-SJD)",
                                   info="redraw each draft coupled with its previous value, so it changes "
                                        "only where the target's distribution moved (still exact)", elem_id="coupled")
    with gr.Accordion("Sampling", open=False):
        c["temperature"] = gr.Slider(0.0, 2.0, value=v["temperature"], step=0.05, label="Temperature",
                                   info="0 = greedy", elem_id="temperature")
        c["top_k"] = gr.Slider(0, 16384, value=v["top_k"], step=1, label="Top-k (0 = all tokens)", elem_id="top_k")
        c["top_p"] = gr.Slider(0.01, 1.0, value=v["top_p"], step=0.01, label="Top-p", elem_id="top_p")
        c["cfg_scale"] = gr.Slider(0.0, 20.0, value=v["cfg_scale"], step=0.1, label="CFG scale",
                                 info="classifier-free guidance; 1 = off", elem_id="cfg_scale")
    assert sorted(c) == sorted(INPUT_NAMES), "each input of the endpoint is created once"
    for name, component in c.items():
        _name_errors(name, component)
    return {n: c[n] for n in INPUT_NAMES}, {"run": run_btn, "stop": stop_btn, "drafting": drafting, "jacobi": jacobi, "page_max_k": max_k,
               "api_max_k": api_max_k}


def _drafting_controls(c: dict[str, Any], v: dict[str, Any]) -> None:
    """The drafting accordion's controls, into ``c``."""
    c["draft"] = gr.Radio(DRAFT_CHOICES, value=v["draft"], label="Draft shape",
                          info=DRAFT_INFO)
    c["gamma"] = gr.Slider(1, 16, value=v["gamma"], step=1, label="Chain length γ (most drafts per pass)",
                         elem_id="gamma")
    c["confidence"] = gr.Slider(0.0, 0.99, value=v["confidence"], step=0.01, label="Chain: stop below confidence",
                              info="stop drafting once the product of the drafts' probabilities "
                                   "falls below this (0 = always γ drafts)", elem_id="confidence")
    c["depth"] = gr.Slider(1, 12, value=v["depth"], step=1, label="Tree depth", elem_id="depth")
    c["branching"] = gr.Slider(1, 16, value=v["branching"], step=1, label="Tree top-k (children per node)",
                             elem_id="branching")
    c["tree_tokens"] = gr.Slider(2, 128, value=v["tree_tokens"], step=1, label="Tree total tokens (incl. the root)",
                               elem_id="tree_tokens")


def _explain_image() -> gr.Image:
    """The explain map (``plots.explain_map``), beside the token map."""
    return gr.Image(label="Explain: top-1 prob. (• relaxation-only)", type="pil", format="png", interactive=False,
                    height=300, elem_id="explain-map", buttons=["download", "fullscreen"])


def _outputs_column(v: dict[str, Any]) -> dict[str, Any]:
    """The right column: the output components by output name (``request.OUTPUT_NAMES``, but ``stats``)."""
    o: dict[str, Any] = {}
    with gr.Row():
        o["image"] = gr.Image(label=TITLES[v["method"]], type="pil", format="png", interactive=False, height=300,
                              elem_id="main-image", elem_classes="pixelated", buttons=["download", "fullscreen"])
        o["baseline_image"] = gr.Image(label=f"{TITLES[v['baseline']]} baseline", type="pil", format="png",
                                       interactive=False, height=300, elem_id="baseline-image",
                                       elem_classes="pixelated", buttons=["download", "fullscreen"])
    with gr.Row():
        o["token_map"] = gr.Image(label="Token map (source and pass of each token)", type="pil", format="png",
                                  interactive=False, height=300, elem_id="token-map",
                                  buttons=["download", "fullscreen"])
        o["explain"] = _explain_image()
    with gr.Row():
        with gr.Column():
            o["per_step"] = gr.BarPlot(x="target pass", y="tokens", color="kind", color_map=plots.KIND_COLOURS,
                                       colors_in_legend=[], x_lim=[0, None], label="Tokens committed per target pass",
                                       height=220, caption="orange: accepted draft tokens · grey: token sampled "
                                                           "by the target (1 per pass)", elem_id="per-step")
            o["cumulative"] = gr.LinePlot(x="target passes", y="tokens", color="run", color_map=plots.RUN_COLOURS,
                                          colors_in_legend=[], label="Tokens vs target passes", height=220,
                                          caption="orange: chosen method · blue: baseline · grey: AR, "
                                                  "1 token per pass (y = x)", elem_id="cumulative")
    o["log"] = gr.Textbox(label="Log (one line per target pass, newest first)", lines=6, max_lines=6,
                          interactive=False, autoscroll=True, elem_id="log")
    o["compare"] = gr.ImageSlider(label="Compare: method | baseline (drag the handle)", type="pil", format="png",
                                  interactive=False, elem_id="compare", elem_classes="pixelated", max_height=320)
    o["table"] = gr.Dataframe(plots.stats_table([]), label="Statistics (wall time: prefill to last token)", wrap=True,
                              interactive=False, elem_id="stats-table")
    return o


def build_demo(models: Models) -> gr.Blocks:
    """The page; ``models`` becomes the process-wide model registry used by the handlers."""
    registry.register(models)
    v = models.values(models.default)
    with gr.Blocks(title="LANTERN demo: relaxed speculative decoding for image generation") as demo:
        gr.Markdown(HEADER)
        notice = gr.Markdown(models.notice(models.default), label="notice", elem_id="notice")
        with gr.Row(equal_height=False):
            with gr.Column(scale=4, min_width=320):
                controls, parts = _controls(models, v)
            with gr.Column(scale=7):
                out = _outputs_column(v)
                with gr.Accordion("Raw statistics (JSON, as returned by the API)", open=False):
                    stats = gr.JSON(label="stats", elem_id="stats-json")
        gr.Markdown(FOOTER, elem_id="footer")
        outputs = [*out.values(), controls["seed"], notice, stats, gr.State(None)]  # OUTPUT_NAMES + the cache
        _wire(demo, models, controls, parts, outputs, notice)
    _keep_names(demo, controls)
    return demo


def _wire(demo: gr.Blocks, models: Models, controls: dict[str, Any], parts: dict[str, Any], outputs: list,
          notice: gr.Markdown) -> None:
    """The page's events: generate (the public /generate endpoint), slider re-runs, Stop, model changes."""
    cache, session = outputs[-1], gr.State(None)  # session: an id per page load (set below), for supersede()
    current_model = gr.State(models.default)
    log_box = outputs[list(OUTPUT_NAMES).index("log")]
    run_evt = gr.on([parts["run"].click, controls["prompt"].submit], generate, [cache, session], outputs,
                    inputs_kwargs=controls, api_name="generate", concurrency_id="generate", concurrency_limit=1,
                    show_progress="minimal", show_progress_on=[log_box])
    sliders = [controls[name] for name in ("delta", "lam", "k")]
    # moving a relaxation slider stops this session's run at its next step (debounce:
    # a re-run waiting out DEBOUNCE_S gives up too); releasing it queues a re-run
    gr.on([s.input for s in sliders], supersede, session, None, queue=False, api_visibility="private")
    rerun_evt = gr.on([s.release for s in sliders], rerun, [cache, session], outputs, inputs_kwargs=controls,
                      api_visibility="private", concurrency_id="generate", concurrency_limit=1,
                      trigger_mode="always_last", show_progress="minimal", show_progress_on=[log_box])
    parts["stop"].click(None, cancels=[run_evt, rerun_evt])
    parts["stop"].click(supersede, session, None, queue=False, api_visibility="private")
    parts["stop"].click(log_stopped, log_box, log_box, queue=False, api_visibility="private")
    gr.on([controls["method"].change, controls["baseline"].change], _method_visibility,
          [controls["method"], controls["baseline"]],
          [controls["delta"], controls["lam"], controls["k"], parts["drafting"], parts["jacobi"]],
          api_visibility="private", queue=False)
    # a model change sets every control but the prompt, model and seed to the preset's values
    preset_controls = {n: c for n, c in controls.items() if n not in ("prompt", "model", "seed", "randomize_seed")}

    def select_model(name, previous):
        try:
            pipe = registry.current().get(name)
        except PresetUnavailable as err:
            gr.Warning(str(err), title="Model unavailable")
            return (previous, *[gr.skip()] * len(preset_controls), registry.current().notice(previous), previous)
        values = registry.current().values(name)
        updates = [gr.update(value=values[n], **({"maximum": pipe.max_k} if n == "k" else {}))
                   for n in preset_controls]
        return (name, *updates, registry.current().notice(name), name)

    demo.load(lambda: secrets.token_hex(8), None, session, queue=False, api_visibility="private")
    if parts["api_max_k"] != parts["page_max_k"]:
        demo.load(lambda: gr.update(maximum=parts["page_max_k"]), None, controls["k"], queue=False,
                  api_visibility="private")
    controls["model"].select(select_model, [controls["model"], current_model],
                             [controls["model"], *preset_controls.values(), notice, current_model],
                             api_visibility="private", concurrency_id="load", concurrency_limit=1)
