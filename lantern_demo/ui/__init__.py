"""The Gradio app: streaming generation, per-step accepted tokens, live relaxation sliders, baseline.

``create_app()`` loads the presets at start-up (ZeroGPU style: at import, before
any request, ``models.load_models``), builds the page (``page.build_demo``) and
queues it; ``launch_kwargs()`` gives what Gradio 6 wants at ``launch()`` (theme,
CSS). ``app.py`` calls both. The parts: ``models`` (the model registry),
``request`` (one request from the endpoint's inputs by name; cancelling),
``stream`` (the handlers: streaming the method and the baseline), ``page``
(layout and events), ``plots`` (pictures, chart data, tables and log lines).

Environment (read by ``load_models``, and ``Models.compile``):
- ``LANTERN_PRESETS``: comma-separated presets offered in the model selector
  (default: every registered preset, unavailable ones listed with the reason);
- ``LANTERN_DEFAULT_PRESET``: the preset selected at start (default: the embedded
  ``emoji`` model when its weights exist, else the first offered preset that can
  run, else ``tiny-random``);
- ``LANTERN_PRELOAD``: ``all`` (default: load every available offered preset at
  start-up) or ``default`` (only the default; others on first use);
- ``LANTERN_DEVICE``: ``cpu`` / ``cuda`` (default: CUDA when available);
- ``LANTERN_COMPILE``: ``0`` keeps the eager one-token pass (default ``1``: on a CPU,
  ``app.py`` compiles it at launch, ``Models.compile``);
- ``LANTERN_QUEUE_SIZE`` (default 16), ``LANTERN_GPU_DURATION`` (seconds asked of
  ZeroGPU per generation, default 90).

The public API endpoint is ``/generate`` (see README "Using the API"): its
inputs are the controls in ``INPUT_NAMES`` order and it streams the outputs in
``OUTPUT_NAMES`` order; the last output, ``stats``, is a JSON summary of both runs.
"""

from __future__ import annotations

from ..spaces_compat import GPU  # noqa: F401,I001  (imports `spaces`, if present, before torch)

import os

import gradio as gr

from .models import Models, load_models
from .page import EXAMPLES, build_demo, launch_kwargs
from .request import INPUT_NAMES, OUTPUT_NAMES, build_request
from .stream import generate

__all__ = ["EXAMPLES", "INPUT_NAMES", "OUTPUT_NAMES", "Models", "build_demo", "build_request", "create_app",
           "generate", "launch_kwargs", "load_models"]


def create_app(env: dict[str, str] | None = None) -> tuple[gr.Blocks, Models]:
    """Load the models (start-up) and build the queued app."""
    models = load_models(env)
    demo = build_demo(models)
    demo.queue(max_size=int(os.environ.get("LANTERN_QUEUE_SIZE", "16")), default_concurrency_limit=1)
    return demo, models
