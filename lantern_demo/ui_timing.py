"""Latency of the app as a client sees it: click -> first partial image -> final image.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 python -m lantern_demo.ui_timing [--preset emoji] [--repeats 5]

Starts the app as its own process (``python app.py`` on a free local port, the
preset chosen with LANTERN_PRESETS / LANTERN_DEFAULT_PRESET, the environment,
OMP_NUM_THREADS included, inherited), waits until it answers, and drives it from
this process with ``gradio_client``, so the client's work (receiving and
decoding frames) does not compete with the engine for the server's threads.
For each method it submits ``/generate`` with the page's opening controls (no
baseline) and records when the method's image is in hand as a browser gets it: the
first message carrying an image, then that one image fetched from its URL (first
image); the final message, then its image fetched (final image). The client does not
download the other pictures of a message (token map, explain map): a page fetches
those in parallel, and a client that downloads every file of a message before
handing it over would count them all (``first_message_s`` is the message alone).
With ``--browser`` the page itself is timed too: Debian's chromium (Playwright) opens
it, and for the page's default method the time from the click on Generate to the
method's first image loaded in the page is recorded (``browser``).
Also prints the server-side split: engine time (prefill to last
token), partial VQ decodes, the pipeline's streaming work between steps, frame
cost (building + Gradio sending) and the streaming overhead share
``(pipeline streaming + frames) / end-to-end`` (end-to-end: prompt encoding to final
image, inside the pipeline). Medians over ``--repeats`` runs (at least 5) after
one warm-up run per method; the table is printed and written to ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from gradio_client import Client

# the app's API names (imports gradio and torch here, before the server starts, so that
# the import does not overlap the server's start-up or the timed runs)
from .ui import INPUT_NAMES, OUTPUT_NAMES

ROOT = Path(__file__).resolve().parents[1]
#: Columns of the table: (JSON key, heading, format).
COLUMNS = (
    ("first_message_s", "click -> first image message (s)", ".3f"),
    ("first_image_s", "click -> first image (s)", ".3f"),
    ("final_image_s", "click -> final image (s)", ".3f"),
    ("engine_s", "engine (s)", ".3f"),
    ("nfe", "NFE", ".0f"),
    ("partial_decodes_s", "partial decodes (s)", ".3f"),
    ("decode_share", "decode share", ".1%"),
    ("stream_s", "pipeline streaming (s)", ".3f"),
    ("frames_s", "frames (s)", ".3f"),
    ("frames", "frames sent", ".0f"),
    ("stream_overhead", "streaming overhead", ".1%"),
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(preset: str | None, port: int, log_path: Path) -> subprocess.Popen:
    """``python app.py`` serving on 127.0.0.1:``port``, its output in ``log_path``."""
    env = {**os.environ, "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port),
           "GRADIO_ANALYTICS_ENABLED": "False"}
    if preset:
        env.update(LANTERN_PRESETS=preset, LANTERN_DEFAULT_PRESET=preset)
    with open(log_path, "wb") as log:
        return subprocess.Popen([sys.executable, str(ROOT / "app.py")], cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT)


def wait_until_up(proc: subprocess.Popen, url: str, log_path: Path, timeout: float) -> None:
    """Poll ``url`` until it answers. Raises RuntimeError with the server's log tail if the
    server exits first or ``timeout`` seconds pass."""
    deadline = time.perf_counter() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the app exited with code {proc.returncode} before answering; its log "
                               f"({log_path}):\n{log_path.read_text(errors='replace')[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except (urllib.error.URLError, OSError):
            pass
        if time.perf_counter() > deadline:
            raise RuntimeError(f"the app did not answer at {url} within {timeout:.0f} s (--start-timeout); its log "
                               f"({log_path}):\n{log_path.read_text(errors='replace')[-3000:]}")
        time.sleep(0.2)


def page_defaults(client) -> dict[str, Any]:
    """The /generate inputs as the page opens (the server's preset defaults), by parameter name."""
    api = client.view_api(print_info=False, return_format="dict")
    params = api["named_endpoints"]["/generate"]["parameters"]
    return {p["parameter_name"]: p["parameter_default"] for p in params if p.get("parameter_has_default")}


def _image_url(value: Any) -> str | None:
    """The URL of an image output as a client made with ``download_files=False`` receives it
    (a file-data dict), or None for an update without an image."""
    return value.get("url") if isinstance(value, dict) else None


def fetch(url: str) -> None:
    """GET ``url`` and read the whole body, as a page does to show an image."""
    with urllib.request.urlopen(url, timeout=30) as response:
        response.read()


def time_method(client, values: dict[str, Any], repeats: int) -> list[dict[str, float]]:
    """One warm-up run, then ``repeats`` timed runs of /generate with ``values`` (a row each).
    ``client``: a ``gradio_client.Client`` made with ``download_files=False``."""
    image_at, stats_at = OUTPUT_NAMES.index("image"), OUTPUT_NAMES.index("stats")
    rows = []
    for i in range(repeats + 1):
        t_click = time.perf_counter()
        job = client.submit(*[values[n] for n in INPUT_NAMES], api_name="/generate")
        message = first = None
        for out in job:
            url = _image_url(out[image_at])
            if first is None and url:
                message = time.perf_counter() - t_click
                fetch(url)
                first = time.perf_counter() - t_click
        final = job.result()
        fetch(_image_url(final[image_at]))
        t_final = time.perf_counter() - t_click
        main = final[stats_at]["main"]
        st = main["stats"]
        if i:  # the first run warms up
            rows.append({"first_message_s": message, "first_image_s": first, "final_image_s": t_final,
                         "engine_s": st["wall_time"],
                         "nfe": st["nfe"], "partial_decodes_s": st["decode_time"],
                         "decode_share": st["decode_time"] / st["end_to_end_time"], "stream_s": st["stream_time"],
                         "frames_s": st["ui_time"], "frames": main["frames"], "stream_overhead": st["stream_overhead"]})
    return rows


#: The browser test's chromium; its first image is the first ``load`` of an image in the method's output.
CHROMIUM = "/usr/bin/chromium"
_WATCH_LOADS = """() => {
  window.__loads = [];
  document.querySelector('#main-image').addEventListener('load', e => {
    if (e.target.tagName === 'IMG') window.__loads.push(performance.now()); }, true);
}"""
_CLICK = """() => { window.__loads = []; document.querySelector('#log textarea').value = '';
  const t = performance.now(); document.querySelector('#generate-btn').click(); return t; }"""
_DONE = "() => window.__loads.length > 0 && document.querySelector('#log textarea').value.includes('speed-up')"


def time_in_browser(url: str, prompt: str, repeats: int) -> list[float]:
    """Seconds from a click on Generate to the first image of the page's default method loaded in
    chromium, with the page's opening controls; one warm-up run, then ``repeats`` timed runs."""
    from playwright.sync_api import sync_playwright

    firsts = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1280, "height": 1300})
        page.set_default_timeout(120_000)
        page.goto(url)
        page.wait_for_selector("#prompt textarea")
        page.fill("#prompt textarea", prompt)
        page.evaluate(_WATCH_LOADS)
        for i in range(repeats + 1):
            t_click = page.evaluate(_CLICK)
            page.wait_for_function(_DONE, polling=50)
            if i:  # the first run warms up
                firsts.append((page.evaluate("() => window.__loads[0]") - t_click) / 1000)
        browser.close()
    return firsts


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default=None, help="preset to time (default: the app's default: emoji if present)")
    ap.add_argument("--methods", default=None,
                    help="comma-separated methods (default: the page's default method, then ar)")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per method (at least 5), after a warm-up")
    ap.add_argument("--prompt", default="red heart")
    ap.add_argument("--start-timeout", type=float, default=600.0, help="seconds to wait for the app to answer")
    ap.add_argument("--json", type=Path, default=ROOT / "artifacts" / "ui_timing.json")
    ap.add_argument("--browser", action="store_true",
                    help=f"also time the first image of the page's default method in {CHROMIUM} (Playwright)")
    args = ap.parse_args(argv)
    if args.repeats < 5:
        ap.error(f"--repeats must be at least 5 (medians of fewer runs are too noisy), got {args.repeats}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    log_path = args.json.with_suffix(".server.log")
    port = _free_port()
    url = f"http://127.0.0.1:{port}/"
    t0 = time.perf_counter()
    server = start_server(args.preset, port, log_path)
    try:
        wait_until_up(server, url, log_path, args.start_timeout)
        startup = time.perf_counter() - t0
        client = Client(url, verbose=False, download_files=False)
        defaults = page_defaults(client)
        model = defaults["model"]
        print(f"app (separate process) on {url}, preset {model}; start-up (spawn -> page answers: imports, "
              f"loading, building, launching) {startup:.1f} s; medians of {args.repeats} runs")
        print("| method | " + " | ".join(c[1] for c in COLUMNS) + " |")
        print("|---|" + "---|" * len(COLUMNS))
        result: dict[str, Any] = {"url": url, "preset": model, "prompt": args.prompt, "repeats": args.repeats,
                                  "startup_s": startup, "threads_env": os.environ.get("OMP_NUM_THREADS"), "methods": {}}
        methods = args.methods.split(",") if args.methods else list(dict.fromkeys([defaults["method"], "ar"]))
        for method in methods:
            values = {**defaults, "prompt": args.prompt, "method": method, "baseline": "none"}
            rows = time_method(client, values, args.repeats)
            med = {k: statistics.median(r[k] for r in rows) for k, _, _ in COLUMNS}
            result["methods"][method] = {"median": med, "runs": rows}
            print(f"| {method} | " + " | ".join(format(med[k], f) for k, _, f in COLUMNS) + " |")
        if args.browser:
            runs = time_in_browser(url, args.prompt, args.repeats)
            browser = {"method": defaults["method"], "first_image_s": statistics.median(runs), "runs": runs}
            result["browser"] = browser
            print(f"in {CHROMIUM}: click -> first image of {browser['method']} {browser['first_image_s']:.3f} s "
                  f"(median of {args.repeats})")
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
    args.json.write_text(json.dumps(result, indent=1))
    print(f"wrote {args.json}")
    return result


if __name__ == "__main__":
    main()
