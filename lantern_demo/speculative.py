"""Speculative decoding with a drafter: chains (SD), EAGLE-2 dynamic trees, static trees (LANTERN++).

One step, with ``n`` committed tokens whose last one (the *pending* token) is not
yet in the target's cache:
1. the drafter is fed the real entries committed last step (target hidden
   states + tokens) and predicts the token after the pending one;
2. it drafts a chain (sampled from q) or a tree (``branching`` children per node,
   EAGLE-2's dynamic selection by cumulative draft log-probability, or a static shape);
3. the target verifies pending token + drafts in ONE forward pass (tree
   attention mask for trees);
4. acceptance (``acceptance.py``) walks the drafts; the first rejection yields a
   correction token, a fully accepted path a bonus token;
5. both KV caches keep only the accepted path.

``SpecState`` holds what stays fixed for a request; ``spec_step`` does one step and
returns the step with the next step's inputs (the tokens committed and their target
hidden states).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import Tensor

from .acceptance import Relaxation, accept_at_node, greedy_accepts, verify_chain
from .methods import DecodeConfig
from .protocol import Drafter, Target
from .sampling import draw, pick, probs_from_logits
from .steps import Step, synced
from .trees import Tree, ancestor_mask, static_tree


@dataclass(frozen=True)
class SpecState:
    """Per-request inputs of a speculative decode (never shared between requests).

    static_shape: the static tree's paths of child ranks (None for chains and dynamic trees).
    """

    target: Target
    drafter: Drafter
    config: DecodeConfig
    relax: Relaxation | None
    gen: torch.Generator
    device: torch.device
    num_tokens: int
    static_shape: tuple[tuple[int, ...], ...] | None


def static_shape(config: DecodeConfig) -> tuple[tuple[int, ...], ...]:
    """The static tree of ``config``: its explicit shape, else ``static_tree`` of its sizes."""
    if config.static_shape is not None:
        return config.static_shape
    return static_tree(config.tree_tokens - 1, config.depth, config.branching)


def _rand(state: SpecState, n: int) -> Tensor:
    return torch.rand(n, generator=state.gen)


def _probs(state: SpecState, logits: Tensor) -> Tensor:
    return probs_from_logits(logits, state.config.sampling)


def spec_step(state: SpecState, index: int, committed: int, new_tokens: list[int],
              features: Tensor) -> tuple[Step, list[int], Tensor]:
    """One draft-verify-accept round.

    new_tokens: the tokens committed last step, ending with the pending token; features:
    [R, len(new_tokens), D] their target hidden states. Returns (the step, the tokens it
    committed, their hidden states [R, n, D]): the next step's ``new_tokens`` and ``features``.
    """
    dev, config, drafter = state.device, state.config, state.drafter
    pending_pos = committed - 1
    levels = min(config.gamma if config.shape == "chain" else config.depth, state.num_tokens - committed)
    t0 = time.perf_counter()
    first = pending_pos - len(new_tokens) + 1
    d_logits, d_feats = drafter.forward(torch.tensor(new_tokens, device=dev), features,
                                        torch.arange(first, pending_pos + 1, device=dev), None)
    real_len = drafter.length
    root_logits, root_feat = d_logits[:, -1], d_feats[:, -1:]
    if config.shape == "chain":
        drafts, q, passes = draft_chain(state, root_logits, root_feat, pending_pos, levels)
        n = drafts.shape[0]
        tree = Tree(drafts, torch.arange(n, device=dev), torch.arange(1, n + 1, device=dev))
    else:
        tree, passes = draft_tree(state, root_logits, root_feat, pending_pos, levels, real_len)
        q = None
    t1 = synced(dev)
    drafter.keep(real_len, torch.zeros(0, dtype=torch.long, device=dev))
    t2 = synced(dev)

    tokens = torch.cat([torch.tensor([new_tokens[-1]], device=dev), tree.tokens])
    positions = pending_pos + torch.cat([torch.zeros(1, dtype=torch.long, device=dev), tree.depth])
    mask = None
    if config.shape != "chain":
        anc = ancestor_mask(tree.parents, tree.depth)
        mask = torch.cat([torch.ones(tree.size + 1, state.target.length, dtype=torch.bool, device=dev), anc], 1)
    t3 = synced(dev)
    logits, hidden = state.target.forward(tokens, positions, mask)
    t4 = synced(dev)
    p = _probs(state, logits)
    t5 = synced(dev)

    if q is not None:
        path, token, source, tvd, only = accept_chain(state, p, q, tree.tokens)
    else:
        path, token, source, tvd, only = accept_tree(state, p, tree)
    out = [int(tree.tokens[i - 1]) for i in path[1:]]
    if committed + len(out) < state.num_tokens:
        out.append(token)
        source.append(0)
    # token j of out was decided under the distribution after node path[j]
    top1 = p[torch.tensor(path[: len(out)], device=dev)].amax(-1).tolist()
    t6 = synced(dev)
    keep = torch.tensor(path, device=dev)
    state.target.keep(pending_pos, keep)
    next_features = hidden[:, keep]
    t7 = synced(dev)
    step = Step(index, committed, out, source, tree.size, tvd[: len(out)], top1, only[: len(out)],
                draft_time=(t1 - t0) + (t3 - t2),
                target_time=t4 - t3, sample_time=t5 - t4, accept_time=t6 - t5,
                cache_time=(t2 - t1) + (t7 - t6), drafter_passes=1 + passes)
    return step, out, next_features


# ----------------------------------------------------------------------------- drafting


def draft_chain(state: SpecState, logits: Tensor, feat: Tensor, pending_pos: int,
                levels: int) -> tuple[Tensor, Tensor, int]:
    """Sample (or argmax) up to ``levels`` tokens from the drafter.

    logits: [V] the drafter's prediction after the pending token; feat: [R, 1, D] its feature.
    Stops after the draft whose path confidence (product of the drafts' q) falls below
    ``config.confidence``, so at least one token is always drafted.
    Returns (drafts [L], q [L, V], drafter passes made).
    """
    config = state.config
    u = _rand(state, levels).to(state.device)
    drafts, qs = [], []
    confidence, passes = 1.0, 0
    for i in range(levels):
        q = _probs(state, logits)
        tok = pick(q, u[i], config.sampling.greedy)
        drafts.append(tok)
        qs.append(q)
        if config.confidence > 0:
            confidence *= float(q[tok])
            if confidence < config.confidence:
                break
        if i + 1 < levels:
            position = torch.tensor([pending_pos + i + 1], device=state.device)
            out, feat = state.drafter.forward(tok.view(1), feat, position, None)
            logits = out[:, 0]
            passes += 1
    return torch.stack(drafts), torch.stack(qs), passes


@dataclass
class _Pool:
    """The nodes drafted so far, level by level (node id = index in the concatenation; parent -1 = root)."""

    tok: list[Tensor]
    score: list[Tensor]
    parent: list[Tensor]
    depth: list[int]


@dataclass
class _Fed:
    """The drafter's speculative entries: ``anc`` [n, n] ancestry between them; ``rows``: node id -> entry."""

    anc: Tensor
    rows: dict[int, int]


def draft_tree(state: SpecState, logits: Tensor, feat: Tensor, pending_pos: int, levels: int,
               real_len: int) -> tuple[Tree, int]:
    """Expand a draft tree level by level, one drafter pass per level below the first.

    Dynamic (EAGLE-2): every expanded node gets its ``branching`` children, scored by
    cumulative draft log-probability; the ``branching`` best new nodes are expanded
    next; finally the best ``tree_tokens`` - 1 nodes are kept. Static: the shape's paths
    pick children by draft rank. real_len: the drafter's committed entries.
    Returns (the tree, drafter passes made).
    """
    dev = state.device
    k = state.config.branching
    static = state.static_shape
    if static is not None:
        static = tuple(p for p in static if len(p) <= levels)
        k = max(p[-1] for p in static) + 1
    logq = torch.log(_probs(state, logits)).unsqueeze(0)  # [1, V]
    pool = _Pool([], [], [], [])
    fed = _Fed(torch.zeros(0, 0, dtype=torch.bool, device=dev), {})
    parent_ids = torch.tensor([-1], device=dev)
    parent_scores = torch.zeros(1, device=dev)
    parent_paths: list[tuple[int, ...]] = [()]
    out_feats = feat  # [R, n_parents, D] output feature of each parent
    passes = 0
    for d in range(1, levels + 1):
        top_lp, top_tok = torch.topk(logq, min(k, logq.shape[-1]), dim=-1)  # [n_par, k]
        scores = parent_scores[:, None] + top_lp
        keep = torch.isfinite(scores)
        if static is not None:
            wanted = set(p for p in static if len(p) == d)
            keep &= torch.tensor([[path + (r,) in wanted for r in range(top_tok.shape[1])] for path in parent_paths],
                                 device=dev)
        sel_parent, sel_rank = torch.nonzero(keep, as_tuple=True)
        if sel_parent.numel() == 0:
            break
        start = len(pool.depth)
        pool.tok.append(top_tok[sel_parent, sel_rank])
        pool.score.append(scores[sel_parent, sel_rank])
        pool.parent.append(parent_ids[sel_parent])
        pool.depth.extend([d] * sel_parent.numel())
        new_paths = [parent_paths[i] + (r,) for i, r in zip(sel_parent.tolist(), sel_rank.tolist())]
        if d == levels:
            break
        new_scores = pool.score[-1]
        if static is not None:
            has_kids = {p[:-1] for p in static if len(p) == d + 1}
            expand = torch.tensor([i for i, p in enumerate(new_paths) if p in has_kids], dtype=torch.long, device=dev)
        else:
            expand = torch.topk(new_scores, min(k, new_scores.numel())).indices
        if expand.numel() == 0:
            break
        # feed the expanded nodes to the drafter: features = their parents' output features
        exp_par_local = sel_parent[expand]
        mask = _feed_mask(fed, parent_ids[exp_par_local].tolist(), start, expand.tolist(), real_len, dev)
        positions = torch.full((expand.numel(),), pending_pos + d, device=dev)
        d_logits, out_feats = state.drafter.forward(pool.tok[-1][expand], out_feats[:, exp_par_local], positions,
                                                    mask)
        passes += 1
        logq = torch.log(_probs(state, d_logits))  # [n_new, V]
        parent_ids = start + expand
        parent_scores = new_scores[expand]
        parent_paths = [new_paths[e] for e in expand.tolist()]
    return _select(pool, None if static is not None else state.config.tree_tokens - 1, dev), passes


def _feed_mask(fed: _Fed, par_ids: list[int], start: int, expand: list[int], real_len: int,
               dev: torch.device) -> Tensor:
    """The drafter's attention mask [n_new, real_len + n_fed + n_new] for feeding the nodes
    ``start + expand`` (parents ``par_ids``), each seeing the committed entries, its ancestors'
    speculative entries and itself; records them in ``fed``."""
    n_fed, n_new = fed.anc.shape[0], len(expand)
    anc = torch.zeros(n_new, n_fed + n_new, dtype=torch.bool, device=dev)
    for row, pid in enumerate(par_ids):
        if pid >= 0:
            anc[row, :n_fed] = fed.anc[fed.rows[pid]]
        anc[row, n_fed + row] = True
    grown = torch.zeros(n_fed + n_new, n_fed + n_new, dtype=torch.bool, device=dev)
    grown[:n_fed, :n_fed] = fed.anc
    grown[n_fed:] = anc
    fed.anc = grown
    for row, e in enumerate(expand):
        fed.rows[start + e] = n_fed + row
    return torch.cat([torch.ones(n_new, real_len, dtype=torch.bool, device=dev), anc], 1)


def _select(pool: _Pool, budget: int | None, dev: torch.device) -> Tree:
    """The tree of the best ``budget`` nodes of ``pool`` by score (None = all), in try order:
    by depth, then parent's order, then score (descending)."""
    tok = torch.cat(pool.tok)
    score = torch.cat(pool.score)
    parent = torch.cat(pool.parent)
    depth = torch.tensor(pool.depth, device=dev)
    if budget is not None and tok.numel() > budget:
        # best nodes by score; ties keep pool order, which lists parents first
        order = torch.sort(-score, stable=True).indices[:budget]
        chosen = torch.zeros(tok.numel(), dtype=torch.bool, device=dev)
        chosen[order] = True
    else:
        chosen = torch.ones(tok.numel(), dtype=torch.bool, device=dev)
    ids = torch.nonzero(chosen).squeeze(1)
    remap: dict[int, int] = {}
    ordered: list[int] = []
    for d in range(1, int(depth.max()) + 1):
        level = ids[depth[ids] == d].tolist()
        level.sort(key=lambda i: (remap.get(int(parent[i]), -1), -float(score[i])))
        for i in level:
            remap[i] = len(ordered)
            ordered.append(i)
    idx = torch.tensor(ordered, dtype=torch.long, device=dev)
    parents = torch.tensor([remap[int(parent[i])] + 1 if int(parent[i]) >= 0 else 0 for i in ordered], device=dev)
    return Tree(tok[idx], parents.long(), depth[idx])


# ----------------------------------------------------------------------------- acceptance


def accept_chain(state: SpecState, p: Tensor, q: Tensor,
                 drafts: Tensor) -> tuple[list[int], int, list[int], list[float], list[bool]]:
    """Rule 2 (sampled) or 3 (greedy) along a chain. p: [L+1, V], q: [L, V], drafts: [L].

    Returns (path: verify-call indices of root + accepted drafts, the correction or
    bonus token, source depths of the accepted drafts, moved mass per decided position,
    relaxation-only flag per decided position).
    """
    greedy = state.config.sampling.greedy
    u = None if greedy else _rand(state, drafts.shape[0] + 1).to(state.device)
    n_acc, token, tvd, only = verify_chain(p, q, drafts, state.relax, greedy, u)
    return list(range(n_acc + 1)), token, list(range(1, n_acc + 1)), tvd, only


def accept_tree(state: SpecState, p: Tensor,
                tree: Tree) -> tuple[list[int], int, list[int], list[float], list[bool]]:
    """Rules 1 (sampled) or 3 (greedy) walked from the root. p: [M+1, V]. Returns as ``accept_chain``."""
    kids = tree.children()
    greedy = state.config.sampling.greedy
    u = _rand(state, int(tree.depth.max()) + 1 if tree.size else 1).tolist()
    node, path, tvd, only = 0, [0], [], []
    while True:
        children = kids[node]
        level = len(path) - 1
        if not children:
            token = int(p[node].argmax()) if greedy else int(draw(p[node], p.new_tensor(u[level])))
            tvd.append(0.0)
            only.append(False)
            break
        idx = torch.tensor(children, device=state.device)
        cands = tree.tokens[idx - 1]
        if greedy:
            choice, token, moved_mass, relaxed = _greedy_node(p[node], cands, state.relax)
        else:
            choice, token, moved_mass, relaxed = accept_at_node(p[node], cands, u[level], state.relax)
        tvd.append(moved_mass)
        only.append(relaxed)
        if choice < 0:
            break
        node = children[choice]
        path.append(node)
    depth_of = tree.depth.tolist()
    source = [depth_of[i - 1] for i in path[1:]]
    return path, token, source, tvd, only


def _greedy_node(p: Tensor, cands: Tensor, relax: Relaxation | None) -> tuple[int, int, float, bool]:
    """Rule 3 at a tree node: the first accepted candidate, else the argmax. p: [V]; cands: [c].

    Returns as ``acceptance.accept_at_node``; a relaxation-only accept is a candidate that is
    not the argmax of p.
    """
    ok, moved = greedy_accepts(p.expand(cands.shape[0], -1), cands, relax)
    hit = torch.nonzero(ok)
    if not hit.numel():
        return -1, int(p.argmax()), 0.0, False
    choice = int(hit[0])
    only = relax is not None and not bool(greedy_accepts(p[None], cands[choice:choice + 1], None)[0][0])
    return choice, int(cands[choice]), float(moved[choice]), only
