"""Engine micro-benchmark on a tiny randomly initialised target + drafter.

    python -m lantern_demo.bench_engine [--tokens 256] [--repeats 3] [--json out.json]

Per method: target passes (NFE, prefill included), mean accepted length
(tokens per target pass), wall time of a 256-token generation (median over
repeats and seeds), speed-up over AR measured in the same run, and the
engine's own cost per verification step: acceptance-logic time next to the
target-forward time. It measures the engine, not image quality: the weights
are random. ``tiny_random_pair`` builds a drafter that knows the target's
"bigram" path (token embedding -> lm_head), so drafts are often but not
always right, as with a trained drafter.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

import torch

from .drafter import Drafter
from .engine import generate
from .gpt import GPT, GPTConfig
from .methods import DecodeConfig
from .neighbors import build_neighbor_table
from .sampling import SamplingConfig


def tiny_random_pair(
    seed: int = 0, vocab: int = 512, dim: int = 128, n_layer: int = 4, grid: int = 16, mix: float = 1.0,
    **config: Any,
) -> tuple[GPT, Drafter, torch.Tensor]:
    """A random LlamaGen-architecture target, a drafter that mimics part of it, and a condition.

    The target's token embeddings have unit scale and its residual writers
    (attention out and MLP down projections) are scaled by ``mix``, so its
    next-token logits are mostly lm_head(norm(embed(t))) plus a context-dependent part; the drafter passes its token embedding
    straight through (fc = [I, 0], its layer's writers zeroed), so it predicts
    exactly that bigram part. lm_head is scaled so that distributions are peaked
    like a trained model's (logit std about 3). ``config`` overrides ``GPTConfig``
    fields (e.g. ``cls_token_num=1``). Returns (target, drafter, cond
    [cls_token_num, caption_dim]).
    """
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    cfg = GPTConfig(**{**dict(vocab_size=vocab, dim=dim, n_layer=n_layer, n_head=4, ffn_hidden=2 * dim,
                               cls_token_num=8, caption_dim=32, grid=grid), **config})
    target = GPT(cfg).eval()
    drafter = Drafter(cfg.as_drafter(), lm_head=target.lm_head).eval()
    with torch.no_grad():
        target.lm_head.weight.normal_(0.0, 3.0 / dim**0.5, generator=gen)
        target.embed_tokens.weight.normal_(0.0, 1.0, generator=gen)
        for block in target.layers:
            block.self_attn.o_proj.weight.mul_(mix)
            block.mlp.down_proj.weight.mul_(mix)
        drafter.embed_tokens.weight.copy_(target.embed_tokens.weight)
        drafter.fc.weight.zero_()
        drafter.fc.weight[:, :dim] = torch.eye(dim)
        for block in drafter.layers:
            block.self_attn.o_proj.weight.zero_()
            block.mlp.down_proj.weight.zero_()
    cond = torch.randn(cfg.cls_token_num, cfg.caption_dim, generator=gen)
    return target, drafter, cond


def default_configs(sampling: SamplingConfig) -> dict[str, DecodeConfig]:
    """The methods compared, with their drafting shapes."""
    return {
        "ar": DecodeConfig("ar", sampling=sampling),
        "sd (chain 4)": DecodeConfig("sd", gamma=4, sampling=sampling),
        "eagle (tree 59)": DecodeConfig("eagle", depth=5, branching=10, tree_tokens=59, sampling=sampling),
        "lantern (tree 59, d=0.2 k=16)": DecodeConfig("lantern", depth=5, branching=10, tree_tokens=59, delta=0.2, k=16, sampling=sampling),
        "lantern (chain 4, d=0.2 k=16)": DecodeConfig("lantern", draft="chain", gamma=4, delta=0.2, k=16, sampling=sampling),
        "lantern++ (static 32, l=2 k=16)": DecodeConfig("lantern++", depth=5, branching=6, tree_tokens=32, lam=2.0, k=16, sampling=sampling),
    }


def run(tokens: int, repeats: int, seeds: int, temperature: float) -> list[dict]:
    torch.set_num_threads(max(1, torch.get_num_threads()))
    target, drafter, cond = tiny_random_pair(grid=int(round(tokens**0.5)))
    neighbors = build_neighbor_table(target.lm_head.weight.detach(), 64)
    sampling = SamplingConfig(cfg_scale=3.0, temperature=temperature)
    configs = default_configs(sampling)
    rows = []
    for name, config in configs.items():
        walls, stats = [], []
        for seed in range(seeds):
            for _ in range(repeats):
                res = generate(target, drafter, cond, config, tokens, seed=seed, neighbors=neighbors)
                walls.append(res.stats["wall_time"])
            stats.append(res.stats)
        mean = {k: statistics.fmean(s[k] for s in stats) for k in stats[0]}
        rows.append({"method": name, "config": config.method, "wall_time_median": statistics.median(walls),
                     "wall_time_min": min(walls), "wall_time_max": max(walls), **mean})
    ar_time = rows[0]["wall_time_median"]
    for row in rows:
        row["speedup_vs_ar"] = ar_time / row["wall_time_median"]
    return rows


def table(rows: list[dict]) -> str:
    head = "| method | NFE | tokens/pass | wall (s) | speed-up vs AR | accept logic / step (ms) | target fwd / step (ms) | drafter (s) |"
    lines = [head, "|" + "---|" * 8]
    for r in rows:
        lines.append(
            f"| {r['method']} | {r['nfe']:.0f} | {r['mean_accepted']:.2f} | {r['wall_time_median']:.3f} | "
            f"{r['speedup_vs_ar']:.2f}x | {r['accept_time_per_step'] * 1e3:.2f} | "
            f"{r['target_time_per_step'] * 1e3:.2f} | {r['draft_time']:.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--json", type=Path, default=Path("artifacts/bench_engine.json"))
    args = ap.parse_args(argv)
    rows = run(args.tokens, args.repeats, args.seeds, args.temperature)
    print(f"tiny random target + drafter, {args.tokens} tokens, temperature {args.temperature}, "
          f"{torch.get_num_threads()} threads")
    print(table(rows))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
