"""Latency of the app as a client sees it: click -> first partial image -> final image.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 python -m lantern_demo.ui_timing [--preset emoji] [--repeats 3]

Launches the app in-process (``app.create_app`` path, the preset chosen with
LANTERN_PRESETS / LANTERN_DEFAULT_PRESET), then submits ``/generate`` through
``gradio_client`` for each method (no baseline, so each number is one run) and
records when the first message carrying an image and the final message arrive.
Also prints the server-side split: engine time (prefill to last token), partial
VQ decodes, frame cost (building + Gradio sending) and the streaming overhead
share ``(partial decodes + frames) / end-to-end`` (end-to-end: prompt encoding to final
image, inside the pipeline). Medians over ``--repeats``
runs after one warm-up run per method.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default=None, help="preset to time (default: the app's default: emoji if present)")
    ap.add_argument("--methods", default="lantern,ar", help="comma-separated methods")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompt", default="red heart")
    args = ap.parse_args(argv)
    if args.preset:
        os.environ["LANTERN_PRESETS"] = args.preset
        os.environ["LANTERN_DEFAULT_PRESET"] = args.preset
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

    from gradio_client import Client

    from .ui import INPUT_NAMES, OUTPUT_NAMES, create_app, launch_kwargs, preset_values

    t0 = time.perf_counter()
    demo, models = create_app()
    startup = time.perf_counter() - t0
    port = _free_port()
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True, **launch_kwargs())
    client = Client(f"http://127.0.0.1:{port}/", verbose=False)
    image_at = OUTPUT_NAMES.index("image")
    stats_at = OUTPUT_NAMES.index("stats")
    print(f"preset {models.default} on {models.device}; start-up (import excluded: load + build) {startup:.1f} s")
    print("| method | click -> first image (s) | click -> final image (s) | engine (s) | NFE | partial decodes (s)"
          " | decode share | frames (s) | frames sent | streaming overhead |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    try:
        for method in args.methods.split(","):
            # the controls as the page opens for this preset (its defaults), then the method
            values = {**preset_values(models.default), "prompt": args.prompt, "model": models.default,
                      "method": method, "baseline": "none"}
            rows = []
            for i in range(args.repeats + 1):
                t_click = time.perf_counter()
                job = client.submit(*[values[n] for n in INPUT_NAMES], api_name="/generate")
                first = None
                for out in job:
                    if first is None and isinstance(out[image_at], str):
                        first = time.perf_counter() - t_click
                final = job.result()
                t_final = time.perf_counter() - t_click
                s = final[stats_at]["main"]
                if i:  # the first run warms up
                    st = s["stats"]
                    rows.append((first, t_final, st["wall_time"], st["nfe"], st["decode_time"],
                                 st["decode_time"] / st["end_to_end_time"], st["ui_time"], s["frames"],
                                 st["stream_overhead"]))
            med = [statistics.median(col) for col in zip(*rows)]
            print(f"| {method} | {med[0]:.3f} | {med[1]:.3f} | {med[2]:.3f} | {med[3]:.0f} | {med[4]:.3f} "
                  f"| {med[5]:.1%} | {med[6]:.3f} | {med[7]:.0f} | {med[8]:.1%} |")
    finally:
        demo.close()


if __name__ == "__main__":
    main()
