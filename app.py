"""LANTERN demo: the Gradio app (``python app.py``; also the Hugging Face Space entry point).

Models are loaded here, at import (ZeroGPU style), before the page is built:
the embedded ``emoji`` model when its weights are in ``assets/emoji``, else the
untrained ``tiny-random`` model with a notice. Environment variables
(LANTERN_PRESETS, LANTERN_DEFAULT_PRESET, LANTERN_PRELOAD, LANTERN_DEVICE, ...)
are described in ``lantern_demo/ui/__init__.py`` and Spaces.md.
"""

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # nothing leaves the machine at start-up

from lantern_demo import spaces_compat  # noqa: E402,F401  (imports `spaces`, if present, before torch)
from lantern_demo.ui import create_app, launch_kwargs  # noqa: E402

demo, models = create_app()

if __name__ == "__main__":
    models.compile()  # the one-token pass on a CPU: some seconds, so at launch rather than at import
    demo.launch(**launch_kwargs())
