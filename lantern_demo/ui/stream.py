"""The /generate handler: runs the method, then the baseline, streaming frames of both to the page.

``generate`` is the public endpoint (its keyword inputs are ``request.INPUT_NAMES``);
``rerun`` is the private slider-release handler. Both yield the outputs in
``request.OUTPUT_NAMES`` order plus the session cache (the baseline's last run, reused
when only the method's settings changed).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import os
import time
from typing import Any, Callable, Iterator

import gradio as gr

from ..methods import RELAXED, DecodeConfig
from ..spaces_compat import GPU
from . import models as registry
from . import plots
from .notice import prompt_notice
from .request import (OUTPUT_NAMES, Request, alive_check, build_request, describe, describe_shape, image_label,
                      titles)

logger = logging.getLogger(__name__)

DEBOUNCE_S = 0.3  # a slider release waits this long (cancelled by further slider input) before running
STREAM_SHARE = 0.1  # Gradio-side cost of streamed frames, as a share of elapsed time (plus the decode share)
MAX_GAP_S = 0.5  # ... but a new partial image is sent at least this often
DECODE_SHARE = 0.1  # partial VQ decodes, as a share of elapsed time (pipeline.stream)
LOG_LINES = 600  # enough for a method and an AR baseline of 256 tokens
GPU_DURATION = int(os.environ.get("LANTERN_GPU_DURATION", "90"))


@dataclasses.dataclass
class _Run:
    """One finished (or running) generation as the page shows it."""

    label: str
    config: DecodeConfig
    steps: list = dataclasses.field(default_factory=list)
    image: Any = None
    tokens: list[int] = dataclasses.field(default_factory=list)
    stats: dict[str, float] = dataclasses.field(default_factory=dict)
    reused: bool = False
    notices: list[str] = dataclasses.field(default_factory=list)
    reading: dict = dataclasses.field(default_factory=dict)
    first_image_s: float | None = None
    final_image_s: float | None = None
    frames: int = 0

    def as_json(self, num_tokens: int) -> dict[str, Any]:
        return {
            "method": self.config.method,
            "draft": self.config.shape,
            "shape": describe_shape(self.config),
            "config": dataclasses.asdict(self.config),
            "stats": self.stats,
            "accepted_per_step": [len(s.tokens) for s in self.steps],
            "num_tokens": num_tokens,
            "tokens": self.tokens,
            "reused": self.reused,
            "first_image_s": self.first_image_s,
            "final_image_s": self.final_image_s,
            "frames": self.frames,
        }


class _Log:
    """The log box: a header line, then the last ``LOG_LINES`` lines (one per target pass), newest first."""

    def __init__(self, header: str):
        self.header = header
        self.lines: collections.deque[str] = collections.deque(maxlen=LOG_LINES)

    def add(self, line: str) -> None:
        self.lines.append(line)

    def text(self) -> str:
        return "\n".join([self.header, *reversed(self.lines)])


def log_stopped(text: str | None) -> str:
    """The log box after Stop: the note goes right under the header (newest first)."""
    header, _, rest = (text or "").partition("\n")
    return "\n".join(filter(None, [header, "stopped by the user", rest]))


def _outputs(**values: Any) -> tuple:
    """The /generate output tuple plus the session cache; outputs not named are left unchanged."""
    return tuple(values.get(name, gr.skip()) for name in OUTPUT_NAMES + ("cache",))


class _Superseded(Exception):
    pass


def _baseline_key(req: Request) -> tuple:
    assert req.baseline is not None
    return (req.model, req.prompt, req.seed, repr(req.baseline))


def _stream_run(req: Request, config: DecodeConfig, label: str, role: str, log: _Log,
                others: dict[str, list], t_click: float,
                alive: Callable[[], bool]) -> Iterator[tuple[_Run, dict[str, Any]]]:
    """Run one generation, yielding (run, outputs to update) whenever a frame is worth sending.

    Frames are sent while their cost (building them, and Gradio processing and
    sending them: from building to our resumption) stays within ``STREAM_SHARE`` of
    the elapsed time, and at least every ``MAX_GAP_S`` when the pipeline has a new
    image; the first frame (right after the prefill) and the last are always sent.
    The pipeline itself keeps partial VQ decodes within ``DECODE_SHARE``. Raises
    ``_Superseded`` (after closing the pipeline's stream) when ``alive()`` turns false.
    """
    pipe = req.pipe
    n = pipe.num_tokens
    run = _Run(label, config)
    image_key = "image" if role == "method" else "baseline_image"
    committed = seen = 0
    ui_time = last_cost = last_frame = 0.0
    t0 = time.perf_counter()
    with contextlib.closing(pipe.stream(req.prompt, config, req.seed, decode_share=DECODE_SHARE)) as stream:
        for gen in stream:
            if not alive():
                raise _Superseded
            for step in gen.steps[seen:]:
                committed += len(step.tokens)
                log.add(plots.step_line(label, step, committed, n, config.relaxed))
            seen = len(gen.steps)
            run.steps, run.notices, run.reading = gen.steps, gen.notices, gen.reading
            if gen.image is None and not gen.done:
                continue
            t_frame = time.perf_counter()
            within_budget = ui_time + last_cost <= STREAM_SHARE * (t_frame - t0 + last_cost)
            if not gen.done and run.frames and not within_budget and t_frame - last_frame < MAX_GAP_S:
                continue
            if gen.done:
                run.image, run.tokens, run.stats = gen.image, gen.tokens.tolist(), gen.stats
            frame = {image_key: gen.image,
                     "cumulative": plots.cumulative_frame({**others, role: gen.steps}, n),
                     "log": log.text()}
            if role == "method":
                frame["per_step"] = plots.per_step_frame(gen.steps)
                frame["token_map"] = plots.token_map(gen.source, gen.step_of, pipe.target.cfg.grid)
                frame["explain"] = plots.explain_map(gen.top1, gen.relaxed_only, pipe.target.cfg.grid)
            if run.first_image_s is None:
                run.first_image_s = time.perf_counter() - t_click
            if gen.done:
                run.final_image_s = time.perf_counter() - t_click
            run.frames += 1
            yield run, frame
            last_frame = time.perf_counter()
            last_cost = last_frame - t_frame  # building the frame + Gradio sending it
            ui_time += last_cost
    # streaming overhead: the pipeline's streaming work (partial decodes included) and the frames,
    # as a share of the run (the final decode excluded)
    run.stats["ui_time"] = ui_time
    run.stats["stream_overhead"] = (ui_time + run.stats.get("stream_time", 0.0)) / max(
        run.stats.get("end_to_end_time", 0.0), 1e-9)


def _generate(req: Request, cache: dict | None, alive: Callable[[], bool]) -> Iterator[tuple]:
    """Stream the method's run, then the baseline's (or reuse it from ``cache``), then the summary."""
    t_click = time.perf_counter()
    n = req.pipe.num_tokens
    main_label, base_label = titles(req)
    notice = registry.current().notice(req.model)
    log = _Log(f"model {req.model}, seed {req.seed}, {n} tokens: {main_label} ({describe(req.config)})"
               + (f" vs {base_label} ({describe(req.baseline)})" if req.baseline else ""))
    reuse = bool(req.baseline and cache and cache.get("key") == _baseline_key(req))
    base_value = cache["run"].image if reuse else None
    yield _outputs(image=gr.update(label=image_label(main_label, req.config)),
                   baseline_image=gr.update(value=base_value, label=image_label(base_label, req.baseline)
                                            if req.baseline else "Baseline (none)"),
                   compare=None, table=plots.stats_table([]), seed=req.seed, notice=notice,
                   log=log.text())
    shown: dict[str, Any] = {"baseline_image": base_value, "seed": req.seed, "notice": notice}

    main, noticed = None, False
    for main, frame in _stream_run(req, req.config, main_label, "method", log, {}, t_click, alive):
        if not noticed and main.notices:  # the first frame: prompt notices (cut, unknown words)
            noticed = True
            for message in main.notices:
                gr.Warning(message)
            frame["notice"] = "\n\n".join(filter(None, [notice, prompt_notice(main.reading, main.notices)]))
        shown.update(frame)
        yield _outputs(**frame)
    assert main is not None

    base = None
    if req.baseline is not None:
        if reuse:
            base = dataclasses.replace(cache["run"], reused=True)
            log.add(f"{base_label}: reused from the previous run (same model, prompt, seed and settings)")
            shown["cumulative"] = plots.cumulative_frame({"method": main.steps, "baseline": base.steps}, n)
        else:
            for base, frame in _stream_run(req, req.baseline, base_label, "baseline", log,
                                           {"method": main.steps}, t_click, alive):
                shown.update(frame)
                yield _outputs(**frame)
            cache = {"key": _baseline_key(req), "run": dataclasses.replace(base, reused=False)}
    # the last message carries every output, so that an API caller's result is complete
    yield _outputs(**{**shown, **_summary(req, main, base, log, t_click), "cache": cache})


def _summary(req: Request, main: _Run, base: _Run | None, log: _Log, t_click: float) -> dict[str, Any]:
    """The final outputs: comparison, statistics table, log with the summary line, stats JSON."""
    n = req.pipe.num_tokens
    main_label, base_label = titles(req)
    speedup = None
    if base is not None:
        speedup = base.stats["wall_time"] / max(main.stats["wall_time"], 1e-9)
        rows = [plots.stats_row(main_label, main.stats, speedup),
                plots.stats_row(base_label + (" (reused)" if base.reused else ""), base.stats, 1.0)]
    else:
        rows = [plots.stats_row(main_label, main.stats, None)]
    summary = f"{main_label}: {main.stats['nfe']:.0f} target passes, {main.stats['wall_time']:.2f} s"
    if base is not None:
        summary += (f"; {base_label}: {base.stats['nfe']:.0f} passes, {base.stats['wall_time']:.2f} s"
                    f" -> speed-up {speedup:.2f}x")
    log.add(summary)
    stats = {
        "model": req.model,
        "prompt": req.prompt,
        "seed": req.seed,
        "notices": main.notices,
        "prompt_reading": main.reading,
        "main": main.as_json(n),
        "baseline": base.as_json(n) if base is not None else None,
        "speedup": speedup,
        "total_s": time.perf_counter() - t_click,
    }
    # the slider does not scale small images up: send them enlarged
    compare = (plots.enlarge(main.image), plots.enlarge(base.image)) if base is not None else None
    return {"compare": compare, "table": plots.stats_table(rows), "log": log.text(), "stats": stats}


@GPU(duration=GPU_DURATION)
def generate(cache: dict | None = None, session: str | None = None, **values: Any) -> Iterator[tuple]:
    """Generate an image with ``method``, then with ``baseline`` (same prompt, seed and sampling), streaming both.

    values: the endpoint's inputs by name (``INPUT_NAMES``). Yields the outputs in
    ``OUTPUT_NAMES`` order (+ the session cache). Raises ``gr.Error`` for an empty prompt,
    an unavailable model or settings out of range. Stops quietly when ``supersede(session)``
    is called meanwhile.
    """
    alive = alive_check(session)
    req = build_request(values)
    try:
        yield from _generate(req, cache, alive)
    except _Superseded:
        return
    except gr.Error:
        raise
    except Exception as err:  # keep the message; the pipeline itself stays healthy (its lock is released)
        logger.exception("generation failed")
        raise gr.Error(f"Generation failed: {type(err).__name__}: {err}") from err


def rerun(cache: dict | None = None, session: str | None = None, **values: Any) -> Iterator[tuple]:
    """Slider release: wait ``DEBOUNCE_S``, then re-run with the same seed unless the user moved a slider again."""
    prompt = values["prompt"]
    if values["method"] not in RELAXED or not isinstance(prompt, str) or not prompt.strip():
        yield _outputs()
        return
    alive = alive_check(session)
    time.sleep(DEBOUNCE_S)
    if not alive():  # the user is dragging again: a newer release will follow
        yield _outputs()
        return
    yield from generate(cache, session, **{**values, "randomize_seed": False})
