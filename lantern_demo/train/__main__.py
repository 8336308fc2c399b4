"""Retrain the embedded emoji model from scratch: ``python -m lantern_demo.train --out assets/emoji``.

Stages (all seeded): ``data`` (the emojis in six styles, ``emoji.data.build_styled``;
the packages are fetched from the registries on first use), ``vq`` (tokenizer), ``gpt``
(class text encoder + target GPT), ``drafter`` (EAGLE drafter on data and the target's
own samples), ``eval`` (evaluation encoder, one style held out), ``card`` (sample grid,
measurements, model card). ``--stages vq,gpt`` runs a subset; later stages load what
earlier ones saved in ``--out``. ``--smoke`` runs every stage for a few steps on the
shipped smoke sources (no registry; for tests).

Long stages run in chunks: ``--time-limit 110`` stops the GPT stage after 110
minutes with its full state saved (``<cache>/resume/gpt.pt``, exit status 3);
the same command with ``--resume`` continues it exactly where it stopped, and
then runs the later stages. Every chunk's time and machine go to metrics.json
and the model card.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from ..emoji.data import default_cache
from . import retrain
from .resume import Paused

STAGES = ("data", "vq", "gpt", "drafter", "eval", "card")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lantern_demo.train", description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="assets/emoji", help="output folder (the preset's weights)")
    ap.add_argument("--cache", default=None, help="dataset / token cache (default ~/.cache/lantern-demo/train)")
    ap.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated subset of {STAGES}")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads (1: on a shared 2-core machine, 2 threads were 4x slower per step)")
    ap.add_argument("--smoke", action="store_true", help="a few steps per stage on a few images")
    ap.add_argument("--drafter-self-samples", type=int, default=None, metavar="N",
                    help="train the drafter half on N samples of the target (self-distillation; 0: data only; "
                         "default: retrain.Settings)")
    ap.add_argument("--resume", action="store_true", help="continue the GPT stage from its saved state")
    ap.add_argument("--time-limit", type=float, default=None, metavar="MIN",
                    help="stop the GPT stage after MIN minutes, saving its state (continue with --resume)")
    a = ap.parse_args(argv)

    torch.set_num_threads(a.threads)
    stages = [s.strip() for s in a.stages.split(",") if s.strip()]
    bad = [s for s in stages if s not in STAGES]
    if bad:
        ap.error(f"unknown stage(s) {bad}; choose from {STAGES}")
    out = Path(a.out)
    cache = Path(a.cache) if a.cache else default_cache()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    try:
        retrain.run(out=out, cache=cache, stages=stages, seed=a.seed, smoke=a.smoke, log=lambda m: print(m, flush=True),
                    drafter_self_samples=a.drafter_self_samples, resume=a.resume,
                    time_limit=None if a.time_limit is None else 60 * a.time_limit)
    except Paused as p:
        print(f"{p} (this chunk: {time.time() - t0:.0f}s)", flush=True)
        return 3
    print(f"done in {time.time() - t0:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
