"""Resumable training stages: checkpoints of the full training state, and time-limited chunks.

A stage that trains for a long time (``train_gpt``) saves its whole state -- model
and optimiser state dicts, step, random generators, the chunks run so far -- every
``every`` steps to one file (written atomically), and when the chunk's time limit is
reached it saves and raises :class:`Paused`. ``python -m lantern_demo.train ...
--resume`` then continues from that file bit for bit: the same batches, the same
schedule, as if it had never stopped. Files hold only tensors and plain Python
values, so they load with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from . import precision


class Paused(Exception):
    """A stage stopped at its chunk's time limit after saving its state to ``path``."""

    def __init__(self, stage: str, step: int, steps: int, path: Path):
        super().__init__(f"{stage} paused at step {step}/{steps}; state saved to {path}; "
                         f"run again with --resume to continue")
        self.stage, self.step, self.steps, self.path = stage, step, steps, path


@dataclass
class Chunks:
    """The time-limited pieces one training run was done in: start/end step, seconds, machine, date."""

    done: list[dict[str, Any]] = field(default_factory=list)
    start_step: int = 0
    started: float = field(default_factory=time.time)

    def close(self, step: int) -> list[dict[str, Any]]:
        """The chunk list including the running chunk, ended at ``step``."""
        return self.done + [{"start_step": self.start_step, "end_step": step,
                             "seconds": round(time.time() - self.started, 1), "machine": precision.machine(),
                             "ended": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}]

    @property
    def seconds(self) -> float:
        """Training seconds of all chunks so far, the running one included."""
        return sum(c["seconds"] for c in self.done) + time.time() - self.started


def save_state(path: Path, state: dict[str, Any]) -> None:
    """Write ``state`` to ``path`` atomically (a crash mid-write leaves the previous file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_state(path: Path, settings: dict[str, Any]) -> dict[str, Any]:
    """The state saved at ``path``; refuses one saved under other ``settings`` (it would not continue that run)."""
    if not path.exists():
        raise FileNotFoundError(f"--resume: no saved training state at {path}")
    state = torch.load(path, weights_only=True)
    if state.get("settings") != settings:
        raise ValueError(f"--resume: {path} was saved by a run with other settings "
                         f"({state.get('settings')} vs {settings}); start afresh without --resume")
    return state
