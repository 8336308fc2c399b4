"""The benchmark's report: the tables, the text printed and written, the generated docs blocks."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from ..methods import TITLES
from .paired import phrase, ratio_text
from .plots import make_all as make_plots
from .running import PASS_PARTS, REFERENCES

def _fmt(x: Any, spec: str = ".3f") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return format(x, spec)


def _ratio_cell(row: dict[str, Any], ref: str) -> str:
    """'1.28 [1.20, 1.35]': the row's paired speed-up over ``ref`` and its interval, '-' if not compared."""
    e = row["paired"].get(ref)
    return "-" if e is None else ratio_text(e).replace("x ", " ", 1)


def markdown_table(result: dict[str, Any]) -> str:
    """The main table: counts, engine wall time, paired speed-ups with intervals, quality."""
    rows = result["rows"]
    has_fd = any("fd" in r["summary"] for r in rows)
    has_ret = any("retrieval_top1" in r["summary"] for r in rows)
    head = ["setting", "NFE", "tok/pass", "wall ms (median [p25-p75])",
            *(f"x {TITLES[m]} [95% CI]" for m in REFERENCES), "1st tok ms", "e2e ms", "NLL", "TVD"]
    if has_fd:
        head += ["FD", "P", "R"]
    if has_ret:
        head += ["retr@1"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        s = r["summary"]
        cells = [
            r["name"], _fmt(s["nfe"], ".1f"), _fmt(s["mean_accepted"], ".2f"),
            f"{s['wall_time'] * 1e3:.0f} [{s['wall_time_p25'] * 1e3:.0f}-{s['wall_time_p75'] * 1e3:.0f}]",
            *(_ratio_cell(r, m) for m in REFERENCES),
            _fmt(s["first_token_latency"] * 1e3, ".1f"), _fmt(s["e2e_time"] * 1e3, ".0f"),
            f"{s['nll']:.3f} ± {_fmt(s['nll_se'], '.3f')}", _fmt(s["mean_tvd"], ".3f"),
        ]
        if has_fd:
            cells += [f"{_fmt(s.get('fd'), '.2f')} ± {_fmt(s.get('fd_boot_std'), '.2f')}",
                      _fmt(s.get("precision"), ".2f"), _fmt(s.get("recall"), ".2f")]
        if has_ret:
            cells += [_fmt(s.get("retrieval_top1"), ".2f")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def pass_split_table(result: dict[str, Any]) -> str:
    """Per setting, where an image's engine time goes, in ms per target pass (means over prompts):
    the ``steps.Step`` split, the rest of the engine loop, and the pipeline's streaming work
    (outside the engine's wall time)."""
    head = ["setting", "target passes", "tok/pass", "drafter passes", "target forward", "sampling", "drafting",
            "acceptance", "cache", "engine other", "engine total", "streaming"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in result["rows"]:
        s = r["summary"]
        per = {k: s[k] / s["nfe"] * 1e3 for k in PASS_PARTS}
        total = s["wall_time_mean"] / s["nfe"] * 1e3
        other = total - sum(v for k, v in per.items() if k != "stream_time")
        cells = [r["name"], f"{s['nfe']:.1f}", f"{s['mean_accepted']:.2f}", f"{s['drafter_passes']:.0f}",
                 *(f"{per[k]:.2f}" for k in PASS_PARTS[:-1]), f"{other:.2f}", f"{total:.2f}",
                 f"{per['stream_time']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report_text(result: dict[str, Any]) -> str:
    m = result["meta"]
    refs = result["references"]
    out = [
        f"## Benchmark: preset `{m['preset']}` on {m['device']} ({m['num_processes']} process(es), "
        f"{m['threads']} thread(s) each)",
        "",
        f"{m['prompt_set']}; {m['num_tokens']} tokens per image; sampling {m['sampling']}; "
        f"seed of prompt i = {m['seed']} + i. Wall = engine time, prefill to last token (no text encoding, "
        "no VQ decoding); e2e = the whole pipeline call (text encoding + engine + VQ decoding). "
        f"Each prompt x setting is timed {m['repeats']} times, interleaved, and the median run kept. "
        "x REF: the geometric mean over prompts of the paired per-prompt ratio REF wall / setting wall "
        f"[95% percentile bootstrap interval over prompts, {m['bootstrap_resamples']} resamples]. NLL: mean per-token NLL (nats) of the "
        "generated tokens under the target's guided distribution (± s.e. over prompts). TVD: mean mass moved "
        "by the relaxation per token. FD: Fréchet distance to the held-out images in our eval encoder's space "
        "(± bootstrap s.d.); P/R: k-NN (k=3) precision/recall; retr@1: prompt retrieval accuracy among the "
        "run's prompts.",
        "",
        markdown_table(result),
        "",
        "Per target pass, ms (means over prompts): " + PASS_SPLIT_NOTE,
        "",
        pass_split_table(result),
        "",
    ]
    if refs:
        out.append("References: " + ", ".join(f"{k} = {_fmt(v)}" for k, v in refs.items()))
        out.append("")
    a = result.get("analysis", {})
    if a:
        out.append(f"Acceptable quality loss rule: {a['rule']}.")
        for key, label in (("default", "lantern at the default (delta, k)"),
                           ("fastest_acceptable", "fastest acceptable relaxed setting"),
                           ("best_over_eagle", "lantern's (tree) best speed-up over eagle"),
                           ("closest_to_paper_1_8x_over_eagle", "closest to the paper's 1.8x over EAGLE-2"),
                           ("sjd_lantern_default", "sjd+lantern (no drafter) at the default delta"),
                           ("lantern_chain_default", "lantern on the chain at the default delta")):
            b = a.get(key)
            if b:
                out.append(f"- {label}: {_speed_quality(b)}")
        out.append("")
    for n in result["notes"]:
        out.append(f"- Note: {n}")
    out.append(f"\nTotal benchmark time {m.get('total_seconds', float('nan')):.0f} s.")
    return "\n".join(out)



_GENERATED = "(generated by python -m lantern_demo.bench --update-docs; do not edit)"
DOCS_START = f"<!-- bench:results:start {_GENERATED} -->"
DOCS_END = "<!-- bench:results:end -->"
#: The short speed summary README.md, Spaces.md and the model card carry.
HEADLINE_START = f"<!-- bench:headline:start {_GENERATED} -->"
HEADLINE_END = "<!-- bench:headline:end -->"

PASS_SPLIT_NOTE = (
    "target forward = the target's forward pass alone; sampling = CFG, temperature, top-k/top-p, softmax "
    "(and the draw for AR); drafting = the drafter's passes and draft distributions, or SJD's (re)drafts, plus "
    "building the verification inputs; acceptance = the acceptance rule with its correction draws; cache = "
    "KV-cache bookkeeping; engine other = the rest of the engine's wall time (its loop); streaming = the "
    "pipeline's work between steps (recording steps, statistics; partial decodes are off in the benchmark), "
    "outside the engine's wall time.")


def _speeds(b: dict) -> str:
    """The paired speed-ups of an analysis entry, 'level with' where the interval includes 1."""
    return ", ".join(phrase(e, TITLES[m]) for m, e in b["paired"].items())


def _speed_quality(b: dict | None) -> str:
    if not b:
        return "(not in this run)"
    return (f"**{b['name']}**: {_speeds(b)} ({_fmt(b.get('mean_accepted'), '.2f')} tokens/pass); "
            f"FD {_fmt(b.get('fd'), '.2f')} ± {_fmt(b.get('fd_boot_std'), '.2f')}, retr@1 {_fmt(b.get('retrieval_top1'), '.2f')}, "
            f"NLL {_fmt(b.get('nll'), '.3f')}, TVD {_fmt(b.get('mean_tvd'), '.3f')}"
            + ("" if b.get("acceptable", True) else " — *not acceptable by the rule*"))


def _per_pass(b: dict | None) -> str:
    """Time per target pass of an analysis entry, split as ``pass_split_table`` does."""
    if not b:
        return "(not in this run)"
    n = b["nfe"]
    labels = ("target forward", "sampling", "drafting", "acceptance", "cache", "streaming")
    return "per pass " + " + ".join(f"{b[k] / n * 1e3:.2f} ms {w}" for k, w in zip(PASS_PARTS, labels))


def headline(result: dict[str, Any], rel: str) -> str:
    """The speed summary for README.md, Spaces.md and the model card: LANTERN on SD's chain and
    the drafter-free SJD+LANTERN at the run's default delta (for the emoji preset the app's
    settings), paired over the run's prompts.
    ``rel``: the path of docs/benchmarks.md from the file it goes into."""
    m, a = result["meta"], result.get("analysis", {})
    chain, sjd = a.get("lantern_chain_default"), a.get("sjd_lantern_default")
    parts = []
    if chain:
        parts.append(f"drafter LANTERN on SD's chain ({chain['name']}) is {_speeds(chain)}")
    if sjd:
        parts.append(f"drafter-free SJD+LANTERN ({sjd['name']}) is {_speeds(sjd)}")
    if not parts:
        return f"Speed: see [the benchmark]({rel})."
    return (f"Speed in the [benchmark]({rel}) ({len(m['prompts'])} prompts, {m['threads']} thread(s), "
            f"{m['device']}, engine time per image, each prompt's median of {m['repeats']} timings; geometric "
            f"means of the per-prompt ratios with 95% bootstrap intervals): " + "; ".join(parts) + ".")


def docs_section(result: dict[str, Any], rel: str) -> str:
    """The generated results section of docs/benchmarks.md (table, plots, the numbers asked for)."""
    m, a, refs = result["meta"], result.get("analysis", {}), result["references"]
    t = m["tree"]
    lines = [
        f"Run: preset `{m['preset']}`, {m['prompt_set']}, {m['num_tokens']} tokens per image, sampling "
        f"{m['sampling']}, tree `{t['name']}` (depth {t['depth']}, {t['children']} children, {t['total_tokens']} tokens), "
        f"{m['device']}, {m['num_processes']} process(es) x {m['threads']} thread(s), torch {m['torch']}, "
        f"commit `{(m.get('git_commit') or '?')[:10]}`, {m['total_seconds'] / 60:.1f} min in total. "
        f"Each prompt x setting was timed {m['repeats']} times (interleaved: per prompt, per repeat, every setting "
        f"in a rotated order) and the median run (by engine wall time) kept; **x REF** is the geometric mean over prompts of the paired ratio "
        f"REF wall / setting wall, with its 95% percentile bootstrap interval over prompts ({m['bootstrap_resamples']} "
        f"resamples, seeded); an interval that includes 1 means no measurable difference (\"level with\"). "
        f"Raw numbers: [`{rel}/results.json`]({rel}/results.json).",
        "",
        markdown_table(result),
        "",
        "Where the engine's time goes, in ms per target pass (means over prompts): " + PASS_SPLIT_NOTE,
        "",
        pass_split_table(result),
        "",
    ]
    if refs:
        lines += ["References (same encoder, same sample size): "
                  + "; ".join(f"{k} {_fmt(v)}" for k, v in refs.items()), ""]
    lines += [f"![speed vs quality]({rel}/tradeoff.png)", "", f"![tokens per pass]({rel}/accepted_hist.png)", "",
              f"![samples]({rel}/samples.png)", ""]
    if a:
        lines += [
            "### The numbers asked for",
            "",
            f"- Exact reference (mean of {', '.join(a['exact_rows'])}): FD {_fmt(a.get('fd_exact'), '.2f')} "
            f"(bootstrap s.d. {_fmt(a.get('fd_exact_boot_std'), '.2f')}), retr@1 {_fmt(a.get('retrieval_exact'), '.2f')} "
            f"(s.e. {_fmt(a.get('retrieval_se'), '.2f')}), NLL {_fmt(a.get('nll_exact'), '.3f')}.",
            f"- LANTERN at the default (delta, k) = {tuple(m['default_relaxation'])}: {_speed_quality(a.get('default'))}.",
            f"- Fastest setting with an acceptable quality loss (rule: {a['rule']}): "
            f"{_speed_quality(a.get('fastest_acceptable'))}.",
            f"- LANTERN's best speed-up over EAGLE-2 on the same tree: {_speed_quality(a.get('best_over_eagle'))}.",
            f"- Closest to the paper's headline (about 1.8x over EAGLE-2 under sampling): "
            f"{_speed_quality(a.get('closest_to_paper_1_8x_over_eagle'))}.",
            f"- Drafter-free: {_speed_quality(a.get('sjd_lantern_default'))}; {_per_pass(a.get('sjd_lantern_default'))}.",
            f"- Drafter-based at the same delta: {_speed_quality(a.get('lantern_chain_default'))}; "
            f"{_per_pass(a.get('lantern_chain_default'))}.",
            f"- sjd+lantern over lantern on the chain (paired): "
            f"{phrase(a.get('sjd_lantern_over_lantern_chain'), 'lantern on the chain')}.",
            "",
        ]
    for n in result["notes"]:
        lines.append(f"- Note: {n}")
    return "\n".join(lines)


def _rel(target: Path, doc: Path) -> str:
    """``target`` as a markdown link from ``doc``'s folder."""
    return os.path.relpath(target.resolve(), doc.resolve().parent).replace(os.sep, "/")


def _replace_block(text: str, start: str, end: str, body: str) -> str:
    head, rest = text.split(start, 1)
    if end not in rest:
        raise SystemExit(f"--update-docs: a generated block opens with {start!r} but has no {end!r}")
    return f"{head}{start}\n{body}\n{end}{rest.split(end, 1)[1]}"


def update_docs(result: dict[str, Any], docs: list[Path], out: Path) -> None:
    """Rewrite the generated blocks of ``docs`` with this run.

    A file's results block (DOCS_START .. DOCS_END) gets ``docs_section``, its headline block
    (HEADLINE_START .. HEADLINE_END) ``headline``; a file with neither gets a results block
    appended. Headlines link to the first file with a results block (else to results.json).
    """
    texts = {doc: doc.read_text() for doc in docs}
    for doc, text in texts.items():
        if DOCS_START not in text and HEADLINE_START not in text:
            texts[doc] = text.rstrip() + f"\n\n{DOCS_START}\n{DOCS_END}\n"
    page = next((d for d, t in texts.items() if DOCS_START in t), out / "results.json")
    for doc, text in texts.items():
        if DOCS_START in text:
            text = _replace_block(text, DOCS_START, DOCS_END, docs_section(result, _rel(out, doc)))
        if HEADLINE_START in text:
            text = _replace_block(text, HEADLINE_START, HEADLINE_END, headline(result, _rel(page, doc)))
        doc.write_text(text)
        print(f"updated {doc}")


def write_outputs(result: dict[str, Any], out: Path, plots: bool = True, images: dict | None = None,
                  docs: list[Path] | None = None) -> None:
    """results.json (+ results.md unless the tables go into ``docs``) and the plots, in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    text = report_text(result)
    print(text)
    written = ["results.json"]
    (out / "results.json").write_text(json.dumps(result, indent=1, default=float))
    if not docs:
        (out / "results.md").write_text(text + "\n")
        written.append("results.md")
    if plots:
        written += make_plots(result, out, images)
    print(f"wrote {', '.join(str(out / w) for w in written)}")
    if docs:
        update_docs(result, docs, out)
