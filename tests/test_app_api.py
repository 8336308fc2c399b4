"""The app through its public API: launched in-process, driven with gradio_client.

Runs on the untrained 'tiny-random' preset (selected with LANTERN_PRESETS /
LANTERN_DEFAULT_PRESET before ``app`` is imported), so it needs no trained weights
and no network.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from pathlib import Path

# the untrained preset (no weights needed) plus a GPU preset that is listed but unavailable on CPU;
# only the default is loaded (never a download). Both app test files set the same values.
os.environ["LANTERN_PRESETS"] = "tiny-random,llamagen-t2i"
os.environ["LANTERN_DEFAULT_PRESET"] = "tiny-random"
os.environ["LANTERN_PRELOAD"] = "default"
os.environ["LANTERN_DEVICE"] = "cpu"
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gradio as gr  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from bad_inputs import BAD_INPUTS, DOC, markdown, message_of  # noqa: E402
from gradio_client import Client  # noqa: E402
from gradio_client.exceptions import AppError  # noqa: E402

from lantern_demo.methods import DecodeConfig  # noqa: E402
from lantern_demo.pipeline import load_pipeline  # noqa: E402
from lantern_demo.sampling import SamplingConfig  # noqa: E402
from lantern_demo.methods import DEFAULT_DRAFT  # noqa: E402
from lantern_demo.ui import INPUT_NAMES, OUTPUT_NAMES  # noqa: E402

# small drafting shapes keep every run around a second on 2 CPU cores
BASE = dict(prompt="a red cat", model="tiny-random", method="lantern", baseline="ar", seed=3, randomize_seed=False,
            delta=0.25, lam=2.0, k=16, draft="auto", gamma=4, confidence=0.0, depth=3, branching=3, tree_tokens=10,
            temperature=1.0, top_k=0, top_p=1.0, cfg_scale=3.0, window=8, init="vertical", coupled=True)
OUT = {name: i for i, name in enumerate(OUTPUT_NAMES)}


@pytest.fixture(scope="module")
def client(server):
    return Client(server + "/", verbose=False)


def _args(**overrides):
    values = {**BASE, **overrides}
    return [values[name] for name in INPUT_NAMES]


def predict(client, **overrides):
    """A /generate request with ``BASE`` and ``overrides``; its final outputs."""
    return client.predict(*_args(**overrides), api_name="/generate")


def _is_update(value) -> bool:
    return isinstance(value, dict) and value.get("__type__") == "update"


def _reference(**overrides):
    """The same generation run directly on the cached pipeline (what the engine says)."""
    v = {**BASE, **overrides}
    cfg = DecodeConfig(v["method"], draft=DEFAULT_DRAFT.get(v["method"]), gamma=v["gamma"],
                       confidence=v["confidence"], depth=v["depth"],
                       branching=v["branching"], tree_tokens=v["tree_tokens"], delta=v["delta"], k=v["k"], lam=v["lam"],
                       window=v["window"], init=v["init"], coupled=v["coupled"], sampling=SamplingConfig(v["cfg_scale"], v["temperature"], v["top_k"], v["top_p"]))
    return load_pipeline("tiny-random", "cpu")(v["prompt"], cfg, seed=v["seed"])


def test_api_is_documented(client):
    info = client.view_api(return_format="dict", print_info=False)
    endpoints = info["named_endpoints"]
    assert list(endpoints) == ["/generate"]  # the slider re-run and model switch handlers are private
    names = [p["parameter_name"] for p in endpoints["/generate"]["parameters"]]
    assert names == list(INPUT_NAMES)
    assert len(endpoints["/generate"]["returns"]) == len(OUTPUT_NAMES)


def test_generate_streams_and_final_stats_match_the_engine(client):
    job = client.submit(*_args(), api_name="/generate")
    final = job.result(timeout=120)
    outputs = job.outputs()
    # intermediate messages: the image updates several times before the final one
    images = [o[OUT["image"]] for o in outputs[:-1] if isinstance(o[OUT["image"]], str)]
    assert len(images) >= 2, f"expected several partial images, got {len(images)} in {len(outputs)} messages"
    assert any(_is_update(o[OUT["compare"]]) for o in outputs[1:-1])  # compare appears only at the end

    stats = final[OUT["stats"]]
    main, base = stats["main"], stats["baseline"]
    assert sum(main["accepted_per_step"]) == 256 and main["stats"]["tokens"] == 256
    assert len(main["accepted_per_step"]) == main["stats"]["nfe"]
    assert base["method"] == "ar" and base["stats"]["nfe"] == 256 and sum(base["accepted_per_step"]) == 256
    assert main["stats"]["mean_accepted"] == pytest.approx(256 / main["stats"]["nfe"])
    assert stats["speedup"] == pytest.approx(base["stats"]["wall_time"] / main["stats"]["wall_time"])
    assert 0.0 < main["stats"]["mean_tvd"] <= BASE["delta"] + 1e-6

    ref = _reference()
    assert main["tokens"] == ref.tokens.tolist()
    assert main["stats"]["nfe"] == ref.stats["nfe"]
    assert main["accepted_per_step"] == [len(s.tokens) for s in ref.steps]

    # every output is complete in the last message (predict() returns it)
    for name in ("image", "baseline_image", "token_map", "log", "seed", "notice"):
        assert not _is_update(final[OUT[name]]), name
    assert Path(final[OUT["image"]]).is_file() and Path(final[OUT["baseline_image"]]).is_file()
    assert len(final[OUT["compare"]]) == 2
    table = final[OUT["table"]]
    assert [row[0] for row in table["data"]] == ["LANTERN", "AR baseline"]
    assert table["data"][0][2] == main["stats"]["nfe"] and table["data"][1][2] == 256
    assert table["data"][0][4] == f"{stats['speedup']:.2f}x"
    assert "Untrained model" in final[OUT["notice"]]


def test_same_seed_same_image(client):
    a = client.predict(*_args(seed=11, baseline="none"), api_name="/generate")
    b = client.predict(*_args(seed=11, baseline="none"), api_name="/generate")
    assert Path(a[OUT["image"]]).read_bytes() == Path(b[OUT["image"]]).read_bytes()
    assert a[OUT["stats"]]["main"]["tokens"] == b[OUT["stats"]]["main"]["tokens"]
    assert a[OUT["stats"]]["baseline"] is None
    c = client.predict(*_args(seed=12, baseline="none"), api_name="/generate")
    assert c[OUT["stats"]]["main"]["tokens"] != a[OUT["stats"]]["main"]["tokens"]


def test_keyword_call_with_defaults_and_randomised_seed(client):
    # the README's form: keywords, everything else at the page's defaults
    out = client.predict(prompt="a red cat", method="sd", baseline="none", randomize_seed=True,
                         api_name="/generate")
    assert out[OUT["seed"]] == out[OUT["stats"]]["seed"]
    assert out[OUT["stats"]]["model"] == "tiny-random" and out[OUT["stats"]]["main"]["draft"] == "chain"


def test_the_label_log_and_stats_state_the_shape_that_runs_and_how_the_prompt_was_read(client):
    job = client.submit(*_args(prompt="🚀", method="eagle", draft="chain", baseline="sd"), api_name="/generate")
    final = job.result(timeout=120)
    stats = final[OUT["stats"]]
    assert (stats["main"]["draft"], stats["baseline"]["draft"]) == ("tree", "chain")
    assert stats["main"]["shape"] == "dynamic tree depth 3, top-3, 10 tokens"
    assert "EAGLE-2 (dynamic tree depth 3, top-3, 10 tokens; T=1" in final[OUT["log"]]
    labels = [o[OUT["image"]].get("label") for o in job.outputs() if _is_update(o[OUT["image"]])]
    assert "EAGLE-2 · dynamic tree, 10 tokens" in labels
    reading = stats["prompt_reading"]
    assert reading["read_as"] == "rocket" and reading["nothing_matched"] and reading["unknown_words"] == ["rocket"]
    assert "rocket" in final[OUT["notice"]] and "did not recognise" in final[OUT["notice"]]
    suggested = predict(client, prompt="gren", method="sd", baseline="none")
    assert suggested[OUT["stats"]]["prompt_reading"]["suggestions"] == ["green"]
    assert "[green](#try:green)" in suggested[OUT["notice"]]


@pytest.mark.parametrize("overrides, message", [
    (dict(prompt="   "), "enter a prompt"),
    (dict(delta=1.5), "delta: Value 1.5 is greater than maximum value 1"),
    (dict(lam=0.5), "lam: Value 0.5 is less than minimum value 1"),
    (dict(k=0), "k: Value 0 is less than minimum value 1"),
    (dict(top_p=0.0), "top_p: Value 0.0 is less than minimum value 0.01"),
    (dict(gamma=2.5, method="sd"), "gamma must be a whole number"),
    (dict(method="nope"), "not in the list of choices"),
    (dict(model="llamagen-t2i"), "unavailable here: needs a GPU"),
    (dict(model="nope"), "not in the list of choices"),
    (dict(method="sjd", window=0), "window: Value 0 is less than minimum value 1"),
    (dict(method="sjd", init="diagonal"), "not in the list of choices"),
])
def test_bad_inputs_give_clear_errors(client, overrides, message):
    with pytest.raises(AppError, match=message):
        client.predict(*_args(**overrides), api_name="/generate")


def test_every_bad_input_is_refused_by_name_in_one_log_line_and_the_app_goes_on(client, capfd, caplog):
    messages = [message_of(lambda o: predict(client, **o), o) for _, _, o in BAD_INPUTS]
    for (_, name, overrides), message in zip(BAD_INPUTS, messages):
        assert message is not None, f"{overrides} was accepted"
        assert re.search(rf"(^|\W){re.escape(name)}\W", message), (name, message)
        assert "verbose error reporting" not in message
    assert "Traceback" not in capfd.readouterr().err
    refused = [r for r in caplog.records if r.getMessage().startswith("refused a request")]
    assert len(refused) == len(BAD_INPUTS) and all("\n" not in r.getMessage() for r in refused)
    assert DOC.read_text(encoding="utf-8") == markdown(messages), "docs/bad_inputs.md is out of date: " \
                                                                   "run python tests/bad_inputs.py"
    out = predict(client, seed=41, baseline="none")  # a normal request still works
    assert out[OUT["stats"]]["main"]["tokens"] == _reference(seed=41).tokens.tolist()


def test_seed_is_refused_like_every_other_count():
    from lantern_demo import ui

    for seed, message in ((1.5, "seed must be a whole number, got 1.5"), ("abc", "seed must be a number")):
        with pytest.raises(gr.Error, match=message):
            ui.build_request(dict(zip(INPUT_NAMES, _args(seed=seed))))
    assert ui.build_request(dict(zip(INPUT_NAMES, _args(seed=7.0)))).seed == 7


def test_drafter_free_methods_through_the_api(client):
    out = client.predict(*_args(method="sjd+lantern", baseline="sjd", init="left", window=6), api_name="/generate")
    stats = out[OUT["stats"]]
    main, base = stats["main"], stats["baseline"]
    assert (main["method"], main["draft"], base["method"], base["draft"]) == ("sjd+lantern", "window", "sjd", "window")
    assert main["stats"]["drafter_passes"] == 0 and main["stats"]["drafted"] > 0
    assert main["tokens"] == _reference(method="sjd+lantern", init="left", window=6).tokens.tolist()
    assert base["tokens"] == _reference(method="sjd", init="left", window=6).tokens.tolist()
    assert base["stats"]["mean_tvd"] == 0.0 and 0.0 < main["stats"]["mean_tvd"] <= BASE["delta"] + 1e-6
    assert [row[0] for row in out[OUT["table"]]["data"]] == ["SJD+LANTERN", "SJD baseline"]
    assert "window 6, left drafts, coupled redrafts" in out[OUT["log"]]


def test_notices_for_unknown_words_and_long_prompts(client):
    out = client.predict(*_args(prompt="a red zorblax cat " + "star " * 600, method="sd", baseline="none"),
                         api_name="/generate")
    notices = out[OUT["stats"]]["notices"]
    assert any("zorblax" in n for n in notices) and any("cut" in n for n in notices)
    assert "zorblax" in out[OUT["notice"]]


def test_two_concurrent_clients_both_finish_correctly(server):
    results = {}

    def run(seed):
        c = Client(server + "/", verbose=False)
        results[seed] = c.predict(*_args(seed=seed, method="sd", baseline="ar"), api_name="/generate")

    threads = [threading.Thread(target=run, args=(s,)) for s in (21, 22)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    assert set(results) == {21, 22}
    for seed, out in results.items():
        stats = out[OUT["stats"]]
        assert stats["seed"] == seed
        assert stats["main"]["tokens"] == _reference(seed=seed, method="sd").tokens.tolist()
        assert sum(stats["main"]["accepted_per_step"]) == 256 and stats["baseline"]["stats"]["nfe"] == 256


def test_runs_queue_one_at_a_time_with_the_configured_waiting_room(server):
    import app

    queue = app.demo._queue  # Gradio's queue as app.py configured it (LANTERN_QUEUE_SIZE, default 16)
    assert queue.max_size == int(os.environ.get("LANTERN_QUEUE_SIZE", "16"))
    generate = [fn for fn in app.demo.fns.values() if fn.api_name == "generate"]
    assert len(generate) == 1
    limit = generate[0].concurrency_limit
    assert (queue.default_concurrency_limit if limit == "default" else limit) == 1


def test_cancelled_run_leaves_the_app_healthy(client):
    expected = client.predict(*_args(seed=31, baseline="none"), api_name="/generate")
    job = client.submit(*_args(seed=32, method="eagle", depth=5, branching=6, tree_tokens=40),
                        api_name="/generate")
    deadline = time.time() + 60
    while len(job.outputs()) < 2 and time.time() < deadline:
        time.sleep(0.02)
    job.cancel()
    again = client.predict(*_args(seed=31, baseline="none"), api_name="/generate")
    assert again[OUT["stats"]]["main"]["tokens"] == expected[OUT["stats"]]["main"]["tokens"]
    assert Path(again[OUT["image"]]).read_bytes() == Path(expected[OUT["image"]]).read_bytes()
    assert torch.equal(torch.tensor(again[OUT["stats"]]["main"]["tokens"]), _reference(seed=31).tokens)


def test_spaces_decorator_is_a_no_op_off_spaces():
    from lantern_demo import spaces_compat

    if spaces_compat.HAVE_SPACES:
        pytest.skip("the `spaces` package is installed here")

    def f(x):
        return x + 1

    assert spaces_compat.GPU(f) is f
    assert spaces_compat.GPU(duration=30)(f) is f
    assert spaces_compat.GPU()(f) is f


def test_a_preset_that_fails_to_load_leaves_the_embedded_fallback_usable(tmp_path):
    from lantern_demo.hub import PRESETS, Preset, register_preset
    from lantern_demo.pipeline import PresetUnavailable
    from lantern_demo.ui import load_models

    for part in ("target", "drafter", "vq", "text_encoder"):  # present but corrupt
        (tmp_path / part).mkdir()
        (tmp_path / part / "config.json").write_text("{not json")
    register_preset(Preset(name="broken-test", title="Broken", resolution=64, grid=16, local_dir=str(tmp_path)))
    try:
        models = load_models({"LANTERN_PRESETS": "broken-test,tiny-random", "LANTERN_DEFAULT_PRESET": "broken-test",
                              "LANTERN_DEVICE": "cpu"})
        assert models.default == "tiny-random" and "tiny-random" in models.pipelines
        assert models.status["broken-test"].startswith("failed to load")
        assert any("could not be loaded" in note for note in models.startup_notes)
        with pytest.raises(PresetUnavailable, match="unavailable here"):
            models.get("broken-test")
        assert "unavailable" in dict((v, k) for k, v in models.choices())["broken-test"]
    finally:
        PRESETS.pop("broken-test", None)


def test_a_model_without_its_drafter_offers_the_drafter_free_methods(monkeypatch):
    import gradio as gr

    from lantern_demo import ui
    from lantern_demo.pipeline import tiny_random_pipeline
    from lantern_demo.ui import models as registry

    pipe = tiny_random_pipeline()
    pipe.drafter, pipe.drafter_missing = None, "the drafter weights are missing (test)"
    models = ui.Models(["no-drafter"], {"no-drafter": None}, {"no-drafter": pipe}, "no-drafter", torch.device("cpu"))
    monkeypatch.setattr(registry, "_MODELS", models)
    values = models.values("no-drafter")
    assert (values["method"], values["baseline"]) == ("sjd+lantern", "sjd")
    assert "No drafter here" in models.notice("no-drafter") and "missing (test)" in models.notice("no-drafter")
    for method, baseline in (("lantern", "none"), ("sjd+lantern", "sd")):
        with pytest.raises(gr.Error, match="needs a drafter.*missing \\(test\\).*Choose AR, SJD or SJD\\+LANTERN"):
            ui.build_request(dict(zip(INPUT_NAMES, _args(model="no-drafter", method=method, baseline=baseline))))
    req = ui.build_request(dict(zip(INPUT_NAMES, _args(model="no-drafter", method="sjd+lantern", baseline="sjd"))))
    assert req.config.shape == req.baseline.shape == "window" and req.config.coupled
