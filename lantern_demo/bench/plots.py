"""PNG plots of a benchmark result (matplotlib, Agg backend).

- ``tradeoff.png``: speed-up vs AR (paired, ``paired.speedup``) against quality (FD when available, and NLL),
  lantern as one line per k through its deltas, lantern++ as a line through its
  lambdas, sjd+lantern as a line through its deltas, ar / sd / eagle / sjd (and
  coupled sjd) as single points.
- ``accepted_hist.png``: per setting, the histogram of tokens committed per
  target pass (accepted drafts + 1; the prefill pass excluded).
- ``samples.png``: the first prompts' images for a few settings (same seeds).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib
import numpy as np

from ..methods import BASELINES
from .paired import speedup

matplotlib.use("Agg")  # files only: no display
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)

#: Marker of each exact reference, plotted as a single point.
_MARK = dict(zip(BASELINES, ("s", "^", "D", "*", "v", "P", "h")))


def _x(r: dict[str, Any]) -> float:
    """The row's paired speed-up over AR (nan when AR is not in the run)."""
    x = speedup(r, "ar")
    return np.nan if x is None else x


def _label(r: dict[str, Any]) -> str:
    return r["method"] + (" coupled" if r["params"].get("coupled") else "")


def tradeoff(result: dict[str, Any], path: Path) -> None:
    rows = result["rows"]
    metrics = [("nll", "NLL under the guided target (nats/token)", "nll_se")]
    if any("fd" in r["summary"] for r in rows):
        metrics.insert(0, ("fd", "FD to held-out images (eval encoder)", "fd_boot_std"))
    fig, axes = plt.subplots(1, len(metrics), figsize=(6.2 * len(metrics), 4.6), squeeze=False)
    for ax, (key, label, err) in zip(axes[0], metrics):
        for r in rows:
            s = r["summary"]
            if r["method"] in _MARK and key in s:
                ax.errorbar(_x(r), s[key], yerr=s.get(err), fmt=_MARK[r["method"]],
                            color="black", ms=7, capsize=2)
                ax.annotate(_label(r), (_x(r), s[key]), textcoords="offset points",
                            xytext=(5, 4), fontsize=8)
        lant = [r for r in rows if r["method"] == "lantern" and r["shape"] == "tree"]
        chain = sorted((r for r in rows if r["method"] == "lantern" and r["shape"] == "chain"),
                       key=lambda r: r["params"]["delta"])
        if chain:
            xs = [_x(r) for r in chain]
            ys = [r["summary"].get(key, np.nan) for r in chain]
            ax.errorbar(xs, ys, yerr=[r["summary"].get(err, np.nan) for r in chain], marker="P", ls=":",
                        capsize=2, label=f"lantern on sd's chain (k={chain[0]['params']['k']:g})")
            for r, x, y in zip(chain, xs, ys):
                ax.annotate(f"{r['params']['delta']:g}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
        ks = sorted({r["params"]["k"] for r in lant})
        zero = [r for r in lant if r["params"]["delta"] == 0]
        for k in ks:
            line = zero + [r for r in lant if r["params"]["k"] == k and r["params"]["delta"] > 0]
            line.sort(key=lambda r: r["params"]["delta"])
            xs = [_x(r) for r in line]
            ys = [r["summary"].get(key, np.nan) for r in line]
            es = [r["summary"].get(err, np.nan) for r in line]
            ax.errorbar(xs, ys, yerr=es, marker="o", capsize=2, label=f"lantern k={k:g} (delta ->)")
            for r, x, y in zip(line, xs, ys):
                ax.annotate(f"{r['params']['delta']:g}", (x, y), textcoords="offset points", xytext=(4, -10), fontsize=7)
        sjd = sorted((r for r in rows if r["method"] == "sjd+lantern"), key=lambda r: r["params"]["delta"])
        if sjd:
            xs = [_x(r) for r in sjd]
            ys = [r["summary"].get(key, np.nan) for r in sjd]
            ax.errorbar(xs, ys, yerr=[r["summary"].get(err, np.nan) for r in sjd], marker="X", ls="-.", capsize=2,
                        label=f"sjd+lantern, no drafter (k={sjd[0]['params']['k']:g}, delta ->)")
            for r, x, y in zip(sjd, xs, ys):
                ax.annotate(f"{r['params']['delta']:g}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
        pp = sorted((r for r in rows if r["method"] == "lantern++"), key=lambda r: r["params"]["lam"])
        if pp:
            xs = [_x(r) for r in pp]
            ys = [r["summary"].get(key, np.nan) for r in pp]
            ax.errorbar(xs, ys, yerr=[r["summary"].get(err, np.nan) for r in pp], marker="v", ls="--", capsize=2,
                        label="lantern++ (lambda ->)")
            for r, x, y in zip(pp, xs, ys):
                ax.annotate(f"{r['params']['lam']:g}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
        ax.axvline(1.0, color="grey", lw=0.6, ls=":")
        ax.set_xlabel("speed-up vs AR (paired geometric mean over prompts, engine wall time)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    m = result["meta"]
    fig.suptitle(f"Speed vs quality, preset {m['preset']} ({len(m['prompts'])} prompts, same seeds); lower is better",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def accepted_hist(result: dict[str, Any], path: Path) -> None:
    rows = [r for r in result["rows"] if r["method"] != "ar"]
    if not rows:
        return
    cols = min(4, len(rows))
    nrows = (len(rows) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(3.1 * cols, 2.3 * nrows), squeeze=False, sharex=True)
    top = max(max(int(k) for k in r["summary"]["tokens_per_pass_hist"]) for r in rows)
    for ax, r in zip(axes.flat, rows):
        h = r["summary"]["tokens_per_pass_hist"]
        xs = np.arange(1, top + 1)
        n = sum(h.values())
        ys = np.array([h.get(str(x), 0) for x in xs]) / max(n, 1)
        ax.bar(xs, ys, color="tab:blue")
        ax.set_title(f"{r['name']}\nmean {r['summary']['mean_accepted']:.2f} tok/pass", fontsize=8)
        ax.set_xticks(xs)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(rows):]:
        ax.axis("off")
    fig.supxlabel("tokens committed per target pass (accepted drafts + 1)", fontsize=9)
    fig.supylabel("share of passes", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def samples(result: dict[str, Any], images: dict[str, list[np.ndarray]], path: Path, n: int = 8) -> None:
    rows = result["rows"]
    names = [r["name"] for r in rows if not r["params"]]
    names += [r["name"] for r in rows if r["method"] == "sjd+lantern"][-1:]
    lant = [r for r in rows if r["method"] == "lantern" and r["shape"] == "tree"]
    if lant:
        names.append(min(lant, key=lambda r: r["summary"]["mean_tvd"])["name"])
        names.append(max(lant, key=lambda r: speedup(r, "ar") or 0.0)["name"])
    pp = [r for r in rows if r["method"] == "lantern++"]
    if pp:
        names.append(pp[len(pp) // 2]["name"])
    names = list(dict.fromkeys(names))
    prompts = result["meta"]["prompts"]
    n = min(n, len(prompts))
    fig, axes = plt.subplots(len(names), n, figsize=(1.25 * n + 1.6, 1.35 * len(names) + 0.5), squeeze=False)
    for i, name in enumerate(names):
        for j in range(n):
            ax = axes[i, j]
            ax.imshow(images[name][j])
            ax.set_xticks([])
            ax.set_yticks([])
            if j == 0:
                ax.set_ylabel(name, fontsize=7, rotation=0, ha="right", va="center")
            if i == 0:
                ax.set_title(prompts[j][:22], fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def make_all(result: dict[str, Any], out: Path, images: dict | None = None) -> list[str]:
    out = Path(out)
    tradeoff(result, out / "tradeoff.png")
    accepted_hist(result, out / "accepted_hist.png")
    written = ["tradeoff.png", "accepted_hist.png"]
    if images:
        samples(result, images, out / "samples.png")
        written.append("samples.png")
    return written
