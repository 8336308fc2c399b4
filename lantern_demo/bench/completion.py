"""Prefix completion: how recognisable the emoji GPT's samples become when it is given
the first r token rows of the real emoji.

    python -m lantern_demo.bench.completion [--rows 0,3,5,7,9] [--num-prompts 128]
        [--temperature 1] [--out docs/bench/completion.json]

For each r the real image's VQ tokens (with the background rule, as the GPT was
trained) fill rows 0..r-1, the GPT samples the rest with the app's sampling
(``presets.sampling("emoji")``; ``--temperature 0`` for greedy), and the benchmark's
eval encoder ranks the prompt among its group of 32 (retrieval top-1, as
``--split train`` of the benchmark does for whole samples). r = 0 is plain
sampling; the real images and their decoded VQ tokens are the ceilings. It tells
apart two failures: picking the wrong object from the caption (low at r = 0,
high once the object is started) and not being able to draw it (low even with
half the image given).

Prompts: training captions by default (``--split heldout`` for unseen emojis),
chosen like the benchmark's (``bench.settings.prompt_set``). Samples are drawn in
batches (``train.self_samples.sample_batch``), so 128 prompts and five values of
r take about a minute on two CPU cores.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from ..sampling import SamplingConfig
from . import metrics

GROUP = 32  # prompts per retrieval group (the benchmark's --num-prompts 32 for recognisability)


def grouped_retrieval(image_feats: np.ndarray, text_feats: np.ndarray, group: int = GROUP) -> int:
    """Images whose own prompt is the most similar within consecutive groups of ``group`` prompts."""
    hits = 0
    for g in range(0, len(image_feats), group):
        n = len(image_feats[g : g + group])
        hits += round(metrics.retrieval_accuracy(image_feats[g : g + group], text_feats[g : g + group]) * n)
    return hits


def real_tokens(pipe, images: np.ndarray, background: int | None) -> torch.Tensor:
    """VQ token ids [N, grid**2] of uint8 images [N, H, W, 3], background rule applied.

    Encoding needs the whole ``diffusers.VQModel`` (the pipeline holds only its decoder),
    read again from the preset's ``vq`` weights."""
    from diffusers import VQModel

    from ..train.train_vq import encode_ids

    vq = VQModel.from_pretrained(str(pipe.preset.fetch("vq"))).to(pipe.device)
    with torch.no_grad():
        return encode_ids(vq, images, background=background).reshape(len(images), -1)


def measure(pipe, ds, idx: np.ndarray, prompts: list[str], encoder, rows: list[int], sampling: SamplingConfig,
            seed: int = 0, batch: int = 64, log=print) -> dict:
    """Retrieval hits of prefix completions for every r in ``rows``; see the module docstring."""
    gpt, text = pipe.target, pipe.text_encoder
    grid = gpt.cfg.grid
    background = _background_code(Path(pipe.preset.local_dir))
    real = real_tokens(pipe, ds.images[idx], background)
    text_feats = encoder.embed_texts(prompts)
    cap_ids, cap_mask, _ = text.tokenize(prompts)
    out = {
        "prompts": len(prompts), "group": GROUP, "background_code": background,
        "sampling": {"cfg_scale": sampling.cfg_scale, "temperature": sampling.temperature, "top_k": sampling.top_k},
        "real_images": grouped_retrieval(encoder.embed_images(ds.images[idx]), text_feats),
        "real_tokens_decoded": grouped_retrieval(encoder.embed_images(pipe.vq.decode(real).numpy()), text_feats),
        "rows": [],
    }
    from ..train.self_samples import sample_tokens

    for r in rows:
        t0 = time.time()
        n0 = r * grid
        toks = sample_tokens(gpt, text, cap_ids, cap_mask, sampling, seed=seed, batch=batch, log=lambda m: None,
                             prefix=real[:, :n0] if n0 else None)
        hits = grouped_retrieval(encoder.embed_images(pipe.vq.decode(toks).numpy()), text_feats)
        rest = toks[:, n0:] == real[:, n0:]
        agree = float(rest.float().mean()) if rest.numel() else 1.0
        out["rows"].append({"prefix_rows": r, "retrieval_hits": hits, "agreement_after_prefix": agree,
                            "seconds": round(time.time() - t0, 1)})
        log(f"r {r:2d}: own prompt first for {hits}/{len(prompts)}; tokens after the prefix equal to the real "
            f"image's: {agree:.3f} ({time.time() - t0:.0f}s)")
    return out


def _background_code(model_dir: Path) -> int | None:
    """The background rule's code of a model we trained (its training metrics), if recorded."""
    from ..train.retrain import load_metrics

    return load_metrics(model_dir).get("tokens", {}).get("background_code")


def table(res: dict) -> str:
    n = res["prompts"]
    lines = [f"| prefix rows | own prompt first (of {n}) | tokens after the prefix = real |", "|---|---|---|"]
    lines += [f"| {r['prefix_rows']} | {r['retrieval_hits']} | {r['agreement_after_prefix']:.3f} |" for r in res["rows"]]
    lines += [f"| real images | {res['real_images']} | |", f"| real VQ tokens, decoded | {res['real_tokens_decoded']} | |"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    from ..pipeline import load_pipeline
    from ..presets import EMBEDDED, sampling as preset_sampling
    from .features import load as load_encoder
    from .settings import prompt_set

    emoji = preset_sampling(EMBEDDED)

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="0,3,5,7,9", help="comma list of prefix rows r (0..grid)")
    ap.add_argument("--num-prompts", type=int, default=128)
    ap.add_argument("--split", choices=("train", "heldout"), default="train")
    ap.add_argument("--temperature", type=float, default=emoji.temperature, help="0: greedy")
    ap.add_argument("--cfg-scale", type=float, default=emoji.cfg_scale)
    ap.add_argument("--top-k", type=int, default=emoji.top_k)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--data", type=Path, default=None, help="emoji dataset cache dir")
    ap.add_argument("--out", type=Path, default=None, help="write the result as JSON here")
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    rows = [int(x) for x in a.rows.split(",") if x.strip()]
    pipe = load_pipeline("emoji", device="cpu")
    if any(not 0 <= r <= pipe.target.cfg.grid for r in rows):
        raise SystemExit(f"--rows must lie in 0..{pipe.target.cfg.grid}")
    encoder = load_encoder()
    if encoder is None:
        raise SystemExit("no eval encoder in assets/eval (python -m lantern_demo.bench.features --train)")
    prompts, idx, ds, desc = prompt_set("emoji", a.num_prompts, a.seed, None, a.data, split=a.split)
    sampling = SamplingConfig(cfg_scale=a.cfg_scale, temperature=a.temperature, top_k=a.top_k)
    print(f"{desc}; sampling {sampling}", flush=True)
    res = measure(pipe, ds, idx, prompts, encoder, rows, sampling, seed=a.seed,
                  log=lambda m: print(m, flush=True))
    res["description"] = desc
    print(table(res))
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(res, indent=2))
        print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
