"""Re-export for ``bench/run.py`` until it imports ``curate`` from ``lantern_demo.emoji.data`` (then this file goes)."""

from ..emoji.data import curate  # noqa: F401
