"""Old code against new code on the embedded model, interleaved and paired over prompts.

    python -m lantern_demo.bench.versus --against /work/wt-old [--repeats 3] [--json docs/bench/versus.json]

Two worker processes, one per source tree (``--against``: the old checkout; ``--root``:
this one), each load the tree's own ``lantern_demo`` and the embedded emoji weights of
``--assets`` (default: the old tree's ``assets/emoji``, so both run the same weights) on
one thread. The parent sends them the same requests in alternating order (old first on
even repeats, new first on odd ones), so drifting background load hits both alike, and
only one worker computes at a time.

Per method (the app's emoji defaults, ``presets.controls("emoji")``)
and prompt (``ui.EXAMPLES``, seed = the prompt's index): the engine's wall time of a
whole image (``engine.generate``, prefill to last token), median over repeats; the
speed-up is the geometric mean over prompts of the per-prompt ratio old / new with a
95% bootstrap interval (``bench.paired``). Times are the worker thread's CPU time
(``time.thread_time``): on a machine whose cores other jobs keep busy, wall time also
counts the waits for a core, which have nothing to do with the code; wall-time ratios
are kept beside them (``paired_wall``). The target passes are timed inside those
runs by wrapping ``target.forward`` (so each tree runs them in its engine's own grad
mode); "target pass at one token" is the median of AR's passes. Each pass's FLOPs are
counted from the model's shapes (:func:`pass_flops`) and divided by its time, next to a
large matmul's rate measured by the same worker. Tokens of old and new must be
identical for the same seed; the logits of a prefill, of a one-token pass and of a 16-token
pass are compared too (max abs difference). A tree whose pipeline can compile its one-token
pass (``LanternPipeline.compile``) runs compiled, as ``app.py`` does, unless ``--eager``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

#: Matrix side of the reference matmul (fp32), FLOPs = 2 n^3.
MATMUL_N = 1024


# ----------------------------------------------------------------------------- worker (runs inside one tree)


def _app_configs() -> dict[str, Any]:
    """The DecodeConfig the app builds for each method with the emoji preset's defaults, in the
    worker's tree: ``presets`` where the tree has it, else the older layout's ``ui.DEFAULTS``
    and ``ui.PRESET_DEFAULTS``."""
    try:
        from lantern_demo import methods, presets
    except ImportError:  # an older tree
        return _old_app_configs()
    if not hasattr(presets, "config"):  # before per-preset draft shapes: each method's own default shape
        values = {**presets.controls(presets.EMBEDDED), "draft": "auto"}
        return {m: methods.DecodeConfig.from_values(values, method=m) for m in methods.METHODS}
    return {m: presets.config(presets.EMBEDDED, method=m) for m in methods.METHODS}


def _old_app_configs() -> dict[str, Any]:
    """``_app_configs`` for a tree from before ``presets.py``, with today's drafting shapes."""
    from lantern_demo import engine, sampling as sampling_mod, ui

    d = {**ui.DEFAULTS, **ui.PRESET_DEFAULTS["emoji"]}
    sampling = sampling_mod.SamplingConfig(cfg_scale=float(d["cfg_scale"]), temperature=float(d["temperature"]),
                                           top_k=int(d["top_k"]), top_p=float(d["top_p"]))
    common = dict(gamma=int(d["gamma"]), min_confidence=float(d["confidence"]), depth=int(d["depth"]),
                  top_k=int(d["branching"]), total_tokens=int(d["tree_tokens"]), window=int(d["window"]),
                  init=d["init"], coupled=bool(d["coupled"]), sampling=sampling)
    out = {}
    for m in engine.METHODS:
        # EAGLE-2 and LANTERN++ draft one shape each today (a tree, a static tree), where the old page let
        # the preset's chain override them: run the old code with today's shapes, so both trees decode alike
        fixed = m in ("eagle", "lantern++") or d["draft"] == "auto"
        draft = None if m in engine.DRAFTER_FREE else ui.AUTO_DRAFT[m] if fixed else d["draft"]
        out[m] = engine.DecodeConfig(m, draft=draft, delta=float(d["delta"]), k=int(d["k"]), lam=float(d["lam"]),
                                     **common)
    return out


def _timed(fn: Any, log: list) -> Any:
    """``fn`` that appends ``[tokens in the pass, CPU seconds]`` to ``log`` per call."""
    def wrapper(tokens: Any, *args: Any, **kwargs: Any) -> Any:
        t0 = time.thread_time()
        out = fn(tokens, *args, **kwargs)
        log.append([int(tokens.shape[-1]), time.thread_time() - t0])
        return out
    return wrapper


def worker(root: str, assets: str, eager: bool) -> None:
    """Serve JSON-line requests on stdin for the tree at ``root`` (its ``lantern_demo``)."""
    proto = sys.stdout
    sys.stdout = sys.stderr  # library prints must not corrupt the protocol
    sys.path.insert(0, root)
    import torch

    torch.set_num_threads(1)
    from lantern_demo import engine, hub, pipeline  # the tree's own modules

    hub.register_preset(hub.Preset(name="emoji", title="emoji", resolution=64, grid=16, local_dir=assets),
                        replace=True)
    pipe = pipeline.load_pipeline("emoji", "cpu")
    if not eager and hasattr(pipe, "compile"):
        pipe.compile()
    configs = _app_configs()
    target_log: list = []
    drafter_log: list = []
    forward = pipe.target.forward
    pipe.target.forward = _timed(forward, target_log)
    if pipe.drafter is not None:
        pipe.drafter.forward = _timed(pipe.drafter.forward, drafter_log)
    cfg = pipe.target.cfg
    for line in sys.stdin:
        req = json.loads(line)
        cmd = req["cmd"]
        if cmd == "quit":
            break
        if cmd == "info":
            out: dict[str, Any] = {"dim": cfg.dim, "n_layer": cfg.n_layer, "ffn_hidden": cfg.ffn_hidden,
                                   "vocab_size": cfg.vocab_size, "prefix": cfg.cls_token_num,
                                   "rows": configs["ar"].sampling.rows, "threads": torch.get_num_threads()}
        elif cmd == "run":
            cond, _ = pipe.encode_prompt(req["prompt"])
            target_log.clear()
            drafter_log.clear()
            t0, c0 = time.perf_counter(), time.thread_time()
            res = engine.generate(pipe.target, pipe.drafter, cond, configs[req["method"]], pipe.num_tokens,
                                  seed=req["seed"], neighbors=pipe.neighbors, row_length=cfg.grid)
            cpu, wall = time.thread_time() - c0, time.perf_counter() - t0
            out = {"cpu": cpu, "wall": wall, "tokens": res.tokens.tolist(), "passes": list(target_log),
                   "drafter_passes": list(drafter_log)}
        elif cmd == "logits":
            cond, _ = pipe.encode_prompt(req["prompt"])
            toks = torch.tensor(req["tokens"])
            with torch.inference_mode():
                pipe.target.prefill(cond, 2, len(toks) + 1)
                one, _ = forward(toks[:1], torch.arange(1))
                pre = pipe.target.prefill(cond, 2, len(toks) + 1)
                logits, _ = forward(toks, torch.arange(len(toks)))
            out = {"prefill": pre.logits.flatten().tolist(), "one": one.flatten().tolist(),
                   "pass": logits.flatten().tolist()}
        elif cmd == "matmul":
            a, b = torch.randn(MATMUL_N, MATMUL_N), torch.randn(MATMUL_N, MATMUL_N)
            a @ b
            times = []
            for _ in range(5):
                t0 = time.thread_time()
                a @ b
                times.append(time.thread_time() - t0)
            out = {"gflops": 2 * MATMUL_N**3 / min(times) / 1e9}
        else:
            raise ValueError(f"unknown command {cmd!r}")
        proto.write(json.dumps(out) + "\n")
        proto.flush()


# ----------------------------------------------------------------------------- parent


class Worker:
    """One worker process for the tree at ``root``."""

    def __init__(self, root: Path, assets: Path, eager: bool = False):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
               "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONPATH": ""}
        self.proc = subprocess.Popen([sys.executable, __file__, "--worker", "--root", str(root), "--assets", str(assets)]
                                     + ["--eager"] * eager, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=str(root))

    def ask(self, **req: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker exited (code {self.proc.wait()}) on {req}")
        return json.loads(line)

    def close(self) -> None:
        try:
            self.ask(cmd="quit")
        except (RuntimeError, BrokenPipeError, json.JSONDecodeError):
            pass
        self.proc.wait(timeout=30)


def pass_flops(info: dict[str, Any], tokens: int, cache: int) -> float:
    """FLOPs of one target pass: ``tokens`` new entries per row over ``cache`` earlier entries.

    Per row and token: the projections 2 * D * (3D + D + 3F) per layer (q/k/v, out, gate/up/down),
    attention scores and weighted sum 4 * D * (cache + 1) per layer (causal average), and
    lm_head 2 * D * V; times the CFG rows. Elementwise work (norms, rotary, softmax) is left out.
    """
    D, F, V, L = info["dim"], info["ffn_hidden"], info["vocab_size"], info["n_layer"]
    per_token = L * (2 * D * (4 * D + 3 * F) + 4 * D * (cache + (tokens + 1) / 2)) + 2 * D * V
    return info["rows"] * tokens * per_token


def _pass_summary(runs: list[dict[str, Any]], info: dict[str, Any]) -> dict[str, float]:
    """Median time of the one-token passes of AR runs and their FLOPs at the mean cache length."""
    times, flops = [], []
    for r in runs:
        cache = info["prefix"]
        for tokens, sec in r["passes"]:
            if tokens == 1:
                times.append(sec)
                flops.append(pass_flops(info, 1, cache))
            cache += tokens
    t = statistics.median(times)
    f = statistics.fmean(flops)
    return {"seconds": t, "mflop": f / 1e6, "gflops": f / t / 1e9}


def run(old_root: Path, new_root: Path, assets: Path, prompts: list[str], methods: list[str],
        repeats: int, eager: bool = False) -> dict[str, Any]:
    from .paired import paired_entry

    trees = {"old": Worker(old_root, assets, eager), "new": Worker(new_root, assets, eager)}
    try:
        info = trees["new"].ask(cmd="info")
        matmul = {k: [w.ask(cmd="matmul")["gflops"]] for k, w in trees.items()}
        runs: dict[str, dict[str, dict[int, list]]] = {k: {m: {i: [] for i in range(len(prompts))} for m in methods}
                                                       for k in trees}
        for rep in range(repeats):
            order = ["old", "new"] if rep % 2 == 0 else ["new", "old"]
            for i, prompt in enumerate(prompts):
                for m in methods:
                    for k in order:
                        runs[k][m][i].append(trees[k].ask(cmd="run", method=m, prompt=prompt, seed=i))
            print(f"repeat {rep + 1}/{repeats} done", file=sys.stderr, flush=True)
        for k, w in trees.items():
            matmul[k].append(w.ask(cmd="matmul")["gflops"])
        ar0 = runs["new"]["ar"][0][0]["tokens"] if "ar" in methods else list(range(16))
        logits = {k: w.ask(cmd="logits", prompt=prompts[0], tokens=ar0[:16]) for k, w in trees.items()}
    finally:
        for w in trees.values():
            w.close()

    rows = []
    for m in methods:
        per_prompt = {k: [statistics.median(r["cpu"] for r in runs[k][m][i]) for i in range(len(prompts))]
                      for k in trees}
        wall = {k: [statistics.median(r["wall"] for r in runs[k][m][i]) for i in range(len(prompts))]
                for k in trees}
        same = all(r_old["tokens"] == r_new["tokens"] for i in range(len(prompts))
                   for r_old, r_new in zip(runs["old"][m][i], runs["new"][m][i]))
        row: dict[str, Any] = {
            "method": m,
            "old_s": statistics.median(per_prompt["old"]),
            "new_s": statistics.median(per_prompt["new"]),
            "old_per_prompt_s": per_prompt["old"],
            "new_per_prompt_s": per_prompt["new"],
            "paired": {"old": paired_entry(per_prompt["old"], per_prompt["new"])},
            "paired_wall": {"old": paired_entry(wall["old"], wall["new"])},
            "identical_tokens": same,
            "target_passes": statistics.fmean(len(r["passes"]) for i in runs["new"][m] for r in runs["new"][m][i]),
        }
        rows.append(row)
    out: dict[str, Any] = {"rows": rows, "model": info, "prompts": prompts, "repeats": repeats,
                           "matmul_gflops": {k: max(v) for k, v in matmul.items()}}
    if "ar" in methods:
        passes = {}
        for k in trees:
            ar_runs = [r for i in runs[k]["ar"] for r in runs[k]["ar"][i]]
            passes[k] = _pass_summary(ar_runs, info)
        per_prompt = {k: [statistics.median(s for r in runs[k]["ar"][i] for t, s in r["passes"] if t == 1)
                          for i in range(len(prompts))] for k in trees}
        passes["paired"] = {"old": paired_entry(per_prompt["old"], per_prompt["new"])}
        out["one_token_pass"] = passes
    out["logits_max_abs_diff"] = {
        part: max(abs(a - b) for a, b in zip(logits["old"][part], logits["new"][part]))
        for part in ("prefill", "one", "pass")
    }
    return out


def table(res: dict[str, Any]) -> str:
    """Markdown table of a :func:`run` result."""
    lines = ["| method | old CPU s | new CPU s | speed-up new vs old [95% CI] | wall-time speed-up | "
             "identical tokens | target passes |", "|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        p, w = r["paired"]["old"], r["paired_wall"]["old"]
        lines.append(f"| {r['method']} | {r['old_s']:.3f} | {r['new_s']:.3f} | {p['ratio']:.2f}x "
                     f"[{p['ci95'][0]:.2f}, {p['ci95'][1]:.2f}] | {w['ratio']:.2f}x [{w['ci95'][0]:.2f}, "
                     f"{w['ci95'][1]:.2f}] | {'yes' if r['identical_tokens'] else 'NO'} | {r['target_passes']:.1f} |")
    if "one_token_pass" in res:
        ps = res["one_token_pass"]
        p = ps["paired"]["old"]
        lines.append("")
        lines.append(f"target pass at one token: old {ps['old']['seconds'] * 1e3:.2f} ms, new "
                     f"{ps['new']['seconds'] * 1e3:.2f} ms, {p['ratio']:.2f}x [{p['ci95'][0]:.2f}, {p['ci95'][1]:.2f}]; "
                     f"{ps['new']['mflop']:.1f} MFLOP per pass: old {ps['old']['gflops']:.2f} GFLOP/s, new "
                     f"{ps['new']['gflops']:.2f} GFLOP/s; {MATMUL_N}^3 matmul: "
                     f"old worker {res['matmul_gflops']['old']:.1f}, new worker {res['matmul_gflops']['new']:.1f} GFLOP/s")
    d = res["logits_max_abs_diff"]
    lines.append(f"logits max |old - new|: prefill {d['prefill']:.3g}, one-token pass {d['one']:.3g}, "
                 f"16-token pass {d['pass']:.3g}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--against", type=Path, help="the old source tree (e.g. a worktree of a3f98b4)")
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2], help="the new source tree")
    ap.add_argument("--assets", type=Path, help="emoji weights directory (default: the old tree's assets/emoji)")
    ap.add_argument("--methods", default="ar,sd,eagle,lantern,lantern++,sjd,sjd+lantern")
    ap.add_argument("--prompts", type=int, default=6, help="the first N of ui.EXAMPLES")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=Path("docs/bench/versus.json"))
    ap.add_argument("--eager", action="store_true", help="keep the eager one-token pass (no LanternPipeline.compile)")
    args = ap.parse_args(argv)
    if args.worker:
        worker(str(args.root), str(args.assets), args.eager)
        return
    if args.against is None:
        ap.error("--against is required")
    assets = args.assets or args.against / "assets" / "emoji"
    sys.path.insert(0, str(args.root))
    from lantern_demo.ui import EXAMPLES

    prompts = EXAMPLES[: args.prompts]
    res = run(args.against.resolve(), args.root.resolve(), assets.resolve(), prompts, args.methods.split(","),
              args.repeats, args.eager)
    res["args"] = {k: str(v) for k, v in vars(args).items() if k != "worker"}
    res["note"] = ("CPU time of one thread per worker; the two workers never compute at the same time; "
                   "wall-time ratios in paired_wall")
    print(table(res))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(res, indent=1))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
