"""The engine end to end on toy models with known conditionals.

Greedy speculative output must equal greedy AR token for token (this exercises
the KV-cache ``keep`` and the tree masks through the toy cache, which reads
each token's history from its mask row); sampled sequences must follow the AR
sequence distribution exactly (chi-square against the enumerated law).
"""

import itertools
from dataclasses import replace

import pytest
import torch
from scipy.stats import chisquare

from lantern_demo.engine import decode, generate
from lantern_demo.methods import DecodeConfig
from lantern_demo.sampling import SamplingConfig, probs_from_logits
from toy import ToyModel, toy_neighbors, toy_pair

GREEDY = SamplingConfig(cfg_scale=2.0, temperature=0.0)

SPEC_CONFIGS = {
    "sd": DecodeConfig("sd", gamma=3),
    "sd-confidence": DecodeConfig("sd", gamma=3, confidence=0.6),
    "eagle": DecodeConfig("eagle", depth=3, branching=3, tree_tokens=8),
    "lantern-tree": DecodeConfig("lantern", depth=3, branching=3, tree_tokens=8, delta=0.0, k=3),
    "lantern-chain": DecodeConfig("lantern", draft="chain", gamma=3, delta=0.0, k=3),
    "lantern++": DecodeConfig("lantern++", depth=3, branching=3, tree_tokens=7, lam=1.0, k=3),
    "eagle-static": DecodeConfig("eagle", draft="static", depth=3, branching=2, tree_tokens=7),
}


@pytest.mark.parametrize("name", list(SPEC_CONFIGS))
def test_greedy_speculative_equals_greedy_ar(name):
    vocab, n = 12, 14
    accepted = 0
    for seed in range(4):
        target, drafter = toy_pair(vocab, seed, noise=0.6)
        ar = generate(target, None, seed, DecodeConfig("ar", sampling=GREEDY), n)
        config = replace(SPEC_CONFIGS[name], sampling=GREEDY)
        res = generate(target, drafter, seed, config, n, seed=seed, neighbors=toy_neighbors(vocab, seed))
        assert res.tokens.tolist() == ar.tokens.tolist(), (name, seed)
        assert res.stats["tokens"] == n and sum(len(s.tokens) for s in res.steps) == n
        accepted += res.stats["accepted_drafts"]
    assert accepted > 5  # drafts were really accepted, so rollback and masks mattered


def exact_sequence_law(target: ToyModel, cond: int, n: int, sampling: SamplingConfig) -> dict:
    law = {}
    for seq in itertools.product(range(target.vocab_size), repeat=n):
        prob = 1.0
        for i in range(n):
            logits = torch.stack([target.conditional(cond, r, seq[:i]) for r in range(sampling.rows)])
            prob *= float(probs_from_logits(logits, sampling)[seq[i]])
        law[seq] = prob
    return law


CHI_CONFIGS = {
    "ar": DecodeConfig("ar"),
    "sd": DecodeConfig("sd", gamma=2),
    "sd-confidence": DecodeConfig("sd", gamma=2, confidence=0.5),
    "eagle": DecodeConfig("eagle", depth=2, branching=2, tree_tokens=5),
    "lantern-delta0": DecodeConfig("lantern", depth=2, branching=2, tree_tokens=5, delta=0.0, k=2),
    "lantern-chain-delta0": DecodeConfig("lantern", draft="chain", gamma=2, delta=0.0, k=2),
}


@pytest.mark.parametrize("name", list(CHI_CONFIGS))
def test_sequence_distribution_matches_ar(name):
    vocab, n, runs = 3, 3, 2500
    sampling = SamplingConfig(cfg_scale=1.5, temperature=1.0, top_k=0, top_p=1.0)
    target, drafter = toy_pair(vocab, 7, noise=1.0)
    law = exact_sequence_law(target, 7, n, sampling)
    config = replace(CHI_CONFIGS[name], sampling=sampling)
    counts = dict.fromkeys(law, 0)
    for seed in range(runs):
        res = generate(target, drafter, 7, config, n, seed=seed, neighbors=toy_neighbors(vocab))
        counts[tuple(res.tokens.tolist())] += 1
    assert_follows_law(counts, law, name)


def assert_follows_law(counts: dict, law: dict, name: str) -> None:
    """Chi-square test of sequence counts against the (unnormalised) enumerated law."""
    keys = sorted(law)
    runs, total = sum(counts.values()), sum(law.values())
    stat = chisquare([counts[k] for k in keys], [law[k] / total * runs for k in keys])
    assert stat.pvalue > 1e-3, (name, stat)


def test_relaxation_speeds_up_and_stays_within_budget():
    vocab, n = 16, 24
    sampling = SamplingConfig(cfg_scale=1.0, temperature=1.0)
    nbr = toy_neighbors(vocab, 3)
    exact = relaxed = 0.0
    for seed in range(6):
        target, drafter = toy_pair(vocab, seed, noise=1.5)
        base = DecodeConfig("eagle", depth=3, branching=3, tree_tokens=10, sampling=sampling)
        exact += generate(target, drafter, seed, base, n, seed=seed).stats["mean_accepted"]
        res = generate(target, drafter, seed, replace(base, method="lantern", delta=0.4, k=6), n, seed=seed, neighbors=nbr)
        relaxed += res.stats["mean_accepted"]
        assert 0.0 < res.stats["mean_tvd"] <= 0.4
        assert all(0.0 <= t <= 0.4 + 1e-6 for s in res.steps for t in s.tvd)
    assert relaxed > exact


@pytest.mark.parametrize("name", ["ar"] + list(SPEC_CONFIGS))
def test_same_seed_same_tokens(name):
    vocab, n = 10, 12
    target, drafter = toy_pair(vocab, 1)
    config = DecodeConfig("ar") if name == "ar" else SPEC_CONFIGS[name]
    config = replace(config, sampling=SamplingConfig(cfg_scale=2.0), delta=0.2)
    runs = [generate(target, drafter, 1, config, n, seed=5, neighbors=toy_neighbors(vocab)).tokens for _ in range(2)]
    assert torch.equal(runs[0], runs[1])
    other = generate(target, drafter, 1, config, n, seed=6, neighbors=toy_neighbors(vocab)).tokens
    assert not torch.equal(runs[0], other) or n < 3


def test_min_confidence_shortens_chains():
    vocab, n = 12, 40
    target, drafter = toy_pair(vocab, 4, noise=1.0)
    sampling = SamplingConfig(cfg_scale=1.0, temperature=1.0)
    drafted = {}
    for c in (0.0, 0.3, 0.99):
        config = DecodeConfig("sd", gamma=4, confidence=c, sampling=sampling)
        steps = generate(target, drafter, 4, config, n, seed=0).steps[1:]
        drafted[c] = [s.drafted for s in steps]
        # a step drafts one token, then one more per drafter pass while confident
        assert all(s.drafted == s.drafter_passes for s in steps)
    assert set(drafted[0.0][:-1]) == {4}
    assert 1 < sum(drafted[0.3]) / len(drafted[0.3]) < 4
    assert set(drafted[0.99]) == {1}


def test_steps_describe_the_run():
    vocab, n = 10, 20
    target, drafter = toy_pair(vocab, 2, noise=0.5)
    config = DecodeConfig("lantern", depth=3, branching=3, tree_tokens=8, delta=0.3, k=4)
    steps = list(decode(target, drafter, 2, config, n, seed=0, neighbors=toy_neighbors(vocab)))
    assert steps[0].start == 0 and len(steps[0].tokens) == 1  # the prefill's token
    pos = 0
    for i, s in enumerate(steps):
        assert s.index == i and s.start == pos
        assert len(s.tokens) == len(s.source) == len(s.tvd)
        # accepted drafts come first at increasing depth, the target's own token last
        depths = [d for d in s.source if d > 0]
        assert depths == list(range(1, len(depths) + 1))
        pos += len(s.tokens)
    assert pos == n
    assert steps[-1].elapsed >= steps[0].elapsed


def test_bad_configs_are_rejected():
    target, drafter = toy_pair(4, 0)
    with pytest.raises(ValueError, match="unknown method"):
        generate(target, drafter, 0, DecodeConfig("magic"), 4)
    with pytest.raises(ValueError, match="neighbour"):
        generate(target, drafter, 0, DecodeConfig("lantern"), 4)
    with pytest.raises(ValueError, match="drafter"):
        generate(target, None, 0, DecodeConfig("sd"), 4)
    with pytest.raises(ValueError, match="confidence"):
        generate(target, drafter, 0, DecodeConfig("sd", confidence=1.0), 4)
    with pytest.raises(ValueError, match="delta"):
        generate(target, drafter, 0, DecodeConfig("lantern", delta=2.0), 4, neighbors=toy_neighbors(4))
    with pytest.raises(ValueError, match="gamma"):
        generate(target, drafter, 0, DecodeConfig("sd", gamma=0), 4)


def test_k_beyond_the_neighbour_table_is_an_error_not_a_silent_cap():
    target, drafter = toy_pair(4, 0)
    table = toy_neighbors(4)  # [4, 3]
    with pytest.raises(ValueError, match="k must be .* neighbour table's 3, got 5"):
        generate(target, drafter, 0, DecodeConfig("lantern", k=5), 4, neighbors=table)
    assert generate(target, drafter, 0, DecodeConfig("lantern", k=3), 4, neighbors=table).stats["tokens"] == 4
    # an exact method ignores k
    assert generate(target, drafter, 0, DecodeConfig("sd", k=5), 4, neighbors=table).stats["tokens"] == 4


@pytest.mark.parametrize("name", ["ar", "sd", "eagle", "lantern-chain", "sjd"])
def test_step_time_split_is_disjoint_and_summed(name):
    """Each step's time parts are disjoint slices of its share of ``elapsed``; summarize sums them."""
    vocab, n = 12, 14
    target, drafter = toy_pair(vocab, 0, noise=0.6)
    config = {"ar": DecodeConfig("ar"), "sjd": DecodeConfig("sjd", window=4)}.get(name) or SPEC_CONFIGS[name]
    res = generate(target, drafter, 0, config, n, seed=0, neighbors=toy_neighbors(vocab, 0))
    parts = ("draft_time", "target_time", "sample_time", "accept_time", "cache_time")
    before = 0.0
    for step in res.steps:
        times = [getattr(step, k) for k in parts]
        assert min(times) >= 0.0 and step.target_time > 0.0 and step.sample_time > 0.0
        assert sum(times) <= step.elapsed - before, (name, step.index)
        before = step.elapsed
    prefill = res.steps[0]
    assert prefill.draft_time == prefill.accept_time == prefill.cache_time == 0.0
    if name == "ar":
        assert all(s.draft_time == s.accept_time == s.cache_time == 0.0 for s in res.steps)
    else:
        assert all(s.draft_time > 0 and s.accept_time > 0 and s.cache_time > 0 for s in res.steps[1:])
    for k in parts:
        assert res.stats[k] == pytest.approx(sum(getattr(s, k) for s in res.steps), rel=1e-12)
