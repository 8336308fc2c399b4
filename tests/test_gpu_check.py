"""The prepared GPU check at reduced size on the CPU: it runs, and its JSON says what it must."""

import json

import pytest
import torch

from lantern_demo import gpu_check
from lantern_demo.methods import DRAFTER_FREE, METHODS


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check") / "check.json"
    gpu_check.main(["--reduced", "--device", "cpu", "--out", str(out)])
    return json.loads(out.read_text())


def test_greedy_speculative_equals_greedy_ar(report):
    g = report["greedy_check"]
    assert g["dtype"] == "float32" and g["all_equal"] is True
    assert set(g["methods"]) == set(METHODS) - {"ar"}
    assert all(m["equal"] and m["first_mismatch"] is None for m in g["methods"].values())
    assert any(m["accepted_drafts"] > 0 and m["nfe"] < g["ar_nfe"] for m in g["methods"].values())


def test_every_preset_runs_every_method(report):
    assert report["reduced"] is True and report["device"] == "cpu" and report["dtype"] == "float32"
    assert set(report["presets"]) == set(gpu_check.PRESETS)
    sides = []
    for name, p in report["presets"].items():
        assert set(p["methods"]) == set(METHODS)
        assert set(p["parameters"]) == {"target", "drafter", "t5_encoder", "vq_decoder"}
        assert p["peak_bytes"] is None and p["weights_bytes"] is None  # GPU memory: CUDA only
        for method, r in p["methods"].items():
            assert r["image_size"] == [p["resolution"]] * 2
            assert 1 <= r["nfe"] <= p["tokens"] and r["tokens_per_pass"] * r["nfe"] == pytest.approx(p["tokens"])
            assert r["target_pass_s"] > 0 and r["end_to_end_s"] >= r["engine_s"] > 0
            if method in DRAFTER_FREE:
                assert r["drafter_pass_s"] is None and r["drafter_passes"] == 0
            else:
                assert r["drafter_pass_s"] > 0 and r["drafter_passes"] > 0
        sides.append(p["resolution"])
    assert sides[1] == 2 * sides[0]  # 256 px and 512 px presets, scaled down alike
    est = report["estimates"]
    assert est["llamagen-t2i-512"]["kv_cache_bytes"] > est["llamagen-t2i"]["kv_cache_bytes"]


def test_zero_gpu_path_and_table(report):
    assert report["zero_gpu"]["decorator"] == ("spaces.GPU" if report["zero_gpu"]["spaces_installed"] else "no-op")
    text = gpu_check.table(report)
    assert "| llamagen-t2i-512 | sjd+lantern |" in text and "greedy speculative == greedy AR (float32): True" in text


def test_time_budget_skips_the_remaining_runs():
    p = gpu_check.check_preset("llamagen-t2i", torch.device("cpu"), torch.float32, reduced=True, deadline=0.0)
    assert p["methods"] == {m: {"skipped": "time budget spent"} for m in METHODS}


def test_methods_run_with_the_pages_settings_for_the_preset():
    from lantern_demo.presets import controls

    d = controls("llamagen-t2i-512")
    c = gpu_check.method_config("llamagen-t2i-512", "sjd+lantern", max_k=1000)
    assert (c.delta, c.k, c.coupled, c.window, c.init) == (d["delta"], d["k"], d["coupled"], d["window"], d["init"])
    assert (c.sampling.top_k, c.sampling.cfg_scale) == (d["top_k"], d["cfg_scale"])
    e = gpu_check.method_config("llamagen-t2i-512", "eagle", max_k=1000)
    assert (e.shape, e.depth, e.branching, e.tree_tokens) == ("tree", d["depth"], d["branching"], d["tree_tokens"])
