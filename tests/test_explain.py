"""What the explain view shows: per token, the target's top-1 probability and the relaxation-only flag.

A token is relaxation-only when a relaxed rule accepted it and the exact rule, given
the same uniform, would have rejected it. The exact rules are written here
independently of ``lantern_demo.acceptance`` (float64, one position at a time): rule 2
accepts a sampled draft x iff u < min(1, p(x) / q(x)); rule 3 iff x is the argmax of
p; rule 1 picks, with the node's single uniform, the first candidate whose cumulative
target mass exceeds u. The engine's flags are checked against these rules on the very
inputs its acceptance calls saw (recorded by wrapping them), for every method.
"""

from dataclasses import replace

import numpy as np
import pytest
import torch

from lantern_demo import jacobi, speculative
from lantern_demo.acceptance import Relaxation, accept_at_node, verify_chain
from lantern_demo.engine import generate
from lantern_demo.methods import DecodeConfig
from lantern_demo.pipeline import tiny_random_pipeline
from lantern_demo.sampling import SamplingConfig, probs_from_logits
from lantern_demo.ui import plots
from test_acceptance import V, cases, dirichlet
from toy import ToyModel, toy_neighbors

SAMPLED = SamplingConfig(cfg_scale=1.5, temperature=1.0)
GREEDY = SamplingConfig(cfg_scale=1.5, temperature=0.0)
TREE = dict(depth=3, branching=3, tree_tokens=8)

CONFIGS = {
    "ar": DecodeConfig("ar"),
    "sd": DecodeConfig("sd", gamma=3),
    "eagle": DecodeConfig("eagle", **TREE),
    "lantern": DecodeConfig("lantern", delta=0.5, k=4, **TREE),
    "lantern-chain": DecodeConfig("lantern", draft="chain", gamma=3, delta=0.5, k=4),
    "lantern++": DecodeConfig("lantern++", lam=3.0, delta=1.0, k=4, **TREE),
    "sjd": DecodeConfig("sjd", window=4),
    "sjd-coupled": DecodeConfig("sjd", window=4, coupled=True),
    "sjd+lantern": DecodeConfig("sjd+lantern", window=4, delta=0.5, k=4, coupled=True),
}
RELAXED = [name for name, c in CONFIGS.items() if c.relaxed]


def exact_chain_rejects(p: torch.Tensor, q: torch.Tensor, x: int, u: float | None) -> bool:
    """Rule 2 (u given) or rule 3 (u None) without relaxation rejects draft x. p, q: [V]."""
    if u is None:
        return x != int(p.argmax())
    return not u < min(1.0, float(p[x]) / float(q[x]))


def exact_node_choice(p: torch.Tensor, cands: torch.Tensor, u: float) -> int:
    """Rule 1 without relaxation: the candidate index the uniform picks, -1 for the residual."""
    total, mass = u * float(p.double().sum()), 0.0
    for i, x in enumerate(cands.tolist()):
        mass += float(p[x])
        if total < mass:
            return i
    return -1


def test_acceptance_rules_mark_exactly_what_the_exact_rule_rejects():
    marked = 0
    for seed, _, _, nb, k, delta in cases(40):
        g = torch.Generator().manual_seed(seed)
        p = torch.stack([dirichlet(seed * 10 + i, zeros=i % 3) for i in range(4)])
        q = torch.stack([dirichlet(seed * 10 + i + 500) for i in range(3)])
        drafts = torch.multinomial(q, 1, generator=g).squeeze(1)
        u = torch.rand(4, generator=g)
        relax = Relaxation(nb, k, delta + 0.3)
        for greedy in (False, True):
            n_acc, _, tvd, only = verify_chain(p, q, drafts, relax, greedy, None if greedy else u)
            want = [exact_chain_rejects(p[i], q[i], int(drafts[i]), None if greedy else float(u[i]))
                    for i in range(n_acc)]
            assert only == want + [False] and len(only) == len(tvd), (seed, greedy)
            marked += sum(only)
            for none in (None, Relaxation(nb, k, 0.0)):
                assert not any(verify_chain(p, q, drafts, none, greedy, None if greedy else u)[3])
        cands = torch.randperm(V, generator=g)[:3]
        choice, _, _, node_only = accept_at_node(p[0], cands, float(u[0]), relax)
        assert node_only == (choice >= 0 and exact_node_choice(p[0], cands, float(u[0])) != choice), seed
        marked += node_only
        assert not accept_at_node(p[0], cands, float(u[0]), Relaxation(nb, k, 0.0))[3]
    assert marked > 10  # the relaxation did accept tokens the exact rule rejects


class Spy:
    """Wraps the engine's acceptance calls; per verification step, the flags the exact rules give."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.steps: list[list[bool]] = []
        self.node: list[bool] = []
        for module in (speculative, jacobi):
            monkeypatch.setattr(module, "verify_chain", self.verify_chain)
        monkeypatch.setattr(speculative, "accept_tree", self.accept_tree)
        monkeypatch.setattr(speculative, "accept_at_node", self.accept_at_node)
        monkeypatch.setattr(speculative, "_greedy_node", self.greedy_node)

    def verify_chain(self, p, q, drafts, relax, greedy, u):
        out = verify_chain(p, q, drafts, relax, greedy, u)
        self.steps.append([exact_chain_rejects(p[i], q[i], int(drafts[i]), None if greedy else float(u[i]))
                           for i in range(out[0])] + [False])
        return out

    def accept_tree(self, state, p, tree):
        self.node = []
        out = ACCEPT_TREE(state, p, tree)
        self.steps.append(self.node + [False])
        return out

    def accept_at_node(self, p, cands, u, relax):
        out = accept_at_node(p, cands, u, relax)
        if out[0] >= 0:
            self.node.append(exact_node_choice(p, cands, u) != out[0])
        return out

    def greedy_node(self, p, cands, relax):
        out = GREEDY_NODE(p, cands, relax)
        if out[0] >= 0:
            self.node.append(int(cands[out[0]]) != int(p.argmax()))
        return out


ACCEPT_TREE, GREEDY_NODE = speculative.accept_tree, speculative._greedy_node


def run(config: DecodeConfig, sampling: SamplingConfig, seed: int, vocab: int = 8, n: int = 20):
    target = ToyModel(vocab, seed, order=1)
    drafter = ToyModel(vocab, seed + 1000, base=target, noise=1.0)
    config = replace(config, sampling=sampling)
    return target, generate(target, drafter, seed, config, n, seed=seed, neighbors=toy_neighbors(vocab, seed),
                            row_length=4)


@pytest.mark.parametrize("sampling", [SAMPLED, GREEDY], ids=["sampled", "greedy"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_engine_marks_exactly_the_tokens_the_exact_rule_rejects(name, sampling, monkeypatch):
    marked = 0
    for seed in range(3):
        spy = Spy(monkeypatch)
        _, res = run(CONFIGS[name], sampling, seed)
        steps = res.steps
        assert steps[0].relaxed_only == [False]
        wants = spy.steps if name != "ar" else [[False]] * (len(steps) - 1)  # AR verifies nothing
        assert len(wants) == len(steps) - 1
        for step, want in zip(steps[1:], wants):
            assert len(step.relaxed_only) == len(step.tokens)
            assert step.relaxed_only == want[: len(step.tokens)], (name, seed, step.index)
            assert all(src > 0 for src, only in zip(step.source, step.relaxed_only) if only)
        flags = [f for s in steps for f in s.relaxed_only]
        marked += sum(flags)
        assert res.stats["relaxed_only_share"] == pytest.approx(sum(flags) / len(flags))
    if name in RELAXED:
        assert marked > 0, "the relaxation accepted nothing the exact rule rejects: the test is vacuous"
    else:
        assert marked == 0


@pytest.mark.parametrize("name", RELAXED)
def test_delta_zero_marks_nothing(name):
    for sampling in (SAMPLED, GREEDY):
        for seed in range(3):
            _, res = run(replace(CONFIGS[name], delta=0.0), sampling, seed)
            assert not any(f for s in res.steps for f in s.relaxed_only), (name, seed)
            assert res.stats["relaxed_only_share"] == 0.0


@pytest.mark.parametrize("sampling", [SAMPLED, GREEDY], ids=["sampled", "greedy"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_top1_is_the_max_of_the_distribution_each_token_was_decided_under(name, sampling):
    """The target's distribution at position i given the committed tokens before it, recomputed from the toy."""
    target, res = run(CONFIGS[name], sampling, seed=1)
    tokens = res.tokens.tolist()
    top1 = [t for s in res.steps for t in s.top1]
    assert len(top1) == len(tokens)
    for i, got in enumerate(top1):
        logits = torch.stack([target.conditional(1, r, tuple(tokens[:i])) for r in range(sampling.rows)])
        assert got == pytest.approx(float(probs_from_logits(logits, sampling).max()), abs=1e-6), (name, i)
    assert res.stats["mean_top1"] == pytest.approx(sum(top1) / len(top1))


@pytest.mark.parametrize("method", ["lantern", "sd"])
def test_explain_map_colours_every_token_and_marks_the_relaxation_only_ones(method):
    pipe = tiny_random_pipeline()
    config = DecodeConfig(method, depth=3, branching=3, tree_tokens=10, delta=0.4, k=16, gamma=4)
    gen = pipe("red cat", config, seed=2)
    only = [f for s in gen.steps for f in s.relaxed_only]
    assert gen.relaxed_only.tolist() == only and gen.top1.tolist() == [t for s in gen.steps for t in s.top1]
    assert (sum(only) > 0) == (method == "lantern")
    grid = pipe.target.cfg.grid
    im = np.asarray(plots.explain_map(gen.top1, gen.relaxed_only, grid))
    cell = 384 // grid
    centres = im[cell // 2: grid * cell: cell, cell // 2: grid * cell: cell].reshape(-1, 3)
    marked = (centres == plots.RELAXED_MARK).all(-1)
    assert marked.tolist() == only
    colours = plots.top1_colours(gen.top1.numpy())
    assert (centres[~marked] == colours[~marked]).all()
    # while streaming: tokens not generated yet are drawn in the pending colour
    nothing = torch.full((grid * grid,), float("nan"))
    partial = np.asarray(plots.explain_map(nothing, torch.zeros(grid * grid, dtype=torch.bool), grid))
    assert (partial[: grid * cell, : grid * cell] == plots.PENDING_COLOUR).all()
