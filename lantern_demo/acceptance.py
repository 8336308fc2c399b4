"""Verification rules: exact speculative sampling and LANTERN's relaxed acceptance.

Notation for one position: ``p`` [V] is the target's distribution (after CFG,
temperature, top-k, top-p), ``q`` [V] the drafter's, ``x`` the drafted token.
``N_k(x)`` are the k codebook entries nearest to x (x excluded), closest first.

Relaxation (LANTERN). ``B(x)`` is the longest prefix of ``N_k(x)`` whose target
mass fits a budget b(x); accepting x "moves" the mass p(B(x)) onto x. Because
p >= 0 the cumulative mass is non-decreasing, so "longest prefix with
cumulative mass <= b" is simply ``cumsum <= b`` (vectorised, no loop).

Three rules, each documented with the bound it guarantees (tests check every
bound by enumerating small vocabularies):

1. Tree node, point-mass candidates (EAGLE-2 style deterministic top-k children
   x_1..x_c, in order), ``node_distribution``. Sequential rejection with a
   per-position budget: candidate x_i, on the residual r_i left by rejecting
   x_1..x_{i-1}, gets B_i with r_i(B_i) <= b_i where b_i = delta - (mass moved
   so far) (absolute units; LANTERN++: also <= (lambda - 1) r_i(x_i)). It is
   accepted with (unnormalised) mass w_i = r_i(x_i) + r_i(B_i); on rejection x_i
   and B_i are removed from the residual. If all are rejected the token is drawn
   from the final residual. Output o satisfies TVD(p, o) <= sum_i r_i(B_i) <= delta
   (joint convexity), and with delta = 0 (or k = 0)
   o == p exactly: this is then EAGLE's exact multi-candidate rule.
   One uniform u per node realises the whole rule as a single inverse-CDF draw
   over [w_1, .., w_c, residual] (same law as drawing a uniform per candidate).

2. Chain, sampled drafts (x ~ q), ``chain_accept_prob`` / ``chain_residual``.
   Draft y gets the budget b(y) = delta * q(y) (LANTERN++: also <= (lambda-1) p(y))
   and e(y) = p(B(y)). Accept x with min(1, (p(x) + e(x)) / q(x)); on rejection
   draw from normalise(max(0, p - alpha)) with alpha(y) = min(q(y), p(y) + e(y)).
   Derivation: the accepted mass at y is alpha(y), the rejection mass is
   1 - sum(alpha), and the output is o = alpha + (1 - sum alpha) * residual.
   Where alpha > p the residual is 0 and o - p = alpha - p; elsewhere o <= p.
   Hence TVD(p, o) = sum_y max(0, alpha(y) - p(y)) <= sum_y e(y) [q(y) > p(y)]
   <= delta * sum_y q(y) = delta. The relaxation raises the acceptance
   probability of any draft by at most delta (e(x)/q(x) <= delta), the same as
   for a point mass, where q(x) = 1 and rule 2 gives budget delta.
   delta = 0 gives standard speculative sampling exactly.

3. Greedy (temperature 0): x is accepted iff it is the argmax (first index on
   ties, like ``torch.argmax``) of p after p(x) is raised to p(x) + p(B(x)) and
   B(x) is removed, with budget b = delta (LANTERN++: also <= (lambda-1) p(x)).
   With delta = 0 this is "x == argmax p": greedy AR exactly.

Relaxation-only accepts (the app's explain view): an accepted draft is marked when
the exact rule, given the same uniform, would have rejected it: rule 2, u >=
min(1, p(x) / q(x)); rule 3, x is not the argmax of p; rule 1, the exact node's
draw with the node's uniform picks another candidate or the residual. Exact
methods (no active relaxation) never compute it: nothing is marked. With delta = 0
the relaxed rules equal the exact ones, so nothing is marked either.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .sampling import draw


def check_relaxation(k: int, delta: float, lam: float | None, table_size: int | None = None) -> None:
    """Raise ValueError unless 0 <= k (<= table_size, the neighbour table's columns, when
    known), 0 <= delta <= 1 and lam (None = unused) >= 1: the ranges of every relaxation."""
    if not 0.0 <= delta <= 1.0:
        raise ValueError(f"delta must be in [0, 1], got {delta}")
    if lam is not None and lam < 1.0:
        raise ValueError(f"lambda must be >= 1, got {lam}")
    if k < 0 or (table_size is not None and k > table_size):
        top = "" if table_size is None else f", at most the neighbour table's {table_size}"
        raise ValueError(f"k must be >= 0{top}, got {k}")


@dataclass(frozen=True)
class Relaxation:
    """LANTERN parameters.

    neighbors: [V, K] int64, row x = codebook entries nearest to x, closest first, x excluded.
    k: neighbour-set size used (<= K). 0 disables the relaxation.
    delta: additive TVD budget per position (LANTERN).
    lam: multiplicative bound, relaxed mass <= lam * p(x) (LANTERN++); None = off.
    """

    neighbors: Tensor
    k: int
    delta: float
    lam: float | None = None

    def __post_init__(self) -> None:
        check_relaxation(self.k, self.delta, self.lam, self.neighbors.shape[1])

    @property
    def table(self) -> Tensor:
        """[V, k] the neighbour lists actually used."""
        return self.neighbors[:, : self.k]

    def budget(self, additive: Tensor, p_x: Tensor) -> Tensor:
        """The additive budget, capped by (lam - 1) * p(x) for LANTERN++. Shapes broadcast."""
        if self.lam is None:
            return additive
        return torch.minimum(additive, (self.lam - 1.0) * p_x)


def active(relax: Relaxation | None) -> Relaxation | None:
    """The relaxation, or None when there is none or k = 0 (the exact rules apply).

    delta = 0 deliberately still runs the relaxed code: it must then be exact.
    """
    if relax is None or relax.k == 0:
        return None
    return relax


def neighbour_set(p_nb: Tensor, budget: Tensor) -> tuple[Tensor, Tensor]:
    """B(x) from the masses of N_k(x). p_nb: [..., k] nearest first; budget: [...].

    Returns (in_set [..., k] bool, mass [...] = p(B(x))).
    """
    in_set = torch.cumsum(p_nb, dim=-1) <= budget.unsqueeze(-1)
    return in_set, (p_nb * in_set).sum(-1)


# ----------------------------------------------------------------------------- rule 1: tree nodes


def node_distribution(p: Tensor, cands: Tensor, relax: Relaxation | None) -> tuple[Tensor, Tensor, Tensor]:
    """Rule 1 at one node. p: [V] (sums to 1); cands: [c] distinct candidate tokens in order.

    Returns (w [c] acceptance mass of each candidate, residual [V] mass drawn from
    when all are rejected, moved: scalar mass moved by the relaxation).
    sum(w) + sum(residual) == sum(p). The output distribution is
    residual + scatter(w at cands).
    """
    relax = active(relax)
    if relax is None:
        w = p[cands]
        residual = p.clone()
        residual[cands] = 0.0
        return w, residual, p.new_zeros(())
    residual = p.clone()
    table = relax.table
    remaining = p.new_tensor(relax.delta)
    w = []
    for x in cands.tolist():
        p_x = residual[x]
        nb = table[x]
        p_nb = residual[nb]
        in_set, mass = neighbour_set(p_nb, relax.budget(remaining, p_x))
        w.append(p_x + mass)
        residual[x] = 0.0
        residual[nb] = p_nb * ~in_set
        remaining = remaining - mass
    moved = relax.delta - remaining
    return torch.stack(w), residual, moved


def accept_at_node(p: Tensor, cands: Tensor, u: float,
                   relax: Relaxation | None) -> tuple[int, int, float, bool]:
    """Sample rule 1 with one uniform u.

    Returns (accepted candidate index or -1, token, moved mass, relaxation-only: a
    candidate was accepted that the exact rule, with the same u, would not have picked).
    """
    w, residual, moved = node_distribution(p, cands, relax)
    idx = int(draw(torch.cat([w, residual]), p.new_tensor(u)))
    c = cands.shape[0]
    if idx >= c:
        return -1, idx - c, float(moved), False
    only = active(relax) is not None and accept_at_node(p, cands, u, None)[0] != idx
    return idx, int(cands[idx]), float(moved), only


# ----------------------------------------------------------------------------- rule 2: sampled chains


def chain_accept_prob(p: Tensor, q: Tensor, drafts: Tensor, relax: Relaxation | None) -> Tensor:
    """Rule 2 acceptance probabilities. p, q: [n, V]; drafts: [n] sampled from q -> [n]."""
    p_x = p.gather(1, drafts[:, None]).squeeze(1)
    q_x = q.gather(1, drafts[:, None]).squeeze(1)
    relax = active(relax)
    if relax is not None:
        p_nb = p.gather(1, relax.table.index_select(0, drafts))  # [n, k]
        p_x = p_x + neighbour_set(p_nb, relax.budget(relax.delta * q_x, p_x))[1]
    return torch.clamp(p_x / q_x, max=1.0)


def chain_alpha(p: Tensor, q: Tensor, relax: Relaxation | None) -> Tensor:
    """Accepted mass alpha(y) = min(q(y), p(y) + e(y)) for every token. p, q: [n, V] -> [n, V].

    Where q(y) <= p(y), alpha(y) = q(y) whatever e(y) is, so e is only computed
    for the (row, token) pairs with q > p.
    """
    alpha = torch.minimum(p, q)
    relax = active(relax)
    if relax is None:
        return alpha
    # flat indices into [n * V] (index_select / take: much cheaper than advanced indexing on a CPU)
    V = p.shape[-1]
    p_flat, q_flat = p.reshape(-1), q.reshape(-1)
    flat = torch.nonzero(q_flat > p_flat).squeeze(1)  # [M]
    ys = flat % V
    p_y, q_y = p_flat.index_select(0, flat), q_flat.index_select(0, flat)
    p_nb = p_flat.take((flat - ys)[:, None] + relax.table.index_select(0, ys))  # [M, k]
    e = neighbour_set(p_nb, relax.budget(relax.delta * q_y, p_y))[1]
    return alpha.reshape(-1).index_copy(0, flat, torch.minimum(q_y, p_y + e)).view_as(alpha)


def chain_residual(p: Tensor, q: Tensor, relax: Relaxation | None) -> tuple[Tensor, Tensor]:
    """Rule 2 on rejection. p, q: [n, V] -> (residual mass [n, V], TVD(p, output) [n]).

    The residual is unnormalised; when it is empty (rejection impossible up to
    rounding) p itself is returned so that a draw stays well defined.
    """
    alpha = chain_alpha(p, q, relax)
    residual = torch.clamp(p - alpha, min=0.0)
    empty = residual.sum(-1, keepdim=True) <= 0
    residual = torch.where(empty, p, residual)
    return residual, torch.clamp(alpha - p, min=0.0).sum(-1)


# ----------------------------------------------------------------------------- rule 3: greedy


def greedy_accepts(p: Tensor, cands: Tensor, relax: Relaxation | None) -> tuple[Tensor, Tensor]:
    """Rule 3 for candidates at positions with distributions p. p: [n, V]; cands: [n] -> (bool [n], moved [n]).

    Several candidates at one node: pass p expanded to [c, V].
    """
    p_x = p.gather(1, cands[:, None]).squeeze(1)
    rest = p.clone()
    rest.scatter_(1, cands[:, None], -1.0)
    moved = torch.zeros_like(p_x)
    relax = active(relax)
    if relax is not None:
        nb = relax.table[cands]
        p_nb = p.gather(1, nb)
        in_set, moved = neighbour_set(p_nb, relax.budget(torch.full_like(p_x, relax.delta), p_x))
        rest.scatter_(1, nb, torch.where(in_set, -1.0, p_nb))
    arg = rest.argmax(1)
    best = rest.gather(1, arg[:, None]).squeeze(1)
    relaxed = p_x + moved
    ok = (relaxed > best) | ((relaxed == best) & (cands < arg))
    return ok, moved * ok


# ----------------------------------------------------------------------------- a whole chain


def relaxed_only(p: Tensor, q: Tensor, drafts: Tensor, greedy: bool, u: Tensor | None) -> list[bool]:
    """Which accepted drafts the exact rule would have rejected for the same uniforms.

    p: [n, V], q: [n, V], drafts: [n], u: [n] (sampled only): n drafts accepted by a
    relaxed rule 2 (sampled) or 3 (greedy). Returns n flags.
    """
    if greedy:
        return (~greedy_accepts(p, drafts, None)[0]).tolist()
    assert u is not None
    return (u >= chain_accept_prob(p, q, drafts, None)).tolist()


def verify_chain(p: Tensor, q: Tensor, drafts: Tensor, relax: Relaxation | None, greedy: bool,
                 u: Tensor | None) -> tuple[int, int, list[float], list[bool]]:
    """Walk a chain of drafts with rule 2 (sampled) or rule 3 (greedy).

    p: [L+1, V] target distributions at the L draft positions and the one after;
    q: [L, V] the distributions the drafts were drawn from; drafts: [L];
    u: [L+1] uniforms (sampled only: L acceptance tests, then the token's draw).
    Returns (accepted drafts n, the correction at position n or the bonus token
    when n == L, moved mass per decided position: n + 1 values, relaxation-only
    flag per decided position: n + 1 values, the last False).
    """
    L = drafts.shape[0]
    if greedy:
        ok, moved = greedy_accepts(p[:L], drafts, relax)
        n_acc = int(torch.cumprod(ok.long(), 0).sum())
        token, tvd = int(p[n_acc].argmax()), moved[:n_acc].tolist() + [0.0]
    else:
        assert u is not None
        ok = u[:L] < chain_accept_prob(p[:L], q, drafts, relax)
        n_acc = int(torch.cumprod(ok.long(), 0).sum())
        decided = min(n_acc + 1, L)
        residual, moved = chain_residual(p[:decided], q[:decided], relax)
        token = int(draw(residual[n_acc] if n_acc < L else p[L], u[L]))
        tvd = moved.tolist() + ([0.0] if n_acc == L else [])
    only = [False] * n_acc
    if active(relax) is not None and n_acc:
        only = relaxed_only(p[:n_acc], q[:n_acc], drafts[:n_acc], greedy, None if u is None else u[:n_acc])
    return n_acc, token, tvd, only + [False]
