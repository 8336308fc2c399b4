"""Optional Hugging Face ``spaces`` (ZeroGPU) support.

On a ZeroGPU Space the ``spaces`` package must be imported before torch and the
GPU-bound function wrapped in ``@spaces.GPU(duration=...)``. Everywhere else
(a laptop, a CPU Space, a dedicated-GPU Space without the package) this module
gives a ``GPU`` decorator with the same two call forms that does nothing:

    @GPU
    def f(...): ...

    @GPU(duration=120)
    def g(...): ...

Import this module (``from lantern_demo.spaces_compat import GPU``) before
anything that imports torch. Nothing here imports torch.
"""

from __future__ import annotations

from typing import Any, Callable

try:  # pragma: no cover - depends on the environment
    import spaces as _spaces  # noqa: F401  (must come before torch on ZeroGPU)

    HAVE_SPACES = True
except ImportError:
    _spaces = None
    HAVE_SPACES = False


def GPU(fn: Callable | None = None, **kwargs: Any):  # noqa: N802 (mirrors spaces.GPU)
    """``spaces.GPU`` when the package is there, else a decorator that returns the function unchanged."""
    if _spaces is not None:
        return _spaces.GPU(fn, **kwargs) if fn is not None else _spaces.GPU(**kwargs)
    if fn is not None:
        return fn
    return lambda f: f
