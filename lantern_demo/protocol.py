"""The contract between the decoding engine and the models it drives.

The engine (``lantern_demo.engine``) never looks inside a model. It talks to a
*target* (the model whose distribution we sample) and, for speculative methods,
a *drafter* through the two protocols below. Everything is in units of
**image tokens**: position ``i`` is the i-th token of the raster sequence
(0 .. N-1); the condition prefix (caption positions) is the model's business.

Rows: with classifier-free guidance a model runs ``R = 2`` rows that share the
same image tokens: row 0 conditional, row 1 unconditional. Without CFG ``R = 1``.
The engine combines the rows (``lantern_demo.sampling``).

KV cache: each model owns a cache of image-token entries. ``forward`` appends
``T`` entries after the current ``length`` (tentatively: speculative entries are
appended too); ``keep`` then retains a chosen subset of the entries appended
since ``start`` and discards the rest. The mask passed to ``forward`` is over
the image entries only; every new token always attends to the whole prefix.

Conventions for the drafter (EAGLE style): its entry for token ``t_j`` is fed
``features[j]`` = the hidden state that *predicted* ``t_j`` (the target's last
hidden state after its final norm, or the drafter's own output for speculative
entries), and its output at that entry predicts ``t_{j+1}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from torch import Tensor


@dataclass
class Prefix:
    """What the target's prefill returns.

    logits: [R, V] next-token logits for image token 0.
    hidden: [R, P, D] last hidden states (after the final norm) at the P prefix positions.
    embeds: [R, P, D] input embeddings of the prefix positions (a drafter may reuse them).
    """

    logits: Tensor
    hidden: Tensor
    embeds: Tensor


class Target(Protocol):
    """A causal image-token model with a KV cache (e.g. LlamaGen's GPT)."""

    vocab_size: int
    length: int  # image-token entries currently in the KV cache

    def prefill(self, cond: Any, rows: int, max_tokens: int) -> Prefix:
        """Reset the cache and run the condition prefix on ``rows`` rows.

        cond: model-specific condition (e.g. caption embeddings); row 1, if any,
        is the model's unconditional condition. max_tokens: upper bound on the
        image entries the cache must hold (committed + speculative).
        """
        ...

    def forward(self, tokens: Tensor, positions: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Append ``T`` tokens to the cache and return their outputs.

        tokens: [T] int64 image token ids; positions: [T] int64 image positions.
        mask: [T, length + T] bool, True where new token t may attend to image
        entry j (the cache's current entries, then the new ones); None = causal.
        Returns (logits [R, T, V], hidden [R, T, D]).
        """
        ...

    def keep(self, start: int, index: Tensor) -> None:
        """Keep entries ``start + index`` (in that order) at ``start ..``; drop all after."""
        ...


class Drafter(Protocol):
    """A cheap model proposing tokens from the target's hidden states (EAGLE style)."""

    vocab_size: int
    length: int

    def prefill(self, cond: Any, rows: int, prefix: Prefix, max_tokens: int) -> None:
        """Reset the cache and encode the condition prefix from the target's prefill."""
        ...

    def forward(
        self, tokens: Tensor, features: Tensor, positions: Tensor, mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Like ``Target.forward`` with features [R, T, D] (see module docstring).

        Returns (logits [R, T, V], features_out [R, T, D]).
        """
        ...

    def keep(self, start: int, index: Tensor) -> None:
        ...
