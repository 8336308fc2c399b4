"""Retake the README's main screenshot: the app's default method and its baseline on one prompt.

``python docs/screenshots/take_main.py [--prompt P] [--seed S] [--out PATH]`` starts the app
(embedded model, its default method and baseline), runs the prompt once in Debian's chromium
(Playwright) at 1280 px wide, waits for both runs to finish and saves the top of the page
(images, token map, explain view). Pick a prompt and seed the model draws (look at the result).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from playwright.sync_api import sync_playwright  # noqa: E402

DONE = ("() => { const t = document.querySelector('#log textarea').value;"
        " return t.includes('speed-up'); }")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--prompt", default="grinning face with big eyes")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots" / "main.png")
    ap.add_argument("--height", type=int, default=1500, help="px of the page kept from the top")
    a = ap.parse_args()
    import app
    from lantern_demo.ui import launch_kwargs

    app.demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=7891, quiet=True,
                    **launch_kwargs())
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1280, "height": a.height})
            page.set_default_timeout(60_000)
            page.goto("http://127.0.0.1:7891/")
            page.wait_for_selector("#prompt textarea")
            page.fill("#prompt textarea", a.prompt)
            page.fill("#seed input", str(a.seed))
            page.click("#generate-btn")
            deadline = time.monotonic() + 120
            while not page.evaluate(DONE):
                if time.monotonic() > deadline:
                    raise TimeoutError("the run did not finish in 120 s")
                time.sleep(0.2)
            time.sleep(1.0)  # the last frame's pictures settle
            page.screenshot(path=str(a.out), full_page=False)
            browser.close()
    finally:
        app.demo.close()
    print(a.out)


if __name__ == "__main__":
    main()
