"""Re-exports for ``bench/run.py`` until its imports read ``lantern_demo.emoji`` (then this file goes)."""

from ..emoji.data import load_dataset  # noqa: F401
from ..emoji.features import load  # noqa: F401
