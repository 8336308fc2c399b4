"""Speculative Jacobi decoding: draft initialisation, coupled redrafting, and the engine's SJD loop.

The coupling is checked exactly by enumeration; greedy SJD must equal greedy AR
token for token; sampled SJD (every initialisation, independent and coupled
redrafts, and LANTERN-relaxed at delta = 0) must follow the AR sequence law
(chi-square against the enumerated law, as for ``sd`` in test_engine.py).
"""

from dataclasses import replace

import pytest
import torch

from lantern_demo.engine import generate
from lantern_demo.methods import DecodeConfig
from lantern_demo.jacobi import init_drafts, maximal_coupling, redraft
from lantern_demo.sampling import SamplingConfig
from test_acceptance import dirichlet
from test_engine import assert_follows_law, exact_sequence_law
from toy import ToyModel, toy_neighbors

GREEDY = SamplingConfig(cfg_scale=2.0, temperature=0.0)


def markov_target(vocab: int, seed: int) -> ToyModel:
    """A first-order toy target: a draft that follows a correct token is often right, as in image backgrounds."""
    return ToyModel(vocab, seed, scale=2.5, order=1)


# ----------------------------------------------------------------------------- drafts


@pytest.mark.parametrize("seed", range(20))
def test_maximal_coupling_keeps_the_new_law_and_agrees_maximally(seed):
    V = 8
    q_old = dirichlet(seed, zeros=seed % 3).double()
    q_new = dirichlet(seed + 100, zeros=(seed // 3) % 3).double()
    olds = torch.nonzero(q_old > 0).squeeze(1)
    law = maximal_coupling(olds, q_old.expand(len(olds), V), q_new.expand(len(olds), V))
    assert torch.allclose(law.sum(1), torch.ones(len(olds), dtype=law.dtype))
    assert (law >= 0).all()
    marginal = (q_old[olds, None] * law).sum(0)
    assert torch.allclose(marginal, q_new, atol=1e-12)
    same = float((q_old[olds] * law[torch.arange(len(olds)), olds]).sum())
    assert abs(same - float(torch.minimum(q_old, q_new).sum())) < 1e-12


def test_coupled_redraft_repeats_the_old_draft_more_often():
    g = torch.Generator().manual_seed(0)
    V, n = 16, 4000
    q_old = torch.softmax(torch.randn(V, generator=g) * 2, 0).expand(n, V)
    q_new = torch.softmax(q_old[0].log() + 0.3 * torch.randn(V, generator=g), 0).expand(n, V)
    old = torch.multinomial(q_old, 1, generator=g).squeeze(1)
    u = torch.rand(n, generator=g)
    coupled = redraft(q_new, old, q_old, coupled=True, greedy=False, u=u)
    free = redraft(q_new, old, q_old, coupled=False, greedy=False, u=u)
    overlap = float(torch.minimum(q_old[0], q_new[0]).sum())
    assert abs(float((coupled == old).float().mean()) - overlap) < 0.03
    assert float((free == old).float().mean()) < overlap - 0.2
    # the marginal of the coupled redrafts is q_new
    hist = torch.bincount(coupled, minlength=V).double() / n
    assert 0.5 * float((hist - q_new[0].double()).abs().sum()) < 0.04


def test_fresh_drafts():
    V, row = 10, 4
    seq = torch.tensor([3, 1, 4, 1, 5, 9, -1, -1, -1, -1])
    tokens, q = init_drafts(seq, 6, 4, "left", V, row, torch.rand(4))
    assert tokens.tolist() == [9, 9, 9, 9] and torch.equal(q, torch.eye(V)[tokens])
    tokens, q = init_drafts(seq, 6, 4, "vertical", V, row, torch.rand(4))
    assert tokens.tolist() == [4, 1, 5, 9]  # positions 6..9 copy 2..5, one row above
    assert torch.equal(q, torch.eye(V)[tokens])
    tokens, _ = init_drafts(seq[:1], 1, 3, "vertical", V, row, torch.rand(3))
    assert tokens.tolist() == [3, 3, 3]  # first row: nothing above, copy the left token
    tokens, q = init_drafts(seq, 6, 4, "random", V, row, torch.tensor([0.0, 0.5, 0.99, 0.31]))
    assert tokens.tolist() == [0, 5, 9, 3] and torch.allclose(q, torch.full((4, V), 0.1))
    with pytest.raises(ValueError, match="initialisation"):
        init_drafts(seq, 6, 1, "diagonal", V, row, torch.rand(1))


# ----------------------------------------------------------------------------- the engine loop

SJD_CONFIGS = {
    "sjd-random": DecodeConfig("sjd", window=4, init="random"),
    "sjd-left": DecodeConfig("sjd", window=4, init="left"),
    "sjd-vertical": DecodeConfig("sjd", window=5, init="vertical"),
    "sjd-coupled": DecodeConfig("sjd", window=4, init="vertical", coupled=True),
    "sjd+lantern-delta0": DecodeConfig("sjd+lantern", window=4, delta=0.0, k=3),
    "sjd+lantern-coupled-delta0": DecodeConfig("sjd+lantern", window=3, delta=0.0, k=3, coupled=True),
}


@pytest.mark.parametrize("name", list(SJD_CONFIGS))
def test_greedy_sjd_equals_greedy_ar(name):
    vocab, n = 6, 30
    accepted = 0
    for seed in range(4):
        target = markov_target(vocab, seed)
        ar = generate(target, None, seed, DecodeConfig("ar", sampling=GREEDY), n)
        config = replace(SJD_CONFIGS[name], sampling=GREEDY)
        res = generate(target, None, seed, config, n, seed=seed, neighbors=toy_neighbors(vocab, seed), row_length=5)
        assert res.tokens.tolist() == ar.tokens.tolist(), (name, seed)
        assert sum(len(s.tokens) for s in res.steps) == n
        assert all(s.drafter_passes == 0 and s.drafted <= config.window for s in res.steps)
        accepted += res.stats["accepted_drafts"]
    assert accepted > 3  # drafts were accepted, so keep() and the refills mattered


CHI_CONFIGS = {
    "sjd-random": DecodeConfig("sjd", window=2, init="random"),
    "sjd-left": DecodeConfig("sjd", window=3, init="left"),
    "sjd-vertical": DecodeConfig("sjd", window=2, init="vertical"),
    "sjd-coupled": DecodeConfig("sjd", window=3, init="left", coupled=True),
    "sjd+lantern-delta0": DecodeConfig("sjd+lantern", window=2, init="random", delta=0.0, k=2, coupled=True),
}


@pytest.mark.parametrize("name", list(CHI_CONFIGS))
def test_sampled_sjd_follows_the_ar_sequence_law(name):
    vocab, n, runs = 3, 4, 3000
    sampling = SamplingConfig(cfg_scale=1.5, temperature=1.0)
    target = ToyModel(vocab, 7, order=2)
    law = exact_sequence_law(target, 7, n, sampling)
    config = replace(CHI_CONFIGS[name], sampling=sampling)
    counts = dict.fromkeys(law, 0)
    accepted = 0
    for seed in range(runs):
        res = generate(target, None, 7, config, n, seed=seed, neighbors=toy_neighbors(vocab), row_length=2)
        counts[tuple(res.tokens.tolist())] += 1
        accepted += res.stats["accepted_drafts"]
    assert_follows_law(counts, law, name)
    assert accepted > runs // 2  # many runs took drafts, refilled ones included


def test_sjd_lantern_at_delta_zero_is_sjd_and_relaxation_helps():
    vocab, n = 16, 48
    sampling = SamplingConfig(cfg_scale=1.0, temperature=1.0)
    nb = toy_neighbors(vocab, 3)
    exact = relaxed = 0.0
    for seed in range(4):
        target = markov_target(vocab, seed)
        base = DecodeConfig("sjd", window=6, init="left", coupled=True, sampling=sampling)
        sjd = generate(target, None, seed, base, n, seed=seed)
        zero = generate(target, None, seed, replace(base, method="sjd+lantern", delta=0.0, k=8), n, seed=seed,
                        neighbors=nb)
        assert torch.equal(sjd.tokens, zero.tokens) and zero.stats["mean_tvd"] == 0.0
        res = generate(target, None, seed, replace(base, method="sjd+lantern", delta=0.5, k=8), n, seed=seed,
                       neighbors=nb)
        assert 0.0 < res.stats["mean_tvd"] and all(0.0 <= t <= 0.5 + 1e-6 for s in res.steps for t in s.tvd)
        exact += sjd.stats["mean_accepted"]
        relaxed += res.stats["mean_accepted"]
    assert relaxed > exact


def test_sjd_steps_describe_the_run():
    vocab, n = 8, 40
    target = markov_target(vocab, 1)
    config = DecodeConfig("sjd", window=6, coupled=True)
    res = generate(target, None, 1, config, n, seed=0)
    pos = 0
    for i, s in enumerate(res.steps):
        assert s.index == i and s.start == pos and len(s.tokens) == len(s.source) == len(s.tvd)
        depths = [d for d in s.source if d > 0]
        assert depths == list(range(1, len(depths) + 1))
        assert s.drafted == (0 if i == 0 else min(6, n - pos))  # the window never runs past the image
        pos += len(s.tokens)
    assert pos == n and res.stats["drafter_passes"] == 0


def test_sjd_configs_are_checked():
    target = markov_target(4, 0)
    with pytest.raises(ValueError, match="window"):
        generate(target, None, 0, DecodeConfig("sjd", window=0), 4)
    with pytest.raises(ValueError, match="initialisation"):
        generate(target, None, 0, DecodeConfig("sjd", init="diagonal"), 4)
    with pytest.raises(ValueError, match="draft shape"):
        generate(target, None, 0, DecodeConfig("sjd", draft="chain"), 4)
    with pytest.raises(ValueError, match="draft shape"):
        generate(target, None, 0, DecodeConfig("sd", draft="window"), 4)
    with pytest.raises(ValueError, match="neighbour"):
        generate(target, None, 0, DecodeConfig("sjd+lantern"), 4)
