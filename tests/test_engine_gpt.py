"""The engine on the real LlamaGen-architecture GPT and EAGLE drafter (tiny, random).

Greedy speculative decoding must reproduce greedy AR token for token: this runs
the real KV cache (``keep`` after chains and trees) and real tree attention masks.
The drafter is built to know the target's "bigram" part so that many drafts are
accepted but not all (see ``lantern_demo.bench_engine.tiny_random_pair``); the
same bigram part lets SJD's redrafts be right (its greedy output must equal AR too).
"""

from dataclasses import replace

import pytest
import torch

from lantern_demo.bench_engine import tiny_random_pair
from lantern_demo.engine import generate
from lantern_demo.methods import DecodeConfig
from lantern_demo.neighbors import build_neighbor_table
from lantern_demo.sampling import SamplingConfig

GREEDY = SamplingConfig(cfg_scale=3.0, temperature=0.0)
CONFIGS = [
    DecodeConfig("sd", gamma=4),
    DecodeConfig("eagle", depth=4, branching=4, tree_tokens=16),
    DecodeConfig("lantern", depth=4, branching=4, tree_tokens=16, delta=0.0, k=8),
    DecodeConfig("lantern", draft="chain", gamma=5, delta=0.0, k=8),
    DecodeConfig("lantern++", depth=4, branching=3, tree_tokens=12, lam=1.0, k=8),
    DecodeConfig("sjd", window=8, init="vertical"),
    DecodeConfig("sjd+lantern", window=8, init="left", coupled=True, delta=0.0, k=8),
]


@pytest.fixture(scope="module")
def models():
    target, drafter, cond = tiny_random_pair(seed=0)
    return target, drafter, cond, build_neighbor_table(target.lm_head.weight.detach()[:, :8], 16)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c.method}-{c.shape}")
def test_greedy_equals_ar_on_gpt(models, config):
    target, drafter, cond, nb = models
    n = target.cfg.grid**2
    ar = generate(target, None, cond, DecodeConfig("ar", sampling=GREEDY), n)
    res = generate(target, drafter if config.needs_drafter else None, cond, replace(config, sampling=GREEDY), n,
                   neighbors=nb)
    assert res.tokens.tolist() == ar.tokens.tolist()
    assert 0 < res.stats["accepted_drafts"] < n - 1  # drafts accepted and rejected: rollback exercised
    assert res.stats["nfe"] < ar.stats["nfe"]


def test_sampled_runs_are_deterministic_and_relaxation_helps(models):
    target, drafter, cond, nb = models
    n = target.cfg.grid**2
    sampling = SamplingConfig(cfg_scale=3.0, temperature=1.0)
    base = DecodeConfig("eagle", depth=4, branching=4, tree_tokens=16, sampling=sampling)
    runs = [generate(target, drafter, cond, base, n, seed=3).tokens for _ in range(2)]
    assert torch.equal(*runs)
    exact = sum(generate(target, drafter, cond, base, n, seed=s).stats["nfe"] for s in range(3))
    relaxed_cfg = replace(base, method="lantern", delta=0.5, k=16)
    relaxed = sum(generate(target, drafter, cond, relaxed_cfg, n, seed=s, neighbors=nb).stats["nfe"] for s in range(3))
    assert relaxed < exact


@pytest.mark.parametrize("config", CONFIGS[:4], ids=lambda c: f"{c.method}-{c.shape}")
def test_greedy_equals_ar_with_a_one_entry_prefix(config):
    """Class conditioning (LlamaGen c2i: one prefix entry) leaves the drafter no prefix entry of its own."""
    target, drafter, cond = tiny_random_pair(seed=2, grid=8, cls_token_num=1, prefix_rope="identity")
    nb = build_neighbor_table(target.lm_head.weight.detach()[:, :8], 16)
    n = target.cfg.grid**2
    ar = generate(target, None, cond, DecodeConfig("ar", sampling=GREEDY), n)
    res = generate(target, drafter, cond, replace(config, sampling=GREEDY), n, neighbors=nb)
    assert res.tokens.tolist() == ar.tokens.tolist()
    assert 0 < res.stats["accepted_drafts"] < n - 1
