"""bfloat16 autocast for CPU training, used only where this CPU runs it faster.

CPUs with native bfloat16 matrix units (AVX512-BF16, AMX) run the training
matmuls about 1.6x faster under bfloat16 autocast; CPUs without them (AVX2
only) emulate it and were measured 10x *slower* (a GPT step went from 1.3 s to
12.8 s). :func:`bf16_faster` times one 512x512 matmul in both precisions once
per process; ``LANTERN_TRAIN_BF16=1`` / ``=0`` overrides the probe.
"""

from __future__ import annotations

import functools
import os
import time

import torch


@functools.lru_cache(maxsize=1)
def bf16_faster() -> bool:
    """True when bfloat16 autocast should be used for CPU training on this machine."""
    forced = os.environ.get("LANTERN_TRAIN_BF16")
    if forced in ("0", "1"):
        return forced == "1"
    a, b = torch.randn(512, 512), torch.randn(512, 512)

    def seconds(dtype: torch.dtype) -> float:
        x, y = a.to(dtype), b.to(dtype)
        x @ y
        t = time.perf_counter()
        for _ in range(4):
            x @ y
        return time.perf_counter() - t

    return seconds(torch.bfloat16) < 0.8 * seconds(torch.float32)


def autocast(enabled: bool = True) -> torch.autocast:
    """``torch.autocast`` on CPU with bfloat16, on only when ``enabled`` and :func:`bf16_faster`."""
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=enabled and bf16_faster())


def name() -> str:
    """The training precision in words, for metrics and the model card."""
    return "bfloat16 autocast" if bf16_faster() else "float32"


def machine() -> dict[str, str | int]:
    """Where a training stage ran: CPU model, torch threads, precision (recorded per stage)."""
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    return {"cpu": cpu or "unknown", "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "threads": torch.get_num_threads(), "precision": name()}
