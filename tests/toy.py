"""Toy models with known conditionals, implementing the engine's Target/Drafter protocols.

The next-token logits of a ``ToyModel`` are a fixed pseudo-random function of
(seed, condition, row, token history), so exact sequence distributions can be
enumerated; with ``order`` set, only the last ``order`` tokens of the history
count (a Markov chain, where Jacobi redrafts can be right). The KV "cache" stores the token entries; the history of a new token
is read from the entries its mask row lets it see, so tree masks and
``keep`` are exercised exactly as a real model would need them. (Random models of
the real architecture, whose distributions cannot be enumerated, come from
``lantern_demo.tiny``.)
"""

from __future__ import annotations

import torch
from torch import Tensor

from lantern_demo.protocol import Prefix


class ToyModel:
    def __init__(self, vocab: int, seed: int, scale: float = 1.5, base: "ToyModel | None" = None, noise: float = 1.0,
                 order: int | None = None):
        self.vocab_size = vocab
        self.order = order
        self.seed = seed
        self.scale = scale
        self.base = base  # a drafter: base's logits + noise
        self.noise = noise
        self.entries: list[int] = []
        self.rows = 1
        self.cond = 0
        self.calls = 0

    @property
    def length(self) -> int:
        return len(self.entries)

    def conditional(self, cond: int, row: int, history: tuple[int, ...]) -> Tensor:
        """Logits [V] of the token after ``history``."""
        if self.order is not None:
            history = history[len(history) - self.order:] if len(history) > self.order else history
        g = torch.Generator().manual_seed(hash((self.seed, cond, row, history)) % (2**31))
        logits = torch.randn(self.vocab_size, generator=g) * self.scale
        if self.base is not None:
            logits = self.base.conditional(cond, row, history) + self.noise * logits / self.scale
        return logits

    def _out(self, histories: list[tuple[int, ...]]) -> Tensor:
        return torch.stack(
            [torch.stack([self.conditional(self.cond, r, h) for h in histories]) for r in range(self.rows)]
        )

    def prefill(self, cond, rows, prefix_or_max, max_tokens=None):
        self.cond, self.rows, self.entries = int(cond), rows, []
        logits = self._out([()])  # [R, 1, V]
        return Prefix(logits[:, 0], logits, logits)

    def forward(self, tokens: Tensor, *args):
        positions, mask = (args[-2], args[-1]) if len(args) == 3 else (args[0], args[1] if len(args) > 1 else None)
        if len(args) == 3:
            feats = args[0]
            assert feats.shape[:2] == (self.rows, tokens.shape[0]), feats.shape
        self.calls += 1
        T, L = tokens.shape[0], self.length
        if mask is None:
            mask = torch.ones(T, L + T, dtype=torch.bool).tril(L)
        assert mask.shape == (T, L + T), (mask.shape, T, L)
        self.entries = self.entries + [int(t) for t in tokens]
        histories = []
        for i in range(T):
            hist = tuple(self.entries[j] for j in range(L + T) if mask[i, j])
            assert int(positions[i]) == len(hist) - 1, (positions, hist)
            histories.append(hist)
        logits = self._out(histories)
        return logits, logits

    def keep(self, start: int, index: Tensor) -> None:
        self.entries = self.entries[:start] + [self.entries[start + int(i)] for i in index]


def toy_pair(vocab: int = 4, seed: int = 0, noise: float = 1.0) -> tuple[ToyModel, ToyModel]:
    target = ToyModel(vocab, seed)
    return target, ToyModel(vocab, seed + 1000, base=target, noise=noise)


def toy_neighbors(vocab: int, seed: int = 0) -> Tensor:
    """A random but valid neighbour table [V, V-1] (each row a permutation of the others)."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for x in range(vocab):
        others = torch.tensor([y for y in range(vocab) if y != x])
        rows.append(others[torch.randperm(vocab - 1, generator=g)])
    return torch.stack(rows)
