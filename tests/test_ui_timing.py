"""lantern_demo.ui_timing drives the app in a separate server process (a smoke run on tiny-random)."""

import importlib.util
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from lantern_demo.ui_timing import CHROMIUM

ROOT = Path(__file__).resolve().parents[1]


#: The page is timed in chromium too where the browser tests can run (CI installs it).
BROWSER = os.path.exists(CHROMIUM) and importlib.util.find_spec("playwright") is not None


def test_ui_timing_times_a_separate_server_process(tmp_path):
    out = tmp_path / "ui.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "lantern_demo.ui_timing", "--preset", "tiny-random", "--methods", "ar",
           "--repeats", "5", "--json", str(out)] + ["--browser"] * BROWSER
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "app (separate process)" in proc.stdout and "| ar |" in proc.stdout
    res = json.loads(out.read_text())
    assert res["preset"] == "tiny-random" and res["repeats"] == 5
    runs = res["methods"]["ar"]["runs"]
    assert len(runs) == 5 and all(r["nfe"] == 256 for r in runs)
    assert all(0 < r["first_message_s"] <= r["first_image_s"] <= r["final_image_s"] and r["engine_s"] < r["final_image_s"] for r in runs)
    if BROWSER:  # the page's default method, clicked in chromium: its first image loaded in the page
        browser = res["browser"]
        assert browser["method"] == "lantern" and len(browser["runs"]) == 5
        assert all(0 < t < 60 for t in browser["runs"]) and "click -> first image of lantern" in proc.stdout
    # the server was its own process, and it was stopped: nothing answers at its address any more
    assert out.with_suffix(".server.log").exists()
    with pytest.raises(OSError):
        urllib.request.urlopen(res["url"], timeout=5)


def test_ui_timing_rejects_too_few_repeats():
    from lantern_demo.ui_timing import main

    with pytest.raises(SystemExit):
        main(["--repeats", "3"])
