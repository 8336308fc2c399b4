"""Exact one-step output distributions of the verification rules, by enumeration.

Small vocabularies, float64 references written independently of the engine's
vectorised code, every bound of ``lantern_demo.acceptance`` checked.
"""


import pytest
import torch

from lantern_demo.acceptance import (
    Relaxation,
    chain_accept_prob,
    chain_residual,
    greedy_accepts,
    node_distribution,
)
from toy import toy_neighbors

V = 8


def dirichlet(seed: int, n: int = V, spread: float = 1.5, zeros: int = 0) -> torch.Tensor:
    """A random distribution (log-normal masses), optionally with some exact zeros."""
    g = torch.Generator().manual_seed(seed)
    p = torch.exp(torch.randn(n, generator=g) * spread)
    if zeros:
        p[torch.randperm(n, generator=g)[:zeros]] = 0.0
    return (p / p.sum()).float()


def tvd(a: torch.Tensor, b: torch.Tensor) -> float:
    return 0.5 * float((a.double() - b.double()).abs().sum())


def cases(n: int = 60):
    for seed in range(n):
        g = torch.Generator().manual_seed(seed)
        p = dirichlet(seed, zeros=seed % 3)
        q = dirichlet(seed + 500, zeros=(seed // 3) % 3)
        nb = toy_neighbors(V, seed)
        k = int(torch.randint(1, V, (1,), generator=g))
        delta = float(torch.rand((), generator=g)) * 0.6
        yield seed, p, q, nb, k, delta


# ----------------------------------------------------------------------------- rule 1


def reference_node(p, cands, nb, k, delta, lam=None):
    """Sequential rejection as written in shared/design/lantern.md, by its probability tree."""
    r = p.double().clone()
    o = torch.zeros_like(r)
    reach, budget = 1.0, delta
    for x in cands:
        cap = budget if lam is None else min(budget, (lam - 1) * float(r[x]))
        members, moved = [], 0.0
        for n in nb[x, :k].tolist():
            if moved + float(r[n]) <= cap + 1e-12:
                members.append(n)
                moved += float(r[n])
            else:
                break
        a = float(r[x]) + moved
        o[x] += reach * a
        if a >= 1.0 - 1e-12:
            return o
        r[x] = 0.0
        r[members] = 0.0
        r /= 1.0 - a
        budget = (budget - moved) / (1.0 - a)
        reach *= 1.0 - a
    return o + reach * r


def node_output(p, cands, relax):
    w, residual, moved = node_distribution(p, cands, relax)
    o = residual.double().clone()
    o[cands] += w.double()
    return o, float(moved)


@pytest.mark.parametrize("ncand", [1, 3, 5])
def test_exact_tree_node_reproduces_target(ncand):
    for seed, p, _, nb, k, _ in cases(30):
        cands = torch.randperm(V, generator=torch.Generator().manual_seed(seed))[:ncand]
        for relax in (None, Relaxation(nb, k, 0.0), Relaxation(nb, 0, 0.5)):
            o, moved = node_output(p, cands, relax)
            assert torch.allclose(o, p.double(), atol=1e-6), (seed, relax)
            assert moved == 0.0


@pytest.mark.parametrize("ncand", [1, 2, 4])
@pytest.mark.parametrize("lam", [None, 1.5, 3.0])
def test_relaxed_tree_node_matches_reference_and_bound(ncand, lam):
    for seed, p, _, nb, k, delta in cases():
        cands = torch.randperm(V, generator=torch.Generator().manual_seed(seed))[:ncand]
        o, moved = node_output(p, cands, Relaxation(nb, k, delta, lam))
        ref = reference_node(p, cands.tolist(), nb, k, delta, lam)
        assert torch.allclose(o, ref, atol=1e-5), seed
        assert abs(float(o.sum()) - 1.0) < 1e-5
        assert tvd(o, p) <= moved + 1e-6 <= delta + 2e-6, (seed, tvd(o, p), moved, delta)
        if ncand == 1:  # one candidate: the moved mass is exactly the TVD
            assert abs(tvd(o, p) - moved) < 1e-6


def test_relaxation_actually_moves_mass():
    # p(x)=0.1 and its nearest neighbour 0.3: with delta 0.3 the neighbour's mass joins x
    p = torch.tensor([0.1, 0.3, 0.6, 0.0])
    nb = torch.tensor([[1, 3, 2], [0, 2, 3], [1, 0, 3], [2, 1, 0]])
    w, residual, moved = node_distribution(p, torch.tensor([0]), Relaxation(nb, 2, 0.3))
    assert torch.allclose(w, torch.tensor([0.4])) and abs(float(moved) - 0.3) < 1e-7
    assert torch.allclose(residual, torch.tensor([0.0, 0.0, 0.6, 0.0]))
    # k = 1 keeps the same; delta 0.29 cannot take the neighbour
    w, _, moved = node_distribution(p, torch.tensor([0]), Relaxation(nb, 2, 0.29))
    assert torch.allclose(w, torch.tensor([0.1])) and float(moved) == 0.0


# ----------------------------------------------------------------------------- rule 2


def chain_output(p, q, relax):
    """Output distribution of rule 2 at one position, enumerating the draft x ~ q."""
    o = torch.zeros(V, dtype=torch.float64)
    accepted = 0.0
    for x in range(V):
        if q[x] == 0:
            continue
        a = float(chain_accept_prob(p[None], q[None], torch.tensor([x]), relax)[0])
        o[x] += float(q[x]) * a
        accepted += float(q[x]) * a
    residual, t = chain_residual(p[None], q[None], relax)
    o += (1.0 - accepted) * residual[0].double() / float(residual[0].sum())
    return o, float(t[0])


def test_exact_chain_reproduces_target():
    for seed, p, q, nb, k, _ in cases():
        for relax in (None, Relaxation(nb, k, 0.0)):
            o, t = chain_output(p, q, relax)
            assert torch.allclose(o, p.double(), atol=1e-6), seed
            assert t == 0.0


@pytest.mark.parametrize("lam", [None, 2.0])
def test_relaxed_chain_within_delta_and_reports_its_tvd(lam):
    grew = 0
    for seed, p, q, nb, k, delta in cases():
        o, t = chain_output(p, q, Relaxation(nb, k, delta, lam))
        assert abs(float(o.sum()) - 1.0) < 1e-5
        assert tvd(o, p) <= delta + 1e-6, (seed, tvd(o, p), delta)
        assert abs(tvd(o, p) - t) < 1e-5, (seed, tvd(o, p), t)
        grew += t > 1e-4
    assert grew > 10  # the relaxation is not vacuous on these cases


def test_chain_rules_on_many_positions_match_one_at_a_time():
    """The engine verifies a whole chain at once ([n, V]); every row must get its own row's result."""
    for seed, _, _, nb, k, delta in list(cases())[:20]:
        n = 5
        p = torch.stack([dirichlet(seed * 10 + i, zeros=i % 3) for i in range(n)])
        q = torch.stack([dirichlet(seed * 10 + i + 500) for i in range(n)])
        drafts = torch.multinomial(q, 1, generator=torch.Generator().manual_seed(seed)).squeeze(1)
        relax = Relaxation(nb, k, delta)
        a = chain_accept_prob(p, q, drafts, relax)
        residual, t = chain_residual(p, q, relax)
        for i in range(n):
            a_i = chain_accept_prob(p[i:i + 1], q[i:i + 1], drafts[i:i + 1], relax)
            r_i, t_i = chain_residual(p[i:i + 1], q[i:i + 1], relax)
            assert torch.allclose(a[i:i + 1], a_i), (seed, i)
            assert torch.allclose(residual[i:i + 1], r_i) and torch.allclose(t[i:i + 1], t_i), (seed, i)


def test_point_mass_chain_gets_full_budget():
    p = torch.tensor([0.1, 0.3, 0.6, 0.0])
    q = torch.tensor([1.0, 0.0, 0.0, 0.0])
    nb = torch.tensor([[1, 3, 2], [0, 2, 3], [1, 0, 3], [2, 1, 0]])
    a = chain_accept_prob(p[None], q[None], torch.tensor([0]), Relaxation(nb, 3, 0.35))
    assert torch.allclose(a, torch.tensor([0.4]))


# ----------------------------------------------------------------------------- rule 3


def test_greedy_rule_by_brute_force():
    for seed, p, _, nb, k, delta in cases():
        relax = Relaxation(nb, k, delta)
        ok, moved = greedy_accepts(p.expand(V, -1), torch.arange(V), relax)
        for x in range(V):
            members, m = [], 0.0
            for n in nb[x, :k].tolist():
                if m + float(p[n]) <= delta:
                    members.append(n)
                    m += float(p[n])
                else:
                    break
            relaxed = p.clone()
            relaxed[x] += p[members].sum()
            relaxed[members] = 0.0
            assert bool(ok[x]) == (int(relaxed.argmax()) == x), (seed, x)
        exact, _ = greedy_accepts(p.expand(V, -1), torch.arange(V), Relaxation(nb, k, 0.0))
        assert exact.tolist() == [x == int(p.argmax()) for x in range(V)]


# ----------------------------------------------------------------------------- monotonicity


def test_acceptance_monotone_in_delta_and_k():
    """On a fixed stream of uniforms, acceptance never drops as delta or k grows."""
    deltas = [0.0, 0.05, 0.1, 0.2, 0.4, 0.8]
    for seed, p, q, nb, _, _ in cases(40):
        g = torch.Generator().manual_seed(seed)
        L = 4
        P = torch.stack([dirichlet(seed * 7 + i) for i in range(L)])
        Q = torch.stack([dirichlet(seed * 7 + 100 + i) for i in range(L)])
        drafts = torch.multinomial(Q, 1, generator=g).squeeze(1)
        u = torch.rand(L, generator=g)
        cand = int(torch.randint(V, (1,), generator=g))
        for k_grid, d_grid in (([3] * len(deltas), deltas), (list(range(0, V)), [0.3] * V)):
            prev_chain = prev_greedy = prev_node = -1.0
            for k, delta in zip(k_grid, d_grid):
                relax = Relaxation(nb, k, delta)
                ok = u < chain_accept_prob(P, Q, drafts, relax)
                n_acc = float(torch.cumprod(ok.long(), 0).sum())
                g_ok, _ = greedy_accepts(P, drafts, relax)
                n_greedy = float(torch.cumprod(g_ok.long(), 0).sum())
                w, _, _ = node_distribution(p, torch.tensor([cand]), relax)
                assert n_acc >= prev_chain and n_greedy >= prev_greedy and float(w[0]) >= prev_node - 1e-7
                prev_chain, prev_greedy, prev_node = n_acc, n_greedy, float(w[0])


def test_relaxation_validation():
    nb = toy_neighbors(4)
    for bad in (dict(k=5, delta=0.1), dict(k=1, delta=1.5), dict(k=1, delta=0.1, lam=0.5)):
        with pytest.raises(ValueError):
            Relaxation(nb, **bad)
