"""Which compiled form of the one-token decode pass pays on a CPU (the record behind ``lantern_demo.compiled_pass``)?

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 python docs/experiments/compiled_decode.py --json docs/experiments/compiled_decode.json

Times, on the shipped embedded target (CFG: 2 rows, one token per pass, 40 passes after
the prefill, median of 7 repeats):

- ``engine``: ``GPT.forward``, eager;
- ``engine_compiled``: ``GPT.forward`` after ``GPT.compile_one_token()``, what the app runs
  (``lantern_demo.compiled_pass``: the ``compiled_math`` form below, attending only to the
  entries written so far through a symbolic length);
- ``step``: the same pass written as one flat function with static shapes (per-layer
  caches ``[R, H, capacity, hd]`` written at a position tensor, attention over the whole
  buffer with a mask, a real-valued rotary), eager;
- ``compiled``: ``torch.compile(step, fullgraph=True, dynamic=False)``: one graph for
  every cache length (attention over the whole buffer);
- ``compiled_frozen``: the same with inductor's ``freezing`` (weights as constants)
  and ``mode="max-autotune-no-cudagraphs"`` (inductor may pick its own GEMM kernels);
- ``compiled_math``: ``compiled`` with the one-query attention as products and sums
  instead of ``scaled_dot_product_attention``;
- ``compiled_math_cpp``: that with inductor's ``cpp_wrapper`` (the graph's wrapper in C++);
- ``matmuls``: only the pass's 25 matrix products (same weights, same shapes), the
  floor of any pass that keeps fp32 and the library's matmul.

Logits of every variant are checked against ``engine`` (max abs difference printed).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from lantern_demo.checkpoints import load_gpt
from lantern_demo.rope import rope_table
from lantern_demo.text import load_text_encoder

ROOT = Path(__file__).resolve().parents[2]
PASSES = 40


def flat_step(gpt, sdpa: bool = True):
    """(step, fresh_caches): the decode pass as one function of (token [1], position [1], caches, slot [1]).

    ``sdpa=False`` writes the one-query attention as elementwise products and sums (which
    inductor fuses into loops) instead of calling ``scaled_dot_product_attention``."""
    cfg, R = gpt.cfg, 2
    D, H, hd = cfg.dim, cfg.n_head, cfg.head_dim
    cap = gpt.cache.prefix + gpt.cache.capacity
    layers = [(b.self_attn._decode[0], b.self_attn._decode[1], b.mlp._decode[0], b.mlp._decode[1],
               b.input_layernorm.weight.detach(), b.post_attention_layernorm.weight.detach()) for b in gpt.layers]
    emb, head, norm = gpt.embed_tokens.weight.detach(), gpt._decode_head, gpt.norm.weight.detach()
    table = rope_table(cfg.grid, hd)  # [grid^2, hd/2, 2]
    cos, sin = table[..., 0].contiguous(), table[..., 1].contiguous()
    eps = cfg.norm_eps

    def step(tok, pos, caches, slot):
        h = emb[tok].expand(R, 1, D)
        c, s = cos[pos][:, None, :], sin[pos][:, None, :]  # [1, 1, hd/2]
        visible = (torch.arange(cap) <= slot)[None, :]  # [1, cap]
        for i, (w_qkv, w_o, w_gu, w_d, n1, n2) in enumerate(layers):
            qkv = (F.rms_norm(h, (D,), n1, eps) @ w_qkv).view(R, 1, 3, H, hd // 2, 2)
            a, b = qkv[:, :, :2, ..., 0], qkv[:, :, :2, ..., 1]  # [R, 1, 2, H, hd/2]
            qk = torch.stack([a * c - b * s, b * c + a * s], -1).flatten(-2)  # [R, 1, 2, H, hd]
            k_cache, v_cache = caches[2 * i], caches[2 * i + 1]  # [R, H, cap, hd]
            k_cache.index_copy_(2, slot, qk[:, :, 1].transpose(1, 2))
            v_cache.index_copy_(2, slot, qkv[:, :, 2].flatten(-2).transpose(1, 2))
            if sdpa:
                y = F.scaled_dot_product_attention(qk[:, :, 0].transpose(1, 2), k_cache, v_cache,
                                                   attn_mask=visible).transpose(1, 2)
            else:  # one query [R, H, 1, hd] against keys [R, H, cap, hd]
                scores = (qk[:, :, 0].transpose(1, 2) * k_cache).sum(-1) * hd ** -0.5  # [R, H, cap]
                weights = scores.masked_fill(~visible, float("-inf")).softmax(-1)
                y = (weights[..., None] * v_cache).sum(2)[:, None]  # [R, 1, H, hd]
            h = h + y.reshape(R, 1, D) @ w_o
            gate, up = (F.rms_norm(h, (D,), n2, eps) @ w_gu).chunk(2, -1)
            h = h + (F.silu(gate) * up) @ w_d
        return F.rms_norm(h, (D,), norm, eps) @ head

    prefix_kv = [gpt.cache.kv[i][t].contiguous() for i in range(cfg.n_layer) for t in range(2)]
    return step, (lambda: [x.clone() for x in prefix_kv])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(1)
    gpt = load_gpt(ROOT / "assets/emoji/target").eval()
    cond = load_text_encoder(ROOT / "assets/emoji/text_encoder").encode(["red heart"])
    n = gpt.cfg.grid ** 2
    tokens = torch.randint(0, gpt.cfg.vocab_size, (PASSES,), generator=torch.Generator().manual_seed(0))
    results: dict = {}
    with torch.inference_mode():
        gpt.prefill(cond, 2, n)
        step, fresh = flat_step(gpt)
        P = gpt.cache.prefix

        def engine():
            gpt.prefill(cond, 2, n)
            return torch.stack([gpt.forward(tokens[t:t + 1], torch.tensor([t]))[0][:, 0] for t in range(PASSES)], 1)

        def run(fn):
            caches = fresh()
            return torch.stack([fn(tokens[t:t + 1], torch.tensor([t]), caches, torch.tensor([P + t]))[:, 0]
                                for t in range(PASSES)], 1)

        mats = [w for b in gpt.layers for w in (*b.self_attn._decode, *b.mlp._decode)] + [gpt._decode_head]
        inputs = [torch.randn(2, 1, w.shape[0]) for w in mats]

        def matmuls():
            for _ in range(PASSES):
                for x, w in zip(inputs, mats):
                    x @ w

        def engine_compiled():
            gpt.compile_one_token()
            try:
                return engine()
            finally:
                gpt.compile_one_token(False)

        reference = engine()
        variants = {"engine": engine, "engine_compiled": engine_compiled, "step": lambda: run(step)}
        t0 = time.perf_counter()
        compiled = torch.compile(step, fullgraph=True, dynamic=False)
        run(compiled)
        results["compile_s"] = time.perf_counter() - t0
        variants["compiled"] = lambda: run(compiled)
        import torch._inductor.config as inductor_config
        inductor_config.freezing = True
        t0 = time.perf_counter()
        frozen = torch.compile(step, fullgraph=True, dynamic=False, mode="max-autotune-no-cudagraphs")
        run(frozen)
        results["compile_frozen_s"] = time.perf_counter() - t0
        variants["compiled_frozen"] = lambda: run(frozen)
        inductor_config.freezing = False
        step_math, _ = flat_step(gpt, sdpa=False)
        t0 = time.perf_counter()
        compiled_math = torch.compile(step_math, fullgraph=True, dynamic=False)
        run(compiled_math)
        results["compile_math_s"] = time.perf_counter() - t0
        variants["compiled_math"] = lambda: run(compiled_math)
        step_math2, _ = flat_step(gpt, sdpa=False)
        t0 = time.perf_counter()
        compiled_cpp = torch.compile(step_math2, fullgraph=True, dynamic=False, options={"cpp_wrapper": True})
        run(compiled_cpp)
        results["compile_math_cpp_s"] = time.perf_counter() - t0
        variants["compiled_math_cpp"] = lambda: run(compiled_cpp)
        results["max_abs_logit_diff"] = {k: float((f() - reference).abs().max()) for k, f in variants.items()}
        variants["matmuls"] = matmuls
        times: dict[str, list[float]] = {k: [] for k in variants}
        for r in range(args.repeats):  # interleaved, rotated order
            keys = list(variants)
            for k in keys[r % len(keys):] + keys[:r % len(keys)]:
                t0 = time.perf_counter()
                variants[k]()
                times[k].append((time.perf_counter() - t0) / PASSES * 1e3)
    results["ms_per_pass"] = {k: statistics.median(v) for k, v in times.items()}
    results["runs_ms_per_pass"] = times
    for k, v in results["ms_per_pass"].items():
        print(f"{k:16s} {v:6.2f} ms/pass")
    print(json.dumps({k: v for k, v in results.items() if k != "runs_ms_per_pass"}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
