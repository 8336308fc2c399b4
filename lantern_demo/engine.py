"""The decoding engine: AR, speculative chains, EAGLE-2 trees, LANTERN, LANTERN++, SJD.

``decode`` drives a ``Target`` and (for speculative methods) a ``Drafter``
(see ``protocol.py``) and yields one ``Step`` per target forward pass; the
prefill pass, which yields token 0, is step 0. ``summarize`` turns the steps
into the statistics the UI and the benchmark show. Nothing else recomputes them.

One speculative step, with ``n`` committed tokens whose last one (the
*pending* token) is not yet in the target's cache:
1. the drafter is fed the real entries committed last step (target hidden
   states + tokens) and predicts the token after the pending one;
2. it drafts a chain (sampled from q) or a tree (top-k children, EAGLE-2's
   dynamic selection by cumulative draft log-probability, or a static shape);
3. the target verifies pending token + drafts in ONE forward pass (tree
   attention mask for trees);
4. acceptance (``acceptance.py``) walks the drafts; the first rejection yields a
   correction token, a fully accepted path a bonus token;
5. both KV caches keep only the accepted path.

Speculative Jacobi decoding (``sjd``, ``sjd+lantern``) needs no drafter: the
drafts are a window of ``window`` tokens kept from pass to pass (``jacobi.py``).
One SJD step verifies pending token + window in one causal target pass with the
chain rule, commits the accepted drafts and the correction (or bonus) token, and
turns the target distributions it computed past the rejection into the next
window's drafts; fresh drafts pad the window back to its length.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
from torch import Tensor

from . import jacobi
from .acceptance import Relaxation, accept_at_node, active, greedy_accepts, verify_chain
from .protocol import Drafter, Target
from .sampling import SamplingConfig, draw, pick, probs_from_logits
from .trees import Tree, ancestor_mask, static_tree, validate_shape

METHODS = ("ar", "sd", "eagle", "lantern", "lantern++", "sjd", "sjd+lantern")
DRAFTER_FREE = ("ar", "sjd", "sjd+lantern")
RELAXED = ("lantern", "lantern++", "sjd+lantern")
DRAFTS = ("chain", "tree", "static", "window")
_DEFAULT_DRAFT = {"sd": "chain", "eagle": "tree", "lantern": "tree", "lantern++": "static",
                  "sjd": "window", "sjd+lantern": "window"}


@dataclass(frozen=True)
class DecodeConfig:
    """A decoding method and its parameters.

    method: "ar" | "sd" (exact, chain) | "eagle" (exact, dynamic tree) |
        "lantern" (relaxed, delta and k) | "lantern++" (relaxed, lam and k; static tree) |
        "sjd" (exact speculative Jacobi decoding, no drafter) | "sjd+lantern" (SJD with
        LANTERN's relaxed acceptance, delta and k).
    draft: "chain" | "tree" (EAGLE-2 dynamic) | "static" (LANTERN++) | "window" (the SJD
        methods' only shape); None = the method's default.
    gamma: chain length (the most drafts per step).
    min_confidence: chain drafting stops early once the product of the drafted tokens'
        draft probabilities (EAGLE-2's path confidence, an estimate of the chance that
        every draft so far is accepted) falls below it; 0 = always ``gamma`` drafts.
        It decides from the drafter alone, so exact methods stay exact.
    depth: tree levels. top_k: children per expanded node.
    total_tokens: tree nodes verified per step including the root (dynamic and static).
    static_shape: explicit static tree as paths of child ranks (None = ``static_tree(...)``).
    delta, k, lam: the relaxation (``acceptance.Relaxation``); lam only for lantern++,
        where delta caps the per-position TVD as well (1 = no cap).
    window: SJD's draft window L (drafts verified per pass). init: how SJD starts a
        fresh draft ("random", "left" or "vertical", see ``jacobi.init_drafts``).
    coupled: SJD redrafts coupled with the previous drafts (SCD / MC-SJD's maximal
        coupling) instead of drawn independently; both exact.
    """

    method: str = "lantern"
    draft: str | None = None
    gamma: int = 4
    min_confidence: float = 0.0
    depth: int = 5
    top_k: int = 10
    total_tokens: int = 59
    static_shape: tuple[tuple[int, ...], ...] | None = None
    delta: float = 0.2
    k: int = 100
    lam: float = 2.0
    window: int = 16
    init: str = "vertical"
    coupled: bool = False
    sampling: SamplingConfig = field(default_factory=SamplingConfig)

    @property
    def shape(self) -> str | None:
        """The drafting shape actually used (None for AR)."""
        if self.method == "ar":
            return None
        return self.draft or _DEFAULT_DRAFT[self.method]

    @property
    def relaxed(self) -> bool:
        return self.method in RELAXED

    @property
    def needs_drafter(self) -> bool:
        return self.method not in DRAFTER_FREE

    @property
    def width(self) -> int:
        """Tokens one target pass verifies, the pending token included."""
        shape = self.shape
        sizes = {None: 0, "chain": self.gamma, "window": self.window}
        return 1 + sizes.get(shape, self.total_tokens)

    def validate(self) -> None:
        """Raise ValueError with a clear message for any out-of-range parameter."""
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; choose one of {METHODS}")
        if self.draft is not None and self.draft not in DRAFTS:
            raise ValueError(f"unknown draft shape {self.draft!r}; choose one of {DRAFTS}")
        if self.method != "ar" and self.draft is not None and (self.draft == "window") == self.needs_drafter:
            raise ValueError(f"method {self.method!r} cannot use draft shape {self.draft!r}: "
                             "the SJD methods draft a window, the others a chain or tree")
        if self.init not in jacobi.INITS:
            raise ValueError(f"unknown draft initialisation {self.init!r}; choose one of {jacobi.INITS}")
        checks = [
            ("gamma", self.gamma, 1, 64),
            ("depth", self.depth, 1, 32),
            ("top_k", self.top_k, 1, 64),
            ("total_tokens", self.total_tokens, 2, 1024),
            ("window", self.window, 1, 128),
        ]
        for name, value, lo, hi in checks:
            if not lo <= value <= hi:
                raise ValueError(f"{name} must be in [{lo}, {hi}], got {value}")
        if not 0.0 <= self.min_confidence < 1.0:
            raise ValueError(f"min_confidence must be in [0, 1), got {self.min_confidence}")
        if not 0.0 <= self.delta <= 1.0:
            raise ValueError(f"delta must be in [0, 1], got {self.delta}")
        if self.k < 0:
            raise ValueError(f"k must be >= 0, got {self.k}")
        if self.lam < 1.0:
            raise ValueError(f"lambda must be >= 1, got {self.lam}")
        if self.static_shape is not None:
            validate_shape(self.static_shape)
        self.sampling.validate()

    def relaxation(self, neighbors: Tensor | None) -> Relaxation | None:
        """The Relaxation for this method (None for exact methods)."""
        if not self.relaxed:
            return None
        if neighbors is None:
            raise ValueError(f"method {self.method!r} needs a codebook neighbour table")
        k = min(self.k, neighbors.shape[1])
        lam = self.lam if self.method == "lantern++" else None
        return Relaxation(neighbors, k, self.delta, lam)


@dataclass
class Step:
    """One target forward pass and the tokens it committed.

    start: position of the first committed token; tokens: committed ids.
    source: per committed token, the draft depth it was accepted at (>= 1; for SJD
        its place in the window), or 0 when the target sampled it (correction, bonus,
        AR, or the prefill's token).
    drafted: draft tokens proposed this step. tvd: per committed token, the mass
        the relaxation moved at that position (0 for exact methods).
    Seconds spent, disjoint (their sum is this step's share of ``elapsed`` up to the
    loop's own Python overhead):
        draft_time: drafting: the drafter's passes and its draft distributions, or SJD's
            fresh drafts and redrafts, plus building the verification inputs (tokens,
            positions, tree mask);
        target_time: the target's forward pass alone (prefill, or verifying the
            pending token and the drafts);
        sample_time: turning the target's logits into distributions (CFG, temperature,
            top-k/top-p, softmax) and, for AR and the prefill, the draw;
        accept_time: the acceptance rule (exact or relaxed), correction/bonus draws
            included;
        cache_time: cache bookkeeping: the KV caches keep the accepted path, the
            committed tokens and the next step's inputs are recorded.
    elapsed: seconds since decoding started (excluding time the consumer held steps).
    """

    index: int
    start: int
    tokens: list[int]
    source: list[int]
    drafted: int
    tvd: list[float]
    elapsed: float = 0.0
    draft_time: float = 0.0
    target_time: float = 0.0
    sample_time: float = 0.0
    accept_time: float = 0.0
    cache_time: float = 0.0
    drafter_passes: int = 0


class _Clock:
    """Elapsed decoding time, excluding the time the consumer holds a yielded step."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.outside = 0.0
        self._yielded_at: float | None = None

    def elapsed(self) -> float:
        return time.perf_counter() - self.start - self.outside

    def hold(self, step: "Step") -> "Step":
        """Call as ``yield clock.hold(step)``, then ``clock.release()`` when resumed."""
        self._yielded_at = time.perf_counter()
        return step

    def release(self) -> None:
        if self._yielded_at is not None:
            self.outside += time.perf_counter() - self._yielded_at
            self._yielded_at = None


def _clock(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


@torch.inference_mode()  # for each resumption of the generator, not while the consumer holds a step
def decode(
    target: Target,
    drafter: Drafter | None,
    cond: Any,
    config: DecodeConfig,
    num_tokens: int,
    seed: int = 0,
    neighbors: Tensor | None = None,
    row_length: int | None = None,
) -> Iterator[Step]:
    """Generate ``num_tokens`` image tokens, yielding a ``Step`` per target pass.

    cond: the model's condition (see ``Target.prefill``). neighbors: [V, K]
    codebook neighbour table, needed by the relaxed methods. row_length: image
    tokens per row, for SJD's vertical draft initialisation (default: the side of
    a square image). Randomness comes only from a CPU ``torch.Generator`` seeded
    with ``seed``: the same inputs give the same tokens on the same device.
    """
    config.validate()
    if config.needs_drafter and drafter is None:
        raise ValueError(f"method {config.method!r} needs a drafter")
    relax = active(config.relaxation(neighbors))
    cfg = config.sampling
    gen = torch.Generator().manual_seed(int(seed))
    shape = config.shape
    max_tokens = num_tokens + config.width + 1

    clock = _Clock()
    t_start = clock.start
    prefix = target.prefill(cond, cfg.rows, max_tokens)
    device = prefix.logits.device
    t_target = _clock(device)
    p0 = probs_from_logits(prefix.logits, cfg)
    token = int(pick(p0, torch.rand((), generator=gen).to(device), cfg.greedy))
    t_sample = _clock(device)
    yield clock.hold(Step(0, 0, [token], [0], 0, [0.0], clock.elapsed(), target_time=t_target - t_start,
                          sample_time=t_sample - t_target))
    clock.release()

    if shape is None:
        yield from _decode_ar(target, token, config, num_tokens, gen, device, clock)
        return
    if shape == "window":
        row = row_length or math.isqrt(num_tokens)
        yield from _decode_sjd(target, token, config, relax, num_tokens, row, gen, device, clock)
        return
    assert drafter is not None
    t0 = time.perf_counter()
    drafter.prefill(cond, cfg.rows, prefix, max_tokens)
    prefill_draft_time = _clock(device) - t0
    state = _SpecState(
        target=target,
        drafter=drafter,
        config=config,
        relax=relax,
        gen=gen,
        device=device,
        num_tokens=num_tokens,
        static_shape=_static_shape(config) if shape == "static" else None,
    )
    new_tokens, features = [token], prefix.hidden[:, -1:]
    committed, index = 1, 1
    while committed < num_tokens:
        step = state.step(index, committed, new_tokens, features)
        step.draft_time += prefill_draft_time if index == 1 else 0.0
        step.elapsed = clock.elapsed()
        committed += len(step.tokens)
        new_tokens, features = state.next_tokens, state.next_features
        yield clock.hold(step)
        clock.release()
        index += 1


def _decode_ar(
    target: Target, token: int, config: DecodeConfig, num_tokens: int, gen: torch.Generator,
    device: torch.device, clock: "_Clock",
) -> Iterator[Step]:
    cfg = config.sampling
    for pos in range(1, num_tokens):
        t0 = time.perf_counter()
        logits, _ = target.forward(torch.tensor([token], device=device), torch.tensor([pos - 1], device=device))
        t1 = _clock(device)
        p = probs_from_logits(logits[:, 0], cfg)
        token = int(pick(p, torch.rand((), generator=gen).to(device), cfg.greedy))
        t2 = _clock(device)
        yield clock.hold(Step(pos, pos, [token], [0], 0, [0.0], clock.elapsed(), target_time=t1 - t0,
                              sample_time=t2 - t1))
        clock.release()


def _decode_sjd(
    target: Target, token: int, config: DecodeConfig, relax: Relaxation | None, num_tokens: int, row_length: int,
    gen: torch.Generator, device: torch.device, clock: "_Clock",
) -> Iterator[Step]:
    """Speculative Jacobi decoding after the prefill's token 0 (see the module docstring).

    ``seq`` holds the committed tokens followed by the window's drafts; ``q`` [w, V]
    the distribution each draft was drawn from.
    """
    cfg = config.sampling
    V = target.vocab_size
    seq = torch.full((num_tokens,), -1, dtype=torch.long, device=device)
    seq[0] = token
    drafts = torch.zeros(0, dtype=torch.long, device=device)
    q = torch.zeros(0, V, device=device)
    committed, index = 1, 1
    while committed < num_tokens:
        t0 = time.perf_counter()
        w = min(config.window, num_tokens - committed)
        drafts, q = drafts[:w], q[:w]
        if drafts.shape[0] < w:  # pad the window with fresh drafts
            need = w - drafts.shape[0]
            fresh, q_fresh = jacobi.init_drafts(seq, committed + drafts.shape[0], need, config.init, V, row_length,
                                                torch.rand(need, generator=gen))
            drafts, q = torch.cat([drafts, fresh]), torch.cat([q, q_fresh])
            seq[committed:committed + w] = drafts
        tokens = torch.cat([seq[committed - 1:committed], drafts])
        positions = torch.arange(committed - 1, committed + w, device=device)
        t1 = _clock(device)
        logits, _ = target.forward(tokens, positions)
        t2 = _clock(device)
        p = probs_from_logits(logits, cfg)  # [w + 1, V]: position committed + i
        t3 = _clock(device)

        u = None if cfg.greedy else torch.rand(w + 1, generator=gen).to(device)
        n_acc, last, tvd = verify_chain(p, q, drafts, relax, cfg.greedy, u)
        out = drafts[:n_acc].tolist()
        if committed + n_acc < num_tokens:
            out.append(last)
        t4 = _clock(device)
        target.keep(committed - 1, torch.arange(n_acc + 1, device=device))
        seq[committed:committed + len(out)] = torch.tensor(out, device=device)
        t5 = _clock(device)

        # the distributions past the rejection become the next window's drafts
        stale = p[n_acc + 1:]
        u = torch.rand(stale.shape[0], generator=gen).to(device)
        drafts = jacobi.redraft(stale, drafts[n_acc + 1:], q[n_acc + 1:], config.coupled, cfg.greedy, u)
        q = stale
        start = committed + len(out)
        kept = min(drafts.shape[0], num_tokens - start)
        seq[start:start + kept] = drafts[:kept]
        t6 = _clock(device)
        source = list(range(1, n_acc + 1)) + [0] * (len(out) - n_acc)
        yield clock.hold(Step(index, committed, out, source, w, tvd[: len(out)], clock.elapsed(),
                              draft_time=(t1 - t0) + (t6 - t5), target_time=t2 - t1, sample_time=t3 - t2,
                              accept_time=t4 - t3, cache_time=t5 - t4))
        clock.release()
        committed += len(out)
        index += 1


def _static_shape(config: DecodeConfig) -> tuple[tuple[int, ...], ...]:
    if config.static_shape is not None:
        return config.static_shape
    return static_tree(config.total_tokens - 1, config.depth, config.top_k)


@dataclass
class _SpecState:
    """Per-request state of a speculative decode (never shared between requests)."""

    target: Target
    drafter: Drafter
    config: DecodeConfig
    relax: Relaxation | None
    gen: torch.Generator
    device: torch.device
    num_tokens: int
    static_shape: tuple[tuple[int, ...], ...] | None
    next_tokens: list[int] = field(default_factory=list)
    next_features: Tensor | None = None
    drafter_passes: int = 0

    def _rand(self, n: int) -> Tensor:
        return torch.rand(n, generator=self.gen)

    def _probs(self, logits: Tensor) -> Tensor:
        return probs_from_logits(logits, self.config.sampling)

    def _draft_forward(self, tokens: Tensor, features: Tensor, positions: Tensor, mask: Tensor | None):
        self.drafter_passes += 1
        return self.drafter.forward(tokens, features, positions, mask)

    def step(self, index: int, committed: int, new_tokens: list[int], features: Tensor) -> Step:
        """One draft-verify-accept round. ``new_tokens`` end with the pending token."""
        dev = self.device
        pending_pos = committed - 1
        levels = min(self.config.gamma if self.config.shape == "chain" else self.config.depth,
                     self.num_tokens - committed)
        self.drafter_passes = 0
        t0 = time.perf_counter()
        first = pending_pos - len(new_tokens) + 1
        d_logits, d_feats = self._draft_forward(
            torch.tensor(new_tokens, device=dev), features, torch.arange(first, pending_pos + 1, device=dev), None
        )
        real_len = self.drafter.length
        root_logits, root_feat = d_logits[:, -1], d_feats[:, -1:]
        if self.config.shape == "chain":
            drafts, q = self._draft_chain(root_logits, root_feat, pending_pos, levels)
            n = drafts.shape[0]
            tree = Tree(drafts, torch.arange(n, device=dev), torch.arange(1, n + 1, device=dev))
        else:
            tree = self._draft_tree(root_logits, root_feat, pending_pos, levels, real_len)
            q = None
        t1 = _clock(dev)
        self.drafter.keep(real_len, torch.zeros(0, dtype=torch.long, device=dev))
        t2 = _clock(dev)

        tokens = torch.cat([torch.tensor([new_tokens[-1]], device=dev), tree.tokens])
        positions = pending_pos + torch.cat([torch.zeros(1, dtype=torch.long, device=dev), tree.depth])
        mask = None
        if self.config.shape != "chain":
            anc = ancestor_mask(tree.parents, tree.depth)
            mask = torch.cat([torch.ones(tree.size + 1, self.target.length, dtype=torch.bool, device=dev), anc], 1)
        t3 = _clock(dev)
        logits, hidden = self.target.forward(tokens, positions, mask)
        t4 = _clock(dev)
        p = self._probs(logits)
        t5 = _clock(dev)

        if q is not None:
            path, token, source, tvd = self._accept_chain(p, q, tree.tokens)
        else:
            path, token, source, tvd = self._accept_tree(p, tree)
        out = [int(tree.tokens[i - 1]) for i in path[1:]]
        if committed + len(out) < self.num_tokens:
            out.append(token)
            source.append(0)
        tvd = tvd[: len(out)]
        t6 = _clock(dev)
        keep = torch.tensor(path, device=dev)
        self.target.keep(pending_pos, keep)
        self.next_tokens = out
        self.next_features = hidden[:, keep]
        t7 = _clock(dev)
        return Step(index, committed, out, source, tree.size, tvd, draft_time=(t1 - t0) + (t3 - t2),
                    target_time=t4 - t3, sample_time=t5 - t4, accept_time=t6 - t5,
                    cache_time=(t2 - t1) + (t7 - t6), drafter_passes=self.drafter_passes)

    # ------------------------------------------------------------------ drafting

    def _draft_chain(self, logits: Tensor, feat: Tensor, pending_pos: int, levels: int):
        """Sample (or argmax) up to ``levels`` tokens from the drafter. Returns drafts [L], q [L, V].

        Stops after the draft whose path confidence (product of the drafts' q) falls below
        ``config.min_confidence``, so at least one token is always drafted.
        """
        cfg = self.config.sampling
        u = self._rand(levels).to(self.device)
        drafts, qs = [], []
        confidence = 1.0
        for i in range(levels):
            q = self._probs(logits)
            tok = pick(q, u[i], cfg.greedy)
            drafts.append(tok)
            qs.append(q)
            if self.config.min_confidence > 0:
                confidence *= float(q[tok])
                if confidence < self.config.min_confidence:
                    break
            if i + 1 < levels:
                out, feats = self._draft_forward(tok.view(1), feat, torch.tensor([pending_pos + i + 1], device=self.device), None)
                logits, feat = out[:, 0], feats
        return torch.stack(drafts), torch.stack(qs)

    def _draft_tree(self, logits: Tensor, feat: Tensor, pending_pos: int, levels: int, real_len: int) -> Tree:
        """Expand a draft tree level by level, one drafter pass per level below the first.

        Dynamic (EAGLE-2): every expanded node gets its top_k children, scored by
        cumulative draft log-probability; the top_k best new nodes are expanded
        next; finally the best total_tokens - 1 nodes are kept. Static: the
        shape's paths pick children by draft rank.
        """
        dev = self.device
        k = self.config.top_k
        static = self.static_shape
        if static is not None:
            static = tuple(p for p in static if len(p) <= levels)
            k = max(p[-1] for p in static) + 1
        logq = torch.log(self._probs(logits)).unsqueeze(0)  # [1, V]
        # node pool (node id = index in these lists; parent -1 = root)
        pool_tok: list[Tensor] = []
        pool_score: list[Tensor] = []
        pool_parent: list[Tensor] = []
        pool_depth: list[int] = []
        paths: list[tuple[int, ...]] = []
        parent_ids = torch.tensor([-1], device=dev)
        parent_scores = torch.zeros(1, device=dev)
        parent_paths: list[tuple[int, ...]] = [()]
        fed_rows: dict[int, int] = {}  # node id -> row in the drafter's speculative entries
        spec_anc = torch.zeros(0, 0, dtype=torch.bool, device=dev)
        out_feats = feat  # [R, n_parents, D] output feature of each parent
        for d in range(1, levels + 1):
            n_par = parent_ids.shape[0]
            top_lp, top_tok = torch.topk(logq, min(k, logq.shape[-1]), dim=-1)  # [n_par, k]
            scores = parent_scores[:, None] + top_lp
            keep = torch.isfinite(scores)
            if static is not None:
                wanted = set(p for p in static if len(p) == d)
                keep &= torch.tensor(
                    [[parent_paths[i] + (r,) in wanted for r in range(top_tok.shape[1])] for i in range(n_par)],
                    device=dev,
                )
            sel_parent, sel_rank = torch.nonzero(keep, as_tuple=True)
            if sel_parent.numel() == 0:
                break
            start = len(pool_depth)
            pool_tok.append(top_tok[sel_parent, sel_rank])
            pool_score.append(scores[sel_parent, sel_rank])
            pool_parent.append(parent_ids[sel_parent])
            pool_depth.extend([d] * sel_parent.numel())
            new_paths = [parent_paths[i] + (r,) for i, r in zip(sel_parent.tolist(), sel_rank.tolist())]
            paths.extend(new_paths)
            if d == levels:
                break
            # choose the nodes to expand at the next level
            new_scores = pool_score[-1]
            if static is not None:
                has_kids = {p[:-1] for p in static if len(p) == d + 1}
                expand = torch.tensor([i for i, p in enumerate(new_paths) if p in has_kids], dtype=torch.long, device=dev)
            else:
                expand = torch.topk(new_scores, min(k, new_scores.numel())).indices
            if expand.numel() == 0:
                break
            # feed them to the drafter: features = their parents' output features
            exp_par_local = sel_parent[expand]
            tokens = pool_tok[-1][expand]
            feats_in = out_feats[:, exp_par_local]
            par_ids = parent_ids[exp_par_local].tolist()
            n_fed, n_new = spec_anc.shape[0], expand.numel()
            anc = torch.zeros(n_new, n_fed + n_new, dtype=torch.bool, device=dev)
            for row, pid in enumerate(par_ids):
                if pid >= 0:
                    anc[row, :n_fed] = spec_anc[fed_rows[pid]]
                anc[row, n_fed + row] = True
            grown = torch.zeros(n_fed + n_new, n_fed + n_new, dtype=torch.bool, device=dev)
            grown[:n_fed, :n_fed] = spec_anc
            grown[n_fed:] = anc
            spec_anc = grown
            for row, e in enumerate(expand.tolist()):
                fed_rows[start + e] = n_fed + row
            mask = torch.cat([torch.ones(n_new, real_len, dtype=torch.bool, device=dev), anc], 1)
            positions = torch.full((n_new,), pending_pos + d, device=dev)
            d_logits, d_feats = self._draft_forward(tokens, feats_in, positions, mask)
            logq = torch.log(self._probs(d_logits))  # [n_new, V]
            out_feats = d_feats
            parent_ids = start + expand
            parent_scores = new_scores[expand]
            parent_paths = [new_paths[e] for e in expand.tolist()]
        tok = torch.cat(pool_tok)
        score = torch.cat(pool_score)
        parent = torch.cat(pool_parent)
        depth = torch.tensor(pool_depth, device=dev)
        if static is None and tok.numel() > self.config.total_tokens - 1:
            # best nodes by score; ties keep pool order, which lists parents first
            order = torch.sort(-score, stable=True).indices[: self.config.total_tokens - 1]
            chosen = torch.zeros(tok.numel(), dtype=torch.bool, device=dev)
            chosen[order] = True
        else:
            chosen = torch.ones(tok.numel(), dtype=torch.bool, device=dev)
        ids = torch.nonzero(chosen).squeeze(1)
        # order: by depth, then parent's order, then score (descending) = try order
        remap = {}
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

    # ------------------------------------------------------------------ acceptance

    def _accept_chain(self, p: Tensor, q: Tensor, drafts: Tensor):
        """Rule 2 (sampled) or 3 (greedy) along a chain. p: [L+1, V], q: [L, V], drafts: [L].

        Returns (path: verify-call indices of root + accepted drafts, the correction or
        bonus token, source depths of the accepted drafts, moved mass per decided position).
        """
        greedy = self.config.sampling.greedy
        u = None if greedy else self._rand(drafts.shape[0] + 1).to(self.device)
        n_acc, token, tvd = verify_chain(p, q, drafts, self.relax, greedy, u)
        return list(range(n_acc + 1)), token, list(range(1, n_acc + 1)), tvd

    def _accept_tree(self, p: Tensor, tree: Tree):
        """Rules 1 (sampled) or 3 (greedy) walked from the root. p: [M+1, V]."""
        kids = tree.children()
        greedy = self.config.sampling.greedy
        u = self._rand(int(tree.depth.max()) + 1 if tree.size else 1).tolist()
        node, path, tvd = 0, [0], []
        while True:
            children = kids[node]
            level = len(path) - 1
            if not children:
                token = int(p[node].argmax()) if greedy else int(draw(p[node], p.new_tensor(u[level])))
                tvd.append(0.0)
                break
            idx = torch.tensor(children, device=self.device)
            cands = tree.tokens[idx - 1]
            if greedy:
                ok, moved = greedy_accepts(p[node].expand(len(children), -1), cands, self.relax)
                hit = torch.nonzero(ok)
                choice = int(hit[0]) if hit.numel() else -1
                token = int(cands[choice]) if choice >= 0 else int(p[node].argmax())
                moved_mass = float(moved[choice]) if choice >= 0 else 0.0
            else:
                choice, token, moved_mass = accept_at_node(p[node], cands, u[level], self.relax)
            tvd.append(moved_mass)
            if choice < 0:
                break
            node = children[choice]
            path.append(node)
        depth_of = tree.depth.tolist()
        source = [depth_of[i - 1] for i in path[1:]]
        return path, token, source, tvd


@dataclass
class Result:
    """A finished generation: tokens [N] and its steps."""

    tokens: Tensor
    steps: list[Step]
    config: DecodeConfig
    stats: dict[str, float]


def generate(
    target: Target,
    drafter: Drafter | None,
    cond: Any,
    config: DecodeConfig,
    num_tokens: int,
    seed: int = 0,
    neighbors: Tensor | None = None,
    row_length: int | None = None,
) -> Result:
    """Run ``decode`` to the end and summarise it."""
    steps = list(decode(target, drafter, cond, config, num_tokens, seed, neighbors, row_length))
    tokens = torch.tensor([t for s in steps for t in s.tokens])
    return Result(tokens, steps, config, summarize(steps))


def summarize(steps: list[Step]) -> dict[str, float]:
    """Statistics of a (possibly partial) run.

    nfe: target forward passes including the prefill; tokens: tokens committed;
    mean_accepted: tokens per target pass (the paper's step compression);
    accepted_drafts / drafted: draft tokens accepted / proposed; acceptance_rate;
    drafter_passes; wall_time (s, prefill to last token); tokens_per_s;
    first_token_latency (s); mean_tvd: mean mass moved by the relaxation per token;
    draft_time / target_time / sample_time / accept_time / cache_time (s): the
    ``Step`` split summed over the steps (target_time: the target's forward passes
    alone); accept_time_per_step / target_time_per_step (s): per verification step
    (a step that verified drafts).
    """
    if not steps:
        return {}
    tokens = sum(len(s.tokens) for s in steps)
    accepted = sum(1 for s in steps for src in s.source if src > 0)
    drafted = sum(s.drafted for s in steps)
    wall = steps[-1].elapsed
    target_time = sum(s.target_time for s in steps)
    accept_time = sum(s.accept_time for s in steps)
    verify_steps = max(1, sum(1 for s in steps[1:] if s.drafted > 0))
    verify_target = sum(s.target_time for s in steps[1:] if s.drafted > 0)
    return {
        "nfe": float(len(steps)),
        "tokens": float(tokens),
        "mean_accepted": tokens / len(steps),
        "accepted_drafts": float(accepted),
        "drafted": float(drafted),
        "acceptance_rate": accepted / drafted if drafted else 0.0,
        "drafter_passes": float(sum(s.drafter_passes for s in steps)),
        "wall_time": wall,
        "tokens_per_s": tokens / wall if wall > 0 else 0.0,
        "first_token_latency": steps[0].elapsed,
        "mean_tvd": sum(sum(s.tvd) for s in steps) / tokens,
        "draft_time": sum(s.draft_time for s in steps),
        "target_time": target_time,
        "sample_time": sum(s.sample_time for s in steps),
        "accept_time": accept_time,
        "cache_time": sum(s.cache_time for s in steps),
        "accept_time_per_step": accept_time / verify_steps,
        "target_time_per_step": verify_target / verify_steps,
    }


