"""The speed/quality benchmark's entry point (``python -m lantern_demo.bench``; ``--help`` for usage).

``main`` loads the preset, builds the settings (``settings.py``), runs this process's
shard of the prompts and, in the main process, merges every shard's records
(``running.py``) and writes the report (``report.py``). See
``lantern_demo/bench/__init__.py`` and docs/benchmarks.md for what is measured.
"""

from __future__ import annotations

import platform
import subprocess
import sys
import time
from dataclasses import asdict
from typing import Any

import torch
from accelerate import PartialState
from accelerate.utils import gather_object

from ..pipeline import load_pipeline
from ..emoji.features import load as load_encoder
from .paired import RESAMPLES
from .report import write_outputs
from .running import merge, run_shard, warm_up
from .settings import ROOT, build_settings, default_preset, parse_args, prompt_set, resolve_defaults, tree_shape


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    args = parse_args(argv)
    t_start = time.time()
    state = PartialState(cpu=args.device == "cpu" or not torch.cuda.is_available())
    if args.threads:
        torch.set_num_threads(args.threads)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and state.num_processes > 1:
        device = str(state.device)
    main_proc = state.is_main_process
    log = print if main_proc else (lambda *a, **k: None)
    preset = args.preset or default_preset()
    pipe = load_pipeline(preset, device)
    if not args.eager:
        pipe.compile()
    notes = resolve_defaults(args, pipe.preset.needs_gpu, preset, pipe.max_k)
    settings = build_settings(args)
    prompts, real_idx, ds, desc = prompt_set(preset, args.num_prompts, args.seed, args.prompts_file, args.data,
                                              args.split, args.curated)
    log(f"bench: preset {preset}, {len(settings)} settings x {len(prompts)} prompts x {args.repeats} repeats, "
        f"{state.num_processes} process(es); {desc}")
    with state.split_between_processes(list(range(len(prompts)))) as mine:
        mine = list(mine)
        if mine:
            warm_up(pipe, settings, prompts[mine[0]])
        records = run_shard(pipe, settings, prompts, mine, args.seed, args.repeats, log=log)
    if state.num_processes > 1:
        records = gather_object(records)
    if not main_proc:
        state.wait_for_everyone()
        return None
    encoder = load_encoder(args.eval_encoder)
    sampling = settings[0].config.sampling
    meta = {
        "preset": preset,
        "device": str(pipe.device) + (f" ({torch.cuda.get_device_name()})" if pipe.device.type == "cuda" else
                                      f" ({platform.processor() or platform.machine()})"),
        "num_processes": state.num_processes,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "git_commit": _git_commit(),
        "args": {k: str(v) for k, v in vars(args).items()},
        "prompt_set": desc,
        "prompts": prompts,
        "heldout_indices": None if real_idx is None else [int(i) for i in real_idx],
        "seed": args.seed,
        "repeats": args.repeats,
        "bootstrap_resamples": RESAMPLES,
        "num_tokens": pipe.num_tokens,
        "tree": dict(zip(("name", "depth", "children", "total_tokens"), (args.tree, *tree_shape(args.tree)))),
        "default_relaxation": [args.default_delta, args.default_k],
        "sampling": asdict(sampling),
        "eval_encoder": None if encoder is None else getattr(encoder, "report", {}),
    }
    result = merge(records, settings, prompts, real_idx, ds, encoder, pipe, args, meta)
    result["notes"] += notes
    result["meta"]["total_seconds"] = time.time() - t_start
    write_outputs(result, args.out, plots=not args.no_plots, images={
        r["name"]: [x["image"] for x in sorted((x for x in records if x["setting"] == r["name"]),
                                               key=lambda x: x["prompt_index"])] for r in result["rows"]},
                  docs=args.update_docs)
    state.wait_for_everyone()
    return result


def _git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=5).stdout.strip() or None
    except Exception:  # noqa: BLE001
        return None
