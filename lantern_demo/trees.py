"""Draft trees: structure, attention masks, and static (LANTERN++) tree shapes.

A draft tree verified in one target pass has node 0 = the root (the pending
token, already committed but not yet fed to the target) and nodes 1..M = draft
tokens. Nodes are ordered by depth, and the children of a node appear in the
order they are tried during verification (best draft score first).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class Tree:
    """Draft tokens of one step. tokens, parents, depth: [M] int64.

    parents index the full node list (0 = root, draft i is node i + 1);
    depth is 1 for children of the root.
    """

    tokens: Tensor
    parents: Tensor
    depth: Tensor

    @property
    def size(self) -> int:
        return int(self.tokens.shape[0])

    def children(self) -> list[list[int]]:
        """children()[node] = the child node indices of ``node`` (0 = root), in try order."""
        kids: list[list[int]] = [[] for _ in range(self.size + 1)]
        for i, parent in enumerate(self.parents.tolist()):
            kids[parent].append(i + 1)
        return kids


def ancestor_mask(parents: Tensor, depth: Tensor) -> Tensor:
    """[M+1, M+1] bool: entry (i, j) is True iff node j is node i or one of its ancestors.

    parents, depth: [M] as in ``Tree``; parents precede children.
    """
    m = parents.shape[0]
    anc = torch.eye(m + 1, dtype=torch.bool, device=parents.device)
    for d in range(1, int(depth.max()) + 1 if m else 1):
        nodes = torch.nonzero(depth == d).squeeze(1) + 1
        anc[nodes] |= anc[parents[nodes - 1]]
    return anc


def static_tree(num_nodes: int, depth: int, branching: int = 6, decay: float = 0.6) -> tuple[tuple[int, ...], ...]:
    """A fixed tree shape as paths of child ranks, e.g. (0, 2) = root's best child's 3rd child.

    Keeps the ``num_nodes`` paths of highest prior acceptance, scoring the child of
    rank r as decay / (r + 1) (a simple Zipf-like prior of how often the drafter's
    r-th guess is right), at most ``branching`` children per node and ``depth``
    levels. Returned ordered by depth, then by parent, then rank.
    """
    heap: list[tuple[float, tuple[int, ...]]] = [(-decay / (r + 1), (r,)) for r in range(branching)]
    heapq.heapify(heap)
    chosen: list[tuple[int, ...]] = []
    while heap and len(chosen) < num_nodes:
        neg, path = heapq.heappop(heap)
        chosen.append(path)
        if len(path) < depth:
            for r in range(branching):
                heapq.heappush(heap, (neg * decay / (r + 1), path + (r,)))
    return tuple(sorted(chosen, key=lambda p: (len(p), p)))


def validate_shape(paths: tuple[tuple[int, ...], ...]) -> None:
    """Every path's parent path must be in the shape too (the root excluded)."""
    have = set(paths)
    for path in paths:
        if not path or any(r < 0 for r in path):
            raise ValueError(f"invalid tree path {path!r}")
        if len(path) > 1 and path[:-1] not in have:
            raise ValueError(f"tree path {path!r} has no parent {path[:-1]!r}")
