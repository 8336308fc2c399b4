"""``metrics.json`` of a weights folder: every training stage's measurements under the stage's key.

The retraining stages write it, the model card and the benchmarks read it (the background code of
the token rule, for one).
"""

from __future__ import annotations

import json
from pathlib import Path


def metrics_path(out: Path) -> Path:
    return Path(out) / "metrics.json"


def load_metrics(out: Path) -> dict:
    """The records of the weights folder ``out`` ({} when there are none)."""
    p = metrics_path(out)
    return json.loads(p.read_text()) if p.exists() else {}


def save_metrics(out: Path, m: dict) -> None:
    metrics_path(out).write_text(json.dumps(m, indent=2, ensure_ascii=False))


def update_metrics(out: Path, key: str, value) -> dict:
    """Set ``key`` to ``value`` in ``out``'s records; returns all of them."""
    m = load_metrics(out)
    m[key] = value
    save_metrics(out, m)
    return m
