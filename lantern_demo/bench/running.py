"""Running the benchmark and merging its records: one shard of prompts, then the summaries.

``run_shard`` generates every setting on a shard of the prompts (timed ``--repeats``
times, interleaved); ``merge`` turns the gathered records into the result's rows:
per-setting summaries, paired speed-ups over the exact references, image quality,
and ``analysis``, the numbers docs/benchmarks.md discusses.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import statistics
import time
from collections import Counter
from dataclasses import asdict
from typing import Any

import numpy as np
import torch
from transformers import CLIPModel, CLIPProcessor

from ..methods import BASELINES, METHOD_INFO, RELAXED, DecodeConfig
from . import metrics
from .paired import paired_entry, speedup
from .settings import Setting

SCHEMA = "lantern-bench v1"

#: Row, per-prompt record and summary keys that are timings (they differ between runs;
#: everything else is identical between a single-process and a sharded run).
TIMING_KEYS = (
    "wall_time", "tokens_per_s", "first_token_latency", "draft_time", "target_time", "sample_time", "accept_time",
    "cache_time", "accept_time_per_step", "target_time_per_step", "decode_time", "stream_time", "final_decode_time",
    "end_to_end_time", "e2e_time", "text_time", "wall_times", "e2e_times", "paired",
)
#: The engine's time split of a pass (``steps.Step``) and the pipeline's streaming work, in table order.
PASS_PARTS = ("target_time", "sample_time", "draft_time", "accept_time", "cache_time", "stream_time")


# ----------------------------------------------------------------------------- one shard


def _sha1(tokens: torch.Tensor) -> str:
    return hashlib.sha1(tokens.numpy().astype(np.int32).tobytes()).hexdigest()


def run_prompt(pipe, setting: Setting, prompt: str, index: int, seed: int) -> dict[str, Any]:
    """Generate one image and measure it (one repeat). The record has no tensors (picklable,
    JSON-ready) except ``image`` (uint8 array), which the main process removes after computing
    features. ``wall_times`` / ``e2e_times`` list the repeats' times (``add_repeat``)."""
    t0 = time.perf_counter()
    gen = pipe(prompt, setting.config, seed=seed)
    e2e = time.perf_counter() - t0
    t1 = time.perf_counter()
    caption, _ = pipe.encode_prompt(prompt)
    text_time = time.perf_counter() - t1
    tokens = gen.tokens
    nll = metrics.sequence_nll(pipe.target, caption, tokens, setting.config.sampling)
    per_pass = Counter(len(s.tokens) for s in gen.steps[1:])
    return {
        "setting": setting.name,
        "prompt_index": index,
        "seed": seed,
        "stats": dict(gen.stats),
        "repeat_stats": [dict(gen.stats)],
        "e2e_times": [e2e],
        "text_time": text_time,
        "tokens_sha1": _sha1(tokens),
        "tokens_per_pass_hist": {str(k): v for k, v in sorted(per_pass.items())},
        **nll,
        "image": np.asarray(gen.image.convert("RGB"), dtype=np.uint8),
    }


def add_repeat(pipe, setting: Setting, prompt: str, record: dict[str, Any]) -> None:
    """Time ``setting`` on ``prompt`` once more (same seed) into ``record``. Raises RuntimeError
    if the tokens differ from the first repeat's: the repeats must time the same work."""
    t0 = time.perf_counter()
    gen = pipe(prompt, setting.config, seed=record["seed"])
    record["e2e_times"].append(time.perf_counter() - t0)
    if _sha1(gen.tokens) != record["tokens_sha1"]:
        raise RuntimeError(f"setting {setting.name!r}, prompt {record['prompt_index']}: a repeat with the same "
                           "seed gave other tokens, so its time is not comparable (non-deterministic decoding)")
    record["repeat_stats"].append(dict(gen.stats))


def finish_repeats(record: dict[str, Any]) -> None:
    """Keep the timings of the median repeat by engine wall time (the lower middle one for an
    even count): one real run, so that its time split adds up to its wall time. Counts stay (the
    repeats decode the same tokens); ``wall_times`` / ``e2e_times`` keep every repeat's time, and
    ``e2e_time`` is the median of the latter."""
    reps = record.pop("repeat_stats")
    record["stats"] = sorted(reps, key=lambda r: r["wall_time"])[(len(reps) - 1) // 2]
    record["wall_times"] = [r["wall_time"] for r in reps]
    record["e2e_time"] = statistics.median(record["e2e_times"])


def warm_up(pipe, settings: list[Setting], prompt: str) -> None:
    """One untimed generation per drafting shape (first calls allocate and JIT-warm)."""
    seen = set()
    for s in settings:
        if s.config.shape not in seen:
            seen.add(s.config.shape)
            pipe(prompt, s.config, seed=10**6)


def repeat_order(n_settings: int, repeat: int) -> list[int]:
    """Setting indices in the order repeat ``repeat`` runs them: rotated by one per repeat, so
    that over the repeats no setting always runs first (after a cold cache) or right after the
    same neighbour."""
    shift = repeat % n_settings
    return list(range(shift, n_settings)) + list(range(shift))


def run_shard(pipe, settings: list[Setting], prompts: list[str], indices: list[int], seed: int,
              repeats: int = 3, log=print) -> list[dict]:
    """All settings on the prompts ``indices``, each timed ``repeats`` times (median per prompt).

    Prompts outer, then repeats, then settings in ``repeat_order``: load drifts of the machine
    hit every setting alike, and the repeats of one setting are spread over the prompt's time.
    Seeds depend on the prompt index only.
    """
    records = []
    t0 = time.time()
    for n, i in enumerate(indices):
        mine: dict[int, dict] = {}
        for r in range(repeats):
            for j in repeat_order(len(settings), r):
                if r == 0:
                    mine[j] = run_prompt(pipe, settings[j], prompts[i], i, seed + i)
                else:
                    add_repeat(pipe, settings[j], prompts[i], mine[j])
        for j in range(len(settings)):
            finish_repeats(mine[j])
            records.append(mine[j])
        el = time.time() - t0
        log(f"  prompt {n + 1}/{len(indices)} done ({el:.0f}s, about {el / (n + 1) * (len(indices) - n - 1):.0f}s left)")
    return records


# ----------------------------------------------------------------------------- merge and summarise


def _q(v: list[float], q: float) -> float:
    return float(np.quantile(np.asarray(v, np.float64), q)) if v else float("nan")


def summarize_setting(recs: list[dict]) -> dict[str, Any]:
    """Speed and per-sequence quality of one setting over its prompts (records sorted by prompt).

    A prompt's times are those of its median repeat (``finish_repeats``); wall_time and the like
    are medians over prompts of those, the per-pass split (``PASS_PARTS``, seconds per image) and
    wall_time_mean means over prompts.
    """
    st = [r["stats"] for r in recs]
    walls = [s["wall_time"] for s in st]
    tokens = sum(s["tokens"] for s in st)
    nfe = sum(s["nfe"] for s in st)
    drafted = sum(s["drafted"] for s in st)
    nll_m, nll_se = metrics.mean_se([r["nll"] for r in recs])
    hist: Counter = Counter()
    for r in recs:
        hist.update({int(k): v for k, v in r["tokens_per_pass_hist"].items()})
    return {
        "prompts": len(recs),
        "nfe": nfe / len(recs),
        "mean_accepted": tokens / nfe,
        "acceptance_rate": sum(s["accepted_drafts"] for s in st) / drafted if drafted else 0.0,
        "drafter_passes": sum(s["drafter_passes"] for s in st) / len(recs),
        "wall_time": statistics.median(walls),
        "wall_time_p25": _q(walls, 0.25),
        "wall_time_p75": _q(walls, 0.75),
        "wall_time_min": min(walls),
        "wall_time_max": max(walls),
        "wall_time_mean": statistics.fmean(walls),
        "first_token_latency": statistics.median(s["first_token_latency"] for s in st),
        "e2e_time": statistics.median(r["e2e_time"] for r in recs),
        "text_time": statistics.median(r["text_time"] for r in recs),
        "final_decode_time": statistics.median(s.get("final_decode_time", 0.0) for s in st),
        **{k: statistics.fmean(s[k] for s in st) for k in PASS_PARTS},
        "nll": nll_m,
        "nll_se": nll_se,
        "out_of_support": sum(r["out_of_support"] for r in recs),
        "target_top1": statistics.fmean(r["top1"] for r in recs),
        "mean_tvd": statistics.fmean(s["mean_tvd"] for s in st),
        "tokens_per_pass_hist": {str(k): hist[k] for k in sorted(hist)},
    }


#: The exact methods every row's speed-up is given against (when in the run).
REFERENCES = BASELINES


def _walls(recs: list[dict]) -> list[float]:
    """Per-prompt engine wall times (medians over repeats), in prompt order."""
    return [r["stats"]["wall_time"] for r in recs]


def add_speedups(rows: list[dict], recs_by: dict[str, list[dict]], seed: int) -> None:
    """``row["paired"][m]`` for every reference m (ar / sd / eagle / sjd) in the run: the paired
    per-prompt speed-up of the row's engine wall time over m's (``paired.paired_entry``; the
    bootstrap seeded with ``seed``); and the ratio of mean NFE, ``summary["nfe_ratio_vs_<m>"]``."""
    ref = {r["method"]: r for r in reversed(rows) if not r["params"]}  # the first ar / sd / eagle / sjd row
    for row in rows:
        row["paired"] = {m: paired_entry(_walls(recs_by[ref[m]["name"]]), _walls(recs_by[row["name"]]), seed)
                         for m in REFERENCES if m in ref}
        for m in REFERENCES:
            if m in ref:
                row["summary"][f"nfe_ratio_vs_{m}"] = ref[m]["summary"]["nfe"] / row["summary"]["nfe"]


def image_metrics(rows: list[dict], recs_by: dict[str, list[dict]], prompts: list[str], real_idx, ds,
                  encoder, notes: list[str], seed: int) -> dict[str, Any]:
    """FD / precision / recall vs held-out images and retrieval accuracy, per setting; plus references."""
    refs: dict[str, Any] = {}
    if encoder is None:
        notes.append("FD, precision/recall and retrieval skipped: no eval encoder in assets/eval "
                     "(train it with `python -m lantern_demo.emoji.features --train`).")
        return refs
    text = encoder.embed_texts(prompts)
    chance = 1.0 / len(prompts)
    refs["retrieval_chance"] = chance
    if real_idx is not None:
        refs["retrieval_real_images"] = metrics.retrieval_accuracy(encoder.embed_images(ds.images[real_idx]), text)
    if ds is None:
        notes.append("FD and precision/recall skipped: the emoji dataset (held-out images) is not available.")
        real = None
    else:
        held = ds.indices("heldout")
        real = encoder.embed_images(ds.images[held])
        refs["real_images"] = int(len(held))
        n = len(prompts)
        tr = ds.indices("train")
        sub = tr[np.random.default_rng(seed).permutation(len(tr))[:n]]
        train_f = encoder.embed_images(ds.images[sub])
        refs["fd_train_images"] = metrics.frechet_distance(train_f, real)
        refs["fd_train_images_boot_std"] = metrics.fd_bootstrap_std(train_f, real, seed=seed)
        refs["precision_train_images"], refs["recall_train_images"] = metrics.precision_recall(real, train_f)
    for row in rows:
        recs = recs_by[row["name"]]
        feats = encoder.embed_images(np.stack([r["image"] for r in recs]))
        s = row["summary"]
        s["retrieval_top1"] = metrics.retrieval_accuracy(feats, text)
        if real is not None:
            s["fd"] = metrics.frechet_distance(feats, real)
            s["fd_boot_std"] = metrics.fd_bootstrap_std(feats, real, seed=seed)
            s["precision"], s["recall"] = metrics.precision_recall(real, feats)
    return refs


def paper_metrics(rows, recs_by, pipe, notes: list[str]) -> None:
    """FID (torch-fidelity / clean-fid) and CLIP score for the GPU presets, when available offline."""
    if not pipe.preset.needs_gpu:
        notes.append(f"FID / CLIP score not computed for the {pipe.preset.name!r} preset (a CPU preset: "
                     "its FD, precision/recall and retrieval use our own eval encoder instead).")
        return
    have = [m for m in ("torch_fidelity", "cleanfid") if importlib.util.find_spec(m) is not None]
    if not have:
        notes.append("FID skipped: neither torch-fidelity nor clean-fid is installed (pip install torch-fidelity), "
                     "and a reference image set is needed (COCO val).")
    else:
        notes.append(f"FID skipped: {have[0]} is installed but no reference statistics/images are configured "
                     "offline (Inception weights and COCO val images must be present locally).")
    try:
        name = os.environ.get("LANTERN_CLIP", "openai/clip-vit-base-patch16")
        model = CLIPModel.from_pretrained(name, local_files_only=True).eval().to(pipe.device)
        proc = CLIPProcessor.from_pretrained(name, local_files_only=True)
    except Exception as err:  # noqa: BLE001 - any failure means "not available offline"
        notes.append(f"CLIP score skipped: CLIP weights not available offline ({type(err).__name__}).")
        return
    for row in rows:
        recs = recs_by[row["name"]]
        scores = []
        for r in recs:
            inp = proc(text=[r["prompt"]], images=[r["image"]], return_tensors="pt", padding=True).to(pipe.device)
            with torch.no_grad():
                out = model(**inp)
            cos = torch.nn.functional.cosine_similarity(out.image_embeds, out.text_embeds).item()
            scores.append(100 * max(cos, 0.0))
        row["summary"]["clip_score"] = statistics.fmean(scores)


def merge(records: list[dict], settings: list[Setting], prompts: list[str], real_idx, ds, encoder,
          pipe, args, meta: dict) -> dict[str, Any]:
    """Everything the main process computes from the gathered records."""
    notes: list[str] = []
    recs_by: dict[str, list[dict]] = {s.name: [] for s in settings}
    for r in records:
        r["prompt"] = prompts[r["prompt_index"]]
        recs_by[r["setting"]].append(r)
    for v in recs_by.values():
        v.sort(key=lambda r: r["prompt_index"])
    rows = []
    for s in settings:
        rows.append({
            "name": s.name,
            "method": s.method,
            "shape": s.config.shape,
            "params": s.params,
            "config": _config_dict(s.config),
            "summary": summarize_setting(recs_by[s.name]),
        })
    add_speedups(rows, recs_by, args.seed)
    refs = image_metrics(rows, recs_by, prompts, real_idx, ds, encoder, notes, args.seed)
    paper_metrics(rows, recs_by, pipe, notes)
    for row in rows:
        row["per_prompt"] = [{k: v for k, v in r.items() if k not in ("image", "setting")} for r in recs_by[row["name"]]]
    result = {"schema": SCHEMA, "meta": meta, "references": refs, "notes": notes, "rows": rows,
              "timing_keys": list(TIMING_KEYS) + _summary_timing_keys()}
    result["analysis"] = analysis(result, recs_by)
    return result


def analysis(result: dict[str, Any], recs_by: dict[str, list[dict]]) -> dict[str, Any]:
    """The numbers docs/benchmarks.md discusses, computed by a fixed rule so that they regenerate.

    Exact reference: the mean over the exact rows (ar, sd, eagle, lantern with delta 0) of FD and
    retrieval. A relaxed setting is *acceptable* when its FD exceeds the reference by at most twice
    the combined bootstrap noise and its retrieval accuracy is at most two binomial standard errors
    below the reference (with no eval encoder: when its mean TVD is <= 0.05). Reported: lantern at
    the report's default (delta, k) on the tree (``meta.default_relaxation``), the fastest acceptable relaxed setting
    (largest paired speed-up over AR), and the lantern setting closest to the paper's headline of 1.8x over EAGLE-2;
    and the drafter-free sjd+lantern at the default delta next to lantern on the chain at that delta
    (``sjd_lantern_over_lantern_chain``: the paired speed-up of the first over the second). ``recs_by``: each
    setting's per-prompt records, in prompt order.
    """
    rows = result["rows"]
    exact = [r for r in rows if r["method"] in REFERENCES  # and delta-only relaxations at delta 0
             or (r["method"] in RELAXED and not METHOD_INFO[r["method"]].uses_lam and r["params"].get("delta") == 0)]
    relaxed = [r for r in rows if r["method"] in RELAXED and r not in exact]
    out: dict[str, Any] = {"exact_rows": [r["name"] for r in exact]}
    have_fd = all(r["summary"].get("fd") == r["summary"].get("fd") and "fd" in r["summary"] for r in rows)
    n = len(result["meta"]["prompts"])
    if have_fd and exact:
        fd_ref = statistics.fmean(r["summary"]["fd"] for r in exact)
        fd_ref_sd = statistics.fmean(r["summary"]["fd_boot_std"] for r in exact)
        ret_ref = statistics.fmean(r["summary"]["retrieval_top1"] for r in exact)
        ret_se = math.sqrt(max(ret_ref * (1 - ret_ref), 1e-9) / n)
        out.update(fd_exact=fd_ref, fd_exact_boot_std=fd_ref_sd, retrieval_exact=ret_ref, retrieval_se=ret_se,
                   nll_exact=statistics.fmean(r["summary"]["nll"] for r in exact),
                   rule="FD <= FD_exact + 2*sqrt(sd^2 + sd_exact^2) and retr@1 >= retr_exact - 2*se")

        def ok(r):
            s = r["summary"]
            return (s["fd"] <= fd_ref + 2 * math.hypot(s["fd_boot_std"], fd_ref_sd)
                    and s["retrieval_top1"] >= ret_ref - 2 * ret_se)
    else:
        out["rule"] = "mean TVD <= 0.05 (no eval encoder / held-out images: FD unavailable)"

        def ok(r):
            return r["summary"]["mean_tvd"] <= 0.05
    for r in relaxed:
        r["summary"]["acceptable"] = bool(ok(r))

    def brief(r):
        if r is None:
            return None
        s = r["summary"]
        keys = ("nfe", "mean_accepted", "nll", "mean_tvd", "fd", "fd_boot_std", "retrieval_top1", "precision",
                "recall", "acceptable", *PASS_PARTS)
        return {"name": r["name"], "paired": r["paired"], **{k: s[k] for k in keys if k in s}}

    d_def, k_def = result["meta"]["default_relaxation"]
    default = next((r for r in relaxed if r["method"] == "lantern" and r["shape"] == "tree"
                    and r["params"]["delta"] == d_def and r["params"]["k"] == k_def), None)
    good = [r for r in relaxed if r["summary"]["acceptable"]]
    fastest = max(good, key=lambda r: speedup(r, "ar") or 0.0, default=None)
    # the paper's comparison: LANTERN on EAGLE-2's own dynamic tree vs EAGLE-2
    lant = [r for r in relaxed if r["method"] == "lantern" and r["shape"] == "tree" and "eagle" in r["paired"]]
    near = min(lant, key=lambda r: abs(speedup(r, "eagle") - 1.8), default=None)
    best = max(lant, key=lambda r: speedup(r, "eagle"), default=None)
    # drafter-free: sjd+lantern at the default delta against lantern on the chain at the same delta
    sjd_lantern = next((r for r in relaxed if r["method"] == "sjd+lantern" and r["params"]["delta"] == d_def), None)
    chain = next((r for r in relaxed if r["method"] == "lantern" and r["shape"] == "chain"
                  and r["params"]["delta"] == d_def), None)
    out.update(default=brief(default), fastest_acceptable=brief(fastest), closest_to_paper_1_8x_over_eagle=brief(near),
               best_over_eagle=brief(best), sjd_lantern_default=brief(sjd_lantern), lantern_chain_default=brief(chain))
    if sjd_lantern and chain:
        out["sjd_lantern_over_lantern_chain"] = paired_entry(
            _walls(recs_by[chain["name"]]), _walls(recs_by[sjd_lantern["name"]]), result["meta"]["seed"])
    return out


def _summary_timing_keys() -> list[str]:
    return ["wall_time_p25", "wall_time_p75", "wall_time_min", "wall_time_max", "wall_time_mean"]


def _config_dict(c: DecodeConfig) -> dict[str, Any]:
    d = asdict(c)
    d["shape"] = c.shape
    return d

