"""The compiled one-token pass (``lantern_demo.compiled_pass``) computes what the eager pass computes.

Once ``GPT.compile_one_token()`` is on, it replaces the eager pass for every pass of one token
per row. So: over a whole sequence its logits and hidden states follow the eager pass's within
float rounding (its cache written in place, padded caption keys hidden, a position past the
image on the zero rotary row); greedy and sampled AR give the same tokens; greedy speculative
decoding with the compiled target still equals greedy AR token for token; and where it cannot
compile, the pipeline keeps decoding eagerly.
"""

from dataclasses import replace

import pytest
import torch

import lantern_demo.gpt as gpt_module
from lantern_demo.engine import generate
from lantern_demo.gpt import Caption
from lantern_demo.methods import DecodeConfig
from lantern_demo.pipeline import tiny_random_pipeline
from lantern_demo.sampling import SamplingConfig
from lantern_demo.tiny import tiny_random_pair
from lantern_demo.ui.models import load_models

GREEDY = SamplingConfig(cfg_scale=3.0, temperature=0.0)
SAMPLED = SamplingConfig(cfg_scale=3.0, temperature=1.0, top_k=64)


@pytest.fixture(scope="module")
def pair():
    target, drafter, cond = tiny_random_pair(seed=0, grid=8)
    yield target, drafter, cond
    target.compile_one_token(False)


def _passes(target, cond, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits [n + 1, rows, V] and hidden states of one-token passes over positions 0 .. n (n is past the image)."""
    n = target.cfg.grid**2
    tokens = torch.randint(0, target.cfg.vocab_size, (n + 1,), generator=torch.Generator().manual_seed(1))
    logits, hidden = [], []
    with torch.inference_mode():
        target.prefill(cond, rows, n + 1)
        for t in range(n + 1):
            lg, h = target.forward(tokens[t:t + 1], torch.tensor([t]))
            logits.append(lg[:, 0])
            hidden.append(h[:, 0])
    return torch.stack(logits), torch.stack(hidden)


def test_one_token_passes_follow_the_eager_pass(pair):
    target, _, cond = pair
    mask = torch.tensor([False, False, True, True, False, True, True, True])  # padded caption keys
    caption = Caption(cond * mask[:, None], mask)
    target.compile_one_token(False)
    eager = [_passes(target, caption, 2), _passes(target, cond, 1)]
    assert target.compile_one_token()
    compiled = [_passes(target, caption, 2), _passes(target, cond, 1)]
    for (lg_e, h_e), (lg_c, h_c) in zip(eager, compiled):
        assert lg_c.shape == lg_e.shape and lg_c.dtype == torch.float32
        assert (lg_c - lg_e).abs().max() < 1e-4
        assert (h_c - h_e).abs().max() < 1e-4
        assert not torch.equal(lg_c[1], lg_c[2])  # the passes differ: the cache is read


def test_decoding_with_the_compiled_pass_gives_the_same_tokens(pair):
    target, drafter, cond = pair
    n = target.cfg.grid**2
    target.compile_one_token(False)
    eager = [generate(target, None, cond, DecodeConfig("ar", sampling=s), n, seed=3).tokens for s in (GREEDY, SAMPLED)]
    target.compile_one_token()
    compiled = [generate(target, None, cond, DecodeConfig("ar", sampling=s), n, seed=3).tokens for s in (GREEDY, SAMPLED)]
    assert [t.tolist() for t in compiled] == [t.tolist() for t in eager]
    sd = generate(target, drafter, cond, replace(DecodeConfig("sd", gamma=4), sampling=GREEDY), n)
    assert sd.tokens.tolist() == eager[0].tolist()
    assert sd.stats["nfe"] < n


def test_only_a_float32_cpu_target_compiles():
    target, _, _ = tiny_random_pair(seed=1, grid=4)
    assert not target.to(torch.bfloat16).compile_one_token()
    assert not target.one_token_compiled


def test_pipeline_compiles_at_launch_and_stays_eager_where_it_cannot(monkeypatch):
    pipe = tiny_random_pipeline(grid=4)
    config = DecodeConfig("ar", sampling=GREEDY)
    eager = pipe("red", config).tokens

    def no_compiler():
        def fail(*args, **kwargs):
            raise RuntimeError("no C++ compiler")
        return fail

    monkeypatch.setattr(gpt_module, "compiled_one_token_pass", no_compiler)
    assert pipe.compile() is None
    assert not pipe.target.one_token_compiled
    assert torch.equal(pipe("red", config).tokens, eager)
    monkeypatch.undo()
    seconds = pipe.compile()
    assert seconds is not None and seconds > 0
    assert torch.equal(pipe("red", config).tokens, eager)


def test_the_app_compiles_unless_told_not_to():
    env = {"LANTERN_PRESETS": "tiny-random", "LANTERN_DEVICE": "cpu"}
    models = load_models(env)
    models.compile({**env, "LANTERN_COMPILE": "0"})
    assert not models.compiled and not models.pipelines["tiny-random"].target.one_token_compiled
    models.compile(env)
    assert models.compiled and models.pipelines["tiny-random"].target.one_token_compiled
