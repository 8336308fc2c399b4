"""A prepared GPU check of the LlamaGen presets, offline, with random weights.

    python -m lantern_demo.gpu_check [--device cuda] [--reduced] [--out gpu_check.json] [--budget-s 420]

For each LlamaGen preset (``llamagen-t2i``, 256 px; ``llamagen-t2i-512``, 512 px) it builds
every component at its real size with random weights in the dtype the app loads them in
(GPT-XL target, its one-layer drafter and the flan-t5-xl encoder in bf16 on a GPU, the
VQ_16 decoder in float32), puts them in the app's ``LanternPipeline`` and generates one
image for one prompt with each method (AR, SD, EAGLE-2, LANTERN, LANTERN++, SJD,
SJD+LANTERN) with the page's start-up settings for the preset, streaming as the app does. It reports per
preset the weights' GPU memory and the peak GPU memory, and per method the target passes,
the time per target pass and per drafter pass (drafting time divided by drafter passes),
and the end-to-end time per image. Random weights give near-uniform distributions, so
acceptance and speed-ups say nothing about the trained models; memory and per-pass costs
do. It also checks that greedy speculative decoding reproduces greedy AR token for token on
the device in float32 (``tiny.tiny_random_pair``), and whether the ZeroGPU path (the
``spaces`` package behind ``spaces_compat.GPU``) is present. Nothing is downloaded.

The T5 encoder is a real ``transformers.T5EncoderModel`` of flan-t5-xl's configuration;
its tokenizer is a word-level stand-in built in memory (flan-t5-xl's vocabulary is not
available offline; the encoder's cost does not depend on it). ``--reduced`` shrinks every
component (for a CPU: the test suite runs it). ``--budget-s`` skips the remaining runs once
that much time has passed, so that the whole check fits one 10-minute command.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from .spaces_compat import HAVE_SPACES  # before torch, as on a ZeroGPU Space

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast, T5Config, T5EncoderModel

from .checkpoints import count_parameters
from .engine import generate
from .methods import METHODS, DecodeConfig
from .gpt import GPT, GPTConfig
from .hub import get_preset
from .neighbors import build_neighbor_table
from .pipeline import LanternPipeline
from .sampling import SamplingConfig
from .sizes import llamagen_sizes, t5_xl_config
from .text import T5TextEncoder
from .tiny import drafter_for, tiny_random_pair
from .presets import config as preset_config, controls
from .ui.stream import DECODE_SHARE
from .vq import VQDecoder, llamagen_vq_config
from .vq_net import VQDecoderConfig, VQDecoderNet

PRESETS = ("llamagen-t2i", "llamagen-t2i-512")
PROMPT = "a red cat sitting on a wooden table in the sun"
GiB = 1024**3

#: Greedy configurations that must reproduce greedy AR (the relaxed ones with their relaxation off).
GREEDY_CONFIGS = (
    DecodeConfig("sd", gamma=4),
    DecodeConfig("eagle", depth=4, branching=4, tree_tokens=16),
    DecodeConfig("lantern", depth=4, branching=4, tree_tokens=16, delta=0.0, k=8),
    DecodeConfig("lantern++", depth=4, branching=3, tree_tokens=12, lam=1.0, k=8),
    DecodeConfig("sjd", window=8),
    DecodeConfig("sjd+lantern", window=8, coupled=True, delta=0.0, k=8),
)


# ----------------------------------------------------------------------------- components


def gpt_config(name: str, reduced: bool) -> GPTConfig:
    """The preset's GPT-XL config, or a small one of the same layout (caption width 32) with ``reduced``."""
    grid = get_preset(name).grid
    if reduced:
        return GPTConfig.llamagen_xl(vocab_size=256, dim=64, n_layer=2, n_head=4, ffn_hidden=128,
                                     cls_token_num=8, caption_dim=32, grid=grid // 4)
    return GPTConfig.llamagen_xl(grid=grid)


def vq_config(reduced: bool, codebook_size: int) -> VQDecoderConfig:
    """VQ_16's decoder (16 px per token), or a small one with 4 px per token."""
    if reduced:
        kw = llamagen_vq_config(ch=8, ch_mult=(1, 2, 2), z_channels=16, codebook_size=codebook_size,
                                num_res_blocks=1, norm_groups=4)
    else:
        kw = llamagen_vq_config(codebook_size=codebook_size)
    return VQDecoderConfig.from_vqmodel(kw)


def t5_config(reduced: bool, d_model: int) -> T5Config:
    """flan-t5-xl's encoder config, or a two-layer one of width ``d_model``."""
    if reduced:
        return T5Config(vocab_size=64, d_model=d_model, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                        feed_forward_proj="gated-gelu", tie_word_embeddings=False)
    return t5_xl_config()


def word_tokenizer(text: str) -> PreTrainedTokenizerFast:
    """A T5-like tokenizer over the words of ``text`` (pad 0, ``</s>`` 1 appended, unk 2), built in memory."""
    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2}
    for word in text.lower().split():
        vocab.setdefault(word, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")


def build_pipeline(name: str, device: torch.device, dtype: torch.dtype, reduced: bool,
                   seed: int = 0) -> LanternPipeline:
    """The preset's pipeline with random weights: target, drafter and T5 in ``dtype``, VQ in float32
    (as ``pipeline.load_pipeline`` loads them), neighbour table of the preset's k (1000 at full size)."""
    torch.manual_seed(seed)
    cfg = gpt_config(name, reduced)
    with torch.device(device):
        target = GPT(cfg).eval()
        drafter = drafter_for(target)
        vq = VQDecoderNet(vq_config(reduced, cfg.vocab_size)).eval().requires_grad_(False)
        t5 = T5EncoderModel(t5_config(reduced, cfg.caption_dim)).eval().requires_grad_(False)
    target, drafter, t5 = target.to(dtype), drafter.to(dtype), t5.to(dtype)
    text = T5TextEncoder(t5, word_tokenizer(PROMPT), max_length=cfg.cls_token_num)
    decoder = VQDecoder(vq, cfg.grid)
    max_k = min(int(controls(name)["k"]), cfg.vocab_size - 1)
    neighbors = build_neighbor_table(decoder.raw_codebook().to(device), max_k)
    return LanternPipeline(get_preset(name), text, target, drafter, decoder, neighbors, device)


def method_config(name: str, method: str, max_k: int) -> DecodeConfig:
    """``method`` with the page's start-up controls for preset ``name`` (``presets.controls``),
    drafting its default shape (the page's "auto"), k capped at the neighbour table's width."""
    values = controls(name)
    return preset_config(name, values, method=method, draft="auto", k=min(int(values["k"]), max_k))


# ----------------------------------------------------------------------------- measurements


def memory(device: torch.device) -> dict[str, float | None]:
    """GPU memory now and at its peak since the last reset (bytes; None off CUDA)."""
    if device.type != "cuda":
        return {"allocated_bytes": None, "peak_bytes": None}
    return {"allocated_bytes": float(torch.cuda.memory_allocated(device)),
            "peak_bytes": float(torch.cuda.max_memory_allocated(device))}


def run_method(pipe: LanternPipeline, name: str, method: str, seed: int = 0) -> dict[str, Any]:
    """One image with ``method`` through ``pipe.stream`` as the app streams it; its costs."""
    config = method_config(name, method, pipe.max_k)
    final = None
    for final in pipe.stream(PROMPT, config, seed, decode_share=DECODE_SHARE):
        pass
    assert final is not None and final.done and final.image is not None
    st = final.stats
    passes = st["drafter_passes"]
    return {
        "nfe": st["nfe"],
        "tokens_per_pass": st["mean_accepted"],
        "target_pass_s": st["target_time"] / st["nfe"],
        "drafter_pass_s": st["draft_time"] / passes if passes else None,
        "drafter_passes": passes,
        "engine_s": st["wall_time"],
        "end_to_end_s": st["end_to_end_time"],
        "image_size": list(final.image.size),
    }


def warm_up(pipe: LanternPipeline) -> None:
    """A prefill and a pass of the target and the drafter and a VQ decode, so that the first
    method's times exclude the device's one-time set-up (kernel loading, library handles)."""
    cond, _ = pipe.encode_prompt(PROMPT)
    zero = torch.zeros(1, dtype=torch.long, device=pipe.device)
    with torch.inference_mode():
        prefix = pipe.target.prefill(cond, 2, 4)
        _, hidden = pipe.target.forward(zero, zero)
        pipe.drafter.prefill(cond, 2, prefix, 4)
        pipe.drafter.forward(zero, hidden, zero)
    pipe.vq.decode(torch.zeros(1, pipe.num_tokens, dtype=torch.long))


def check_preset(name: str, device: torch.device, dtype: torch.dtype, reduced: bool,
                 deadline: float) -> dict[str, Any]:
    """Build one preset, run every method (until ``deadline``, a ``time.perf_counter`` value), free it.

    ``weights_bytes``: GPU memory held after the build; ``peak_bytes``: its peak while generating
    (weights, caches, activations; the random initialisation's float32 copies are not counted)."""
    t0 = time.perf_counter()
    pipe = build_pipeline(name, device, dtype, reduced)
    warm_up(pipe)
    _sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    out: dict[str, Any] = {
        "resolution": get_preset(name).resolution if not reduced else pipe.vq.image_size[0],
        "tokens": pipe.num_tokens,
        "build_s": time.perf_counter() - t0,  # warm-up included
        "parameters": {"target": count_parameters(pipe.target), "drafter": count_parameters(pipe.drafter),
                       "t5_encoder": count_parameters(pipe.text_encoder.model), "vq_decoder": count_parameters(pipe.vq.vq)},
        "weights_bytes": memory(device)["allocated_bytes"],
        "methods": {},
    }
    for method in METHODS:
        if time.perf_counter() > deadline:
            out["methods"][method] = {"skipped": "time budget spent"}
            continue
        out["methods"][method] = run_method(pipe, name, method)
    out["peak_bytes"] = memory(device)["peak_bytes"]
    del pipe
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return out


def greedy_check(device: torch.device, grid: int) -> dict[str, Any]:
    """Greedy speculative == greedy AR, token for token, on ``device`` in float32 (a tiny random pair)."""
    target, drafter, cond = tiny_random_pair(seed=0, grid=grid)
    target, drafter, cond = target.to(device), drafter.to(device), cond.to(device)
    neighbors = build_neighbor_table(target.lm_head.weight.detach()[:, :8], 16)
    greedy = SamplingConfig(cfg_scale=3.0, temperature=0.0)
    n = grid * grid
    ar = generate(target, None, cond, DecodeConfig("ar", sampling=greedy), n).tokens.tolist()
    methods = {}
    for config in GREEDY_CONFIGS:
        res = generate(target, drafter if config.needs_drafter else None, cond, replace(config, sampling=greedy), n,
                       neighbors=neighbors)
        tokens = res.tokens.tolist()
        mismatch = next((i for i, (a, b) in enumerate(zip(tokens, ar)) if a != b), None)
        methods[config.method] = {"equal": tokens == ar, "first_mismatch": mismatch, "nfe": res.stats["nfe"],
                                  "accepted_drafts": res.stats["accepted_drafts"]}
    return {"dtype": "float32", "tokens": n, "ar_nfe": float(n), "methods": methods,
            "all_equal": all(m["equal"] for m in methods.values())}


def zero_gpu_path() -> dict[str, Any]:
    """Whether ``spaces_compat.GPU`` is ``spaces.GPU`` here (ZeroGPU) or its no-op stand-in."""
    return {"spaces_installed": HAVE_SPACES, "decorator": "spaces.GPU" if HAVE_SPACES else "no-op",
            "SPACES_ZERO_GPU": os.environ.get("SPACES_ZERO_GPU")}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ----------------------------------------------------------------------------- report


def run_check(device: str, reduced: bool, budget_s: float, presets: tuple[str, ...] = PRESETS) -> dict[str, Any]:
    """The whole check as one JSON-able dict (see the module docstring)."""
    dev = torch.device(device)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    t0 = time.perf_counter()
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "torch": torch.__version__, "reduced": reduced, "dtype": str(dtype).removeprefix("torch."),
        "prompt": PROMPT, "zero_gpu": zero_gpu_path(),
        "greedy_check": greedy_check(dev, grid=4 if reduced else 16),
        "estimates": {name: llamagen_sizes(grid=get_preset(name).grid) for name in presets},
        "presets": {},
    }
    deadline = t0 + budget_s
    for name in presets:
        report["presets"][name] = check_preset(name, dev, dtype, reduced, deadline)
    report["elapsed_s"] = time.perf_counter() - t0
    return report


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.1f}"


def table(report: dict[str, Any]) -> str:
    """A short markdown table of the report."""
    lines = [f"device {report['device']}, {report['dtype']}, torch {report['torch']}"
             f"{' (reduced sizes)' if report['reduced'] else ''}; ZeroGPU path: {report['zero_gpu']['decorator']}; "
             f"greedy speculative == greedy AR (float32): {report['greedy_check']['all_equal']}", "",
             "| preset | method | target passes | tokens/pass | target pass (ms) | drafter pass (ms) | image (s) |",
             "|---|---|---|---|---|---|---|"]
    for name, p in report["presets"].items():
        for method, r in p["methods"].items():
            if "skipped" in r:
                lines.append(f"| {name} | {method} | skipped: {r['skipped']} | | | | |")
                continue
            lines.append(f"| {name} | {method} | {r['nfe']:.0f} | {r['tokens_per_pass']:.2f} | {_ms(r['target_pass_s'])} "
                         f"| {_ms(r['drafter_pass_s'])} | {r['end_to_end_s']:.2f} |")
    lines.append("")
    for name, p in report["presets"].items():
        est = report["estimates"][name]["total_bytes"] / GiB
        measured = "n/a" if p["peak_bytes"] is None else f"{p['peak_bytes'] / GiB:.2f} GiB peak, " \
                                                          f"{p['weights_bytes'] / GiB:.2f} GiB weights"
        lines.append(f"{name}: GPU memory {measured} (computed estimate at full size {est:.2f} GiB); "
                     f"built in {p['build_s']:.1f} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--reduced", action="store_true", help="small components (a CPU run, the tests)")
    ap.add_argument("--out", type=Path, default=Path("gpu_check.json"))
    ap.add_argument("--budget-s", type=float, default=420.0, help="skip the remaining runs after this many seconds")
    args = ap.parse_args(argv)
    report = run_check(args.device, args.reduced, args.budget_s)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(table(report))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
