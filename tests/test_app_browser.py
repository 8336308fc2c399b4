"""The app in a real browser: Playwright driving Debian's chromium (/usr/bin/chromium).

Type a prompt and press Generate, see the image update while it streams, see the
baseline comparison, move the delta slider and see a new run with the same seed,
press Stop. Screenshots go to test-artifacts/ (gitignored). Runs on the untrained
'tiny-random' preset (LANTERN_TEST_PRESET=emoji uses the embedded model instead).
Skipped only when /usr/bin/chromium (or the playwright package) is missing.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

PRESET = os.environ.get("LANTERN_TEST_PRESET", "tiny-random")
# the untrained preset (no weights needed) plus a GPU preset that is listed but unavailable on CPU;
# only the default is loaded (never a download). Both app test files set the same values.
os.environ["LANTERN_PRESETS"] = PRESET + ",llamagen-t2i"
os.environ["LANTERN_DEFAULT_PRESET"] = PRESET
os.environ["LANTERN_PRELOAD"] = "default"
os.environ["LANTERN_DEVICE"] = "cpu"
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pytest  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
if not os.path.exists(CHROMIUM):
    pytest.skip(f"{CHROMIUM} is missing (install Debian's chromium: apt-get install chromium)",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")

ARTIFACTS = ROOT / "test-artifacts"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]

# records every new src of the method's image, with the time it appeared
WATCH_IMAGE = """() => {
  window.__srcs = [];
  const root = document.querySelector('#main-image');
  const note = () => {
    const img = root.querySelector('img');
    const last = window.__srcs[window.__srcs.length - 1];
    if (img && img.src && (!last || last.src !== img.src)) window.__srcs.push({src: img.src, t: performance.now()});
  };
  new MutationObserver(note).observe(root, {subtree: true, childList: true, attributes: true,
                                            attributeFilter: ['src']});
  note();
}"""


@pytest.fixture(scope="module")
def page(server):
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        pg = browser.new_page(viewport={"width": 1400, "height": 1300})
        pg.set_default_timeout(60_000)
        external: list[str] = []
        pg.on("request", lambda r: external.append(r.url)
              if not r.url.startswith((server, "data:", "blob:")) else None)
        pg.goto(server + "/")
        for selector in ("#prompt textarea", "#main-image", "#log textarea", "#delta input[type=range]"):
            pg.wait_for_selector(selector)
        pg.evaluate(WATCH_IMAGE)
        pg.external = external  # type: ignore[attr-defined]
        yield pg
        browser.close()


def _srcs(page) -> list[dict]:
    return page.evaluate("() => window.__srcs")


def _wait_done(page, marker: str, timeout: float = 90.0) -> None:
    """Wait until the log (rewritten by every run) holds ``marker`` and the run's closing summary line."""
    page.wait_for_function(
        "m => { const t = document.querySelector('#log textarea').value;"
        " return t.includes(m) && t.includes('speed-up'); }",
        arg=marker, timeout=timeout * 1000)


def _log(page) -> str:
    return page.eval_on_selector("#log textarea", "e => e.value")


def test_generate_streams_then_compares_with_the_baseline(page):
    page.fill("#prompt textarea", "grinning face")
    t0 = time.perf_counter()
    page.click("#generate-btn")
    page.wait_for_function("() => window.__srcs.length >= 1")
    first_image_s = time.perf_counter() - t0
    page.wait_for_function("() => document.querySelector('#log textarea').value.includes('pass')")
    page.screenshot(path=str(ARTIFACTS / "app-streaming.png"), full_page=True)
    _wait_done(page, "seed 0")
    final_s = time.perf_counter() - t0
    page.wait_for_function("() => document.querySelectorAll('#compare img').length >= 2")
    page.wait_for_function("() => document.querySelector('#stats-table').innerText.includes('AR baseline')")
    page.screenshot(path=str(ARTIFACTS / "app-done.png"), full_page=True)
    page.locator("#compare").screenshot(path=str(ARTIFACTS / "compare.png"))
    print(f"\nbrowser: first image {first_image_s:.2f} s after the click, run + baseline done {final_s:.2f} s")

    srcs = _srcs(page)
    assert len(srcs) >= 3, f"the image should update at least twice before the final one, got {len(srcs)} images"
    table = page.inner_text("#stats-table")
    assert "LANTERN" in table and "AR baseline" in table and "speed-up" in table
    log = _log(page)
    assert "pass" in log and "speed-up" in log and "seed 0" in log
    for sel in ("#token-map img", "#baseline-image img", "#per-step", "#cumulative"):
        assert page.locator(sel).count() >= 1, sel
    assert "openmoji.org" in page.inner_html("#footer") and "2410.03355" in page.inner_html("#footer")
    assert page.external == [], f"the page reached outside the app: {page.external[:5]}"


def test_moving_delta_during_a_run_reruns_with_the_same_seed(page):
    srcs_before = len(_srcs(page))
    page.click("#generate-btn")  # a new run with seed 0 ...
    page.wait_for_function("() => document.querySelector('#log textarea').value.includes('prefill')")
    slider = page.locator("#delta input[type=range]")  # ... interrupted by moving delta
    slider.scroll_into_view_if_needed()  # an earlier element screenshot may have scrolled it away
    box = slider.bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.25, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.45, y, steps=4)
    page.mouse.move(box["x"] + box["width"] * 0.6, y, steps=4)
    page.mouse.up()
    value = float(page.input_value("#delta input[type=number]"))
    assert 0.5 <= value <= 0.7
    _wait_done(page, f"δ={value:g},")
    log = _log(page)
    assert "seed 0" in log and f"δ={value:g}" in log
    assert "reused from the previous run" in log  # same prompt/seed/settings: the AR baseline is not recomputed
    assert len(_srcs(page)) > srcs_before
    page.screenshot(path=str(ARTIFACTS / "app-after-delta.png"), full_page=True)


def test_unavailable_model_is_refused_and_the_current_one_stays(page):
    current = page.input_value("#model input")
    page.click("#model input")
    option = page.get_by_role("option", name="LlamaGen T2I XL, stage I (256 px) — unavailable", exact=False)
    assert option.count() == 1
    option.click()
    page.wait_for_selector("text=needs a GPU")  # the warning toast
    page.wait_for_function("v => document.querySelector('#model input').value === v", arg=current)


def test_stop_cancels_the_run(page):
    page.fill("#seed input", "5")
    page.click("#generate-btn")
    page.wait_for_function("() => document.querySelector('#log textarea').value.includes('seed 5')")
    page.click("#stop-btn")
    page.wait_for_function("() => document.querySelector('#log textarea').value.includes('stopped by the user')")
    time.sleep(3.0)  # a run that was not stopped would have finished by now
    log = _log(page)
    assert "speed-up" not in log, "the run went on after Stop"
    page.screenshot(path=str(ARTIFACTS / "app-stopped.png"), full_page=True)
    # the app is still healthy: a new run finishes
    page.click("#generate-btn")
    _wait_done(page, "seed 5")


def test_drafter_free_sjd_lantern_against_an_sjd_baseline(page):
    assert not page.locator("#jacobi").is_visible()
    page.locator("#method label", has_text="SJD+LANTERN").click()
    page.locator("#baseline label").get_by_text("SJD", exact=True).click()
    page.wait_for_selector("#jacobi", state="visible")
    page.locator("#jacobi").get_by_text("Jacobi window", exact=False).first.click()  # open the accordion
    page.wait_for_selector("#window input[type=range]", state="visible")
    assert page.locator("#coupled input").is_checked()
    page.fill("#prompt textarea", "red heart")
    page.click("#generate-btn")
    _wait_done(page, "SJD+LANTERN (δ=")
    log = _log(page)
    assert "window 16, vertical drafts, coupled redrafts" in log and "vs SJD baseline" in log
    table = page.inner_text("#stats-table")
    assert "SJD+LANTERN" in table and "SJD baseline" in table
    page.screenshot(path=str(ARTIFACTS / "app-sjd.png"), full_page=True)


NO_SIDEWAYS_SCROLL = """() => {
  const v = document.querySelector('#stats-table .virtual-table-viewport');
  return document.documentElement.scrollWidth <= window.innerWidth && v.scrollWidth <= v.clientWidth + 1;
}"""


def test_enter_in_the_delta_box_reruns(page):
    page.fill("#prompt textarea", "red heart")
    box = page.locator("#delta input[type=number]")
    box.fill("0.33")
    box.press("Enter")
    _wait_done(page, "δ=0.33,")


def test_a_bad_delta_is_named_after_a_method_switch_rebuilt_the_slider(page):
    # showing/hiding δ is a property update: Gradio rebuilds the slider for this session
    page.get_by_text("AR (plain, 1 token per pass)").click()
    page.wait_for_selector("#delta", state="hidden")
    page.get_by_text("LANTERN (relaxed, δ and k)").click()
    box = page.locator("#delta input[type=number]")
    box.fill("5")
    box.press("Enter")
    page.wait_for_selector("text=delta: Value 5 is greater than maximum value 1")
    box.fill("0.4")
    box.press("Tab")


def test_an_emoji_prompt_is_read_as_its_name_and_a_suggestion_fills_the_prompt(page):
    page.fill("#prompt textarea", "🚀")
    page.click("#generate-btn")
    page.wait_for_function("() => document.querySelector('#notice').innerText.includes('Read as “rocket”')")
    assert "did not recognise" in page.inner_text("#notice")  # the untrained model knows colours only
    _wait_done(page, "seed")
    page.fill("#prompt textarea", "gren")
    page.click("#generate-btn")
    page.wait_for_selector("#notice a[href='#try:green']")
    page.locator("#notice a[href='#try:green']").click()
    assert page.input_value("#prompt textarea") == "green"
    page.screenshot(path=str(ARTIFACTS / "app-suggestion.png"), full_page=True)


@pytest.mark.parametrize("width, height", [(390, 844), (1280, 800)])
def test_the_result_comes_into_view_and_the_table_fits(page, server, width, height):
    phone = page.context.browser.new_page(viewport={"width": width, "height": height})
    try:
        phone.goto(server + "/")
        phone.fill("#prompt textarea", "red heart")
        phone.click("#generate-btn")
        phone.wait_for_selector("#main-image img")
        time.sleep(1.0)  # the smooth scroll
        box = phone.locator("#main-image").bounding_box()  # relative to the viewport
        assert box["y"] < height and box["y"] + box["height"] > 0, box
        phone.screenshot(path=str(ARTIFACTS / f"app-{width}-running.png"))
        phone.wait_for_function("() => document.querySelector('#log textarea').value.includes('speed-up')")
        phone.click("#generate-btn")  # same settings: the baseline's row says "(reused)"
        phone.wait_for_function("() => document.querySelector('#stats-table').innerText.includes('(reused)')")
        assert phone.evaluate(NO_SIDEWAYS_SCROLL)
        phone.locator("#stats-table").screenshot(path=str(ARTIFACTS / f"app-{width}-table.png"))
    finally:
        phone.close()
