"""The explain view in a real browser: it appears beside the token map and updates while a run streams.

Uses the app, the browser and the page set-up of ``test_app_browser`` (same preset, same
skip when chromium is missing); screenshots go to test-artifacts/.
"""

from __future__ import annotations

import time

from test_app_browser import ARTIFACTS, page  # noqa: F401  (page: the fixture)

DONE = ("() => { const t = document.querySelector('#log textarea').value;"
        " return t.includes('seed 1') && t.includes('speed-up'); }")
EXPLAIN_SRC = "() => { const img = document.querySelector('#explain-map img'); return img ? img.src : null; }"


def test_explain_view_appears_and_updates_while_streaming(page):  # noqa: F811
    assert page.locator("#explain-map").is_visible()
    page.fill("#prompt textarea", "red heart")
    page.fill("#seed input", "1")
    page.click("#generate-btn")
    srcs: list[str] = []  # each new picture of the explain map, until the run and its baseline are done
    deadline = time.monotonic() + 90
    while not page.evaluate(DONE):
        assert time.monotonic() < deadline, "the run did not finish"
        src = page.evaluate(EXPLAIN_SRC)
        if src and (not srcs or srcs[-1] != src):
            srcs.append(src)
        time.sleep(0.05)
    assert len(srcs) >= 3, f"the explain map should update while streaming, got {len(srcs)} pictures"
    table = page.inner_text("#stats-table")
    assert "relaxed-only %" in table and "mean top-1" in table
    page.locator("#explain-map").screenshot(path=str(ARTIFACTS / "explain-map-tiny.png"))
