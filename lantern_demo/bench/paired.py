"""Paired speed statistics: every speed-up the benchmark reports comes from here.

A speed-up of setting B over a reference A is the geometric mean over prompts of
the per-prompt ratios ``time_A[i] / time_B[i]`` (same prompt, same seed), with a
95% percentile bootstrap interval over prompts. Pairing removes the prompt-to-prompt
spread (some emojis take twice as long as others for every method), which a ratio of
medians taken over different prompts mixes into the estimate; the geometric mean
makes ``A over B`` the exact inverse of ``B over A``.

A result row keeps them as ``row["paired"][reference] = {"ratio": r, "ci95": [lo, hi]}``.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

#: Bootstrap resamples of the prompts, and the interval's coverage.
RESAMPLES = 2000
LEVEL = 0.95


def paired_ratio(reference: Sequence[float], times: Sequence[float], seed: int = 0,
                 resamples: int = RESAMPLES) -> tuple[float, tuple[float, float]]:
    """Geometric mean of ``reference[i] / times[i]`` and its 95% bootstrap interval.

    reference, times: per-prompt times (seconds, > 0) of the reference and of the
    compared setting, index i = the same prompt and seed in both. The interval
    resamples the prompts with replacement ``resamples`` times (a ``numpy``
    generator seeded with ``seed``, so a result regenerates exactly) and takes the
    2.5% and 97.5% percentiles of the resampled geometric means. > 1 means faster
    than the reference. Raises ValueError naming the argument on empty, unequal
    or non-positive input.
    """
    a = np.asarray(reference, np.float64)
    b = np.asarray(times, np.float64)
    if a.ndim != 1 or a.shape != b.shape or a.size == 0:
        raise ValueError(f"reference and times must be equally long, non-empty 1-d sequences "
                         f"(got shapes {a.shape} and {b.shape})")
    for name, v in (("reference", a), ("times", b)):
        if not (np.isfinite(v).all() and (v > 0).all()):
            raise ValueError(f"{name} must hold finite times > 0, got {v.tolist()}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    logs = np.log(a / b)
    # one code path for the estimate and the resamples: constant ratios give identical rows,
    # hence a degenerate interval exactly at the estimate
    estimate = float(np.exp(logs[None, :].mean(axis=1)[0]))
    idx = np.random.default_rng(seed).integers(0, logs.size, (resamples, logs.size))
    boot = logs[idx].mean(axis=1)
    tail = (1.0 - LEVEL) / 2
    # percentiles of the log means (the same order statistics as of the ratios), so that
    # the interval of "B over A" is exactly the inverse of that of "A over B"
    lo, hi = np.exp(np.quantile(boot, [tail, 1.0 - tail]))
    return estimate, (float(lo), float(hi))


def paired_entry(reference: Sequence[float], times: Sequence[float], seed: int = 0) -> dict[str, Any]:
    """``{"ratio": r, "ci95": [lo, hi]}`` of ``paired_ratio`` (the JSON form)."""
    r, (lo, hi) = paired_ratio(reference, times, seed)
    return {"ratio": r, "ci95": [lo, hi]}


def level_with(entry: dict[str, Any]) -> bool:
    """True when the interval of a paired entry includes 1.0 (no measurable difference)."""
    lo, hi = entry["ci95"]
    return lo <= 1.0 <= hi


def speedup(row: dict[str, Any], reference: str) -> float | None:
    """The paired speed-up of a result row over ``reference`` (None when not compared)."""
    entry = row.get("paired", {}).get(reference)
    return None if entry is None else entry["ratio"]


def ratio_text(entry: dict[str, Any]) -> str:
    """'1.28x [1.20, 1.35]': the ratio with its interval (table cells, prose)."""
    lo, hi = entry["ci95"]
    return f"{entry['ratio']:.2f}x [{lo:.2f}, {hi:.2f}]"


def phrase(entry: dict[str, Any] | None, label: str) -> str:
    """Prose for a paired entry against ``label``: '1.28x [1.20, 1.35] vs AR', or
    'level with AR (1.02x [0.95, 1.08])' when the interval includes 1.0."""
    if entry is None:
        return f"not compared with {label}"
    if level_with(entry):
        return f"level with {label} ({ratio_text(entry)})"
    return f"{ratio_text(entry)} vs {label}"
