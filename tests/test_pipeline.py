"""The cached pipeline end to end on the tiny random preset (CPU), and its error paths."""


import pytest
import torch

from lantern_demo.methods import METHODS, DecodeConfig
from lantern_demo import pipeline
from lantern_demo.hub import PRESETS, Preset
from lantern_demo.pipeline import PresetUnavailable, load_pipeline, preset_status, tiny_random_pipeline
from lantern_demo.presets import ASSETS


@pytest.fixture(scope="module")
def pipe():
    return load_pipeline("tiny-random", "cpu")


@pytest.mark.parametrize("method", METHODS)
def test_every_method_end_to_end(pipe, method):
    config = DecodeConfig(method, k=8, depth=3, branching=3, tree_tokens=10)
    events = list(pipe.stream("a red cat", config, seed=1))
    final = events[-1]
    assert final.done and final.image is not None
    assert final.image.size == (64, 64)
    assert int(final.tokens.min()) >= 0 and (final.source >= 0).all()
    assert final.stats["tokens"] == 256 and final.stats["nfe"] == len(final.steps)
    assert sum(len(s.tokens) for s in final.steps) == 256
    assert len(events) >= 2 and events[0].image is not None  # a placeholder image right after prefill
    st = final.stats  # the pipeline's times: streaming work contains the partial decodes, all within e2e
    assert 0 < st["decode_time"] <= st["stream_time"]
    assert st["wall_time"] + st["stream_time"] + st["final_decode_time"] <= st["end_to_end_time"]


def test_loaded_once_and_deterministic(pipe):
    assert load_pipeline("tiny-random", "cpu") is pipe
    config = DecodeConfig("lantern", k=8, delta=0.3)
    a = pipe("a blue star", config, seed=3)
    b = pipe("a blue star", config, seed=3)
    assert torch.equal(a.tokens, b.tokens)
    assert a.image.tobytes() == b.image.tobytes()


def test_cancelled_run_leaves_pipeline_healthy(pipe):
    config = DecodeConfig("sd", gamma=3)
    reference = pipe("a green tree", config, seed=9).tokens
    stream = pipe.stream("a yellow sun", config, seed=2)
    for i, _ in enumerate(stream):
        if i == 3:
            break
    stream.close()  # what Gradio does on cancel
    assert torch.equal(pipe("a green tree", config, seed=9).tokens, reference)
    fresh = tiny_random_pipeline()  # a fresh process-equivalent pipeline gives the same image
    assert torch.equal(fresh("a green tree", config, seed=9).tokens, reference)


def test_prompt_notices(pipe):
    with pytest.raises(ValueError, match="enter a prompt"):
        pipe.encode_prompt("   ")
    _, notices = pipe.encode_prompt("a red zorblax cat")
    assert any("zorblax" in n for n in notices)
    _, notices = pipe.encode_prompt("red " * 3000)
    assert any("cut" in n for n in notices)


def test_gpu_preset_on_cpu_is_a_clear_error():
    status = preset_status(torch.device("cpu"))
    assert "needs a GPU" in status["llamagen-t2i"]
    with pytest.raises(PresetUnavailable, match="needs a GPU"):
        load_pipeline("llamagen-t2i", "cpu")


def test_a_preset_without_its_drafter_runs_the_drafter_free_methods(tmp_path, monkeypatch):
    local = tmp_path / "emoji"
    local.mkdir()
    for part in ("target", "vq", "text_encoder"):  # the embedded model, drafter left out
        (local / part).symlink_to(ASSETS / "emoji" / part)
    monkeypatch.setitem(PRESETS, "emoji-no-drafter", Preset(name="emoji-no-drafter", title="Emoji, no drafter",
                                                            resolution=64, grid=16, local_dir=str(local)))
    monkeypatch.setattr(pipeline, "_CACHE", {})  # leave no trace for other tests
    assert preset_status(torch.device("cpu"))["emoji-no-drafter"] is None
    pipe = load_pipeline("emoji-no-drafter", "cpu")
    assert pipe.drafter is None and "drafter" in pipe.drafter_missing
    for method in ("ar", "sjd", "sjd+lantern"):
        final = pipe("grinning face", DecodeConfig(method, window=8, k=16), seed=0)
        assert final.done and final.stats["tokens"] == 256
    with pytest.raises(PresetUnavailable, match="needs a drafter.*SJD"):
        pipe("grinning face", DecodeConfig("sd"), seed=0)
