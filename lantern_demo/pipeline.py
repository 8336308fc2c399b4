"""Prompt -> text embedding -> decoding engine -> image tokens -> image.

``LanternPipeline`` holds the components, loaded once per (preset, device) by
``load_pipeline`` and shared by every request; per-request state (KV caches,
random generator) is created by each call and never outlives it. A lock
serialises generations on one pipeline, so a cancelled run (its generator
closed mid-way) leaves the pipeline healthy: the next call starts with a fresh
prefill. ``LanternPipeline.check`` is where a request's settings are checked
against the pipeline (ranges, drafter, neighbour table) before anything runs.

Presets (``presets.py``: their settings; ``hub.py``: where the Hub ones come from):
- ``emoji``: the embedded default trained by us (``assets/emoji``), CPU friendly;
- ``tiny-random``: random weights at the embedded model's shape, for tests and
  as a fallback while no trained weights are present;
- ``llamagen-t2i`` / ``llamagen-t2i-512``: LlamaGen T2I XL with LANTERN's
  drafter, downloaded through ``huggingface_hub``; GPU only.

The drafter is optional (``hub.OPTIONAL_COMPONENTS``): without its weights a
pipeline still runs AR and the drafter-free SJD methods, and ``drafter_missing``
says why the drafter-based ones are unavailable.

Embedded layout (``assets/emoji``): ``target/`` and ``drafter/`` (config.json +
model.safetensors, ``checkpoints.save_gpt`` / ``save_drafter``), ``vq/``
(``VQModel.save_pretrained``), ``text_encoder/`` (a ``WordTextEncoder`` or
``ClassTextEncoder``, read by ``text.load_text_encoder``).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Iterator

import torch
from PIL import Image
from torch import Tensor

from .checkpoints import load_drafter, load_gpt
from .drafter import Drafter
from .engine import decode
from .gpt import GPT, Caption
from .hub import OPTIONAL_COMPONENTS, PRESETS, Preset, WeightsUnavailable, get_preset
from .methods import TITLES, DecodeConfig
from .neighbors import neighbor_table
from .presets import EMBEDDED, TINY_RANDOM, settings
from .steps import Step, summarize
from .text import PromptNotice, T5TextEncoder, TextEncoder, load_text_encoder
from .tiny import tiny_components
from .vq import VQDecoder

logger = logging.getLogger(__name__)

MAX_PROMPT_CHARS = 2000


class PresetUnavailable(RuntimeError):
    """A preset (or a method's part of it) cannot run here: no weights, or it needs a GPU; the
    message says why and what to do."""


@dataclass
class Generation:
    """The state of a (possibly running) generation, as streamed to the UI.

    tokens: [N] committed ids, -1 where not generated yet. source: [N] per position,
    -1 not yet, 0 sampled by the target, d >= 1 accepted draft at depth d.
    step_of: [N] verification step that committed each position (-1 not yet).
    top1: [N] float, the target's top-1 probability where each token was decided (NaN not yet);
    relaxed_only: [N] bool, tokens accepted only thanks to the relaxation (``Step``'s fields).
    image: the latest decoded image (partial or final) or None if not refreshed.
    steps: all steps so far; stats: ``steps.summarize`` of them plus pipeline times.
    notices: messages about the prompt for the user; reading: how it was read
    (``PromptNotice.reading``).
    """

    tokens: Tensor
    source: Tensor
    step_of: Tensor
    top1: Tensor
    relaxed_only: Tensor
    steps: list[Step] = field(default_factory=list)
    image: Image.Image | None = None
    stats: dict[str, float] = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)
    reading: dict = field(default_factory=dict)
    done: bool = False

    def add(self, step: Step) -> None:
        sl = slice(step.start, step.start + len(step.tokens))
        self.tokens[sl] = torch.tensor(step.tokens)
        self.source[sl] = torch.tensor(step.source)
        self.step_of[sl] = step.index
        self.top1[sl] = torch.tensor(step.top1)
        self.relaxed_only[sl] = torch.tensor(step.relaxed_only)
        self.steps.append(step)


class LanternPipeline:
    """Components of one preset on one device, loaded once.

    text_encoder: prompts -> caption embeddings; target: ``GPT``; drafter: ``Drafter``,
    or None when its weights are unavailable (``drafter_missing`` says why); vq:
    ``VQDecoder``; neighbors: [V, K] codebook neighbour table (K = the largest k offered).
    """

    def __init__(self, preset: Preset, text_encoder: TextEncoder, target: GPT, drafter: Drafter | None,
                 vq: VQDecoder, neighbors: Tensor, device: torch.device, drafter_missing: str | None = None):
        self.preset = preset
        self.text_encoder = text_encoder
        self.target = target
        self.drafter = drafter
        self.drafter_missing = drafter_missing if drafter is None else None
        self.vq = vq
        self.neighbors = neighbors
        self.device = device
        self.num_tokens = target.cfg.grid**2
        self._lock = threading.Lock()

    @property
    def max_k(self) -> int:
        return int(self.neighbors.shape[1])

    def compile(self) -> float | None:
        """Turn on the target's compiled one-token pass (``GPT.compile_one_token``: CPUs only) and
        compile it now, for guided (2 rows) and unguided (1 row) decoding, so that no request
        waits for it. Returns the seconds it took, or None when it does not apply here or fails
        (the eager pass then stays; logged)."""
        with self._lock:
            if not self.target.compile_one_token():
                return None
            t0 = time.perf_counter()
            with torch.inference_mode():  # per rows: the graph for a first length, then the one for any length
                for rows in (2, 1):
                    self.target.prefill(None, rows, self.num_tokens)
                    for t in range(2):
                        self.target.forward(torch.zeros(1, dtype=torch.long), torch.tensor([t]))
            return time.perf_counter() - t0 if self.target.one_token_compiled else None

    def check(self, config: DecodeConfig) -> None:
        """Raise ValueError for settings out of range (``DecodeConfig.validate``, k up to this
        pipeline's neighbour table) and PresetUnavailable for a method whose drafter is missing."""
        config.validate(self.max_k)
        if config.needs_drafter and self.drafter is None:
            raise PresetUnavailable(
                f"{TITLES[config.method]} needs a drafter, and model {self.preset.name!r} has none here "
                f"({self.drafter_missing}). Choose AR, SJD or SJD+LANTERN: they run without it.")

    def encode_prompt(self, prompt: str) -> tuple[Caption, list[str]]:
        """Prompt -> (GPT condition, notices for the user). Raises ValueError on an empty prompt."""
        cond, _, notices = self.read_prompt(prompt)
        return cond, notices

    def read_prompt(self, prompt: str) -> tuple[Caption, PromptNotice, list[str]]:
        """Prompt -> (GPT condition, how the encoder read it, notices for the user: its messages
        and a cut). Raises ValueError on an empty prompt."""
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError("Please enter a prompt.")
        notices = []
        if len(prompt) > MAX_PROMPT_CHARS:
            prompt = prompt[:MAX_PROMPT_CHARS]
            notices.append(f"The prompt was cut to its first {MAX_PROMPT_CHARS} characters.")
        with torch.no_grad():
            emb = self.text_encoder.encode([prompt])
        notice: PromptNotice = emb.notices[0]
        notices.extend(notice.messages())
        return Caption(emb.emb[0].to(self.device), emb.mask[0].to(self.device)), notice, notices

    def stream(self, prompt: str, config: DecodeConfig, seed: int = 0,
               decode_share: float = 0.2) -> Iterator[Generation]:
        """Generate, yielding a ``Generation`` after every target pass.

        Partial images are decoded only while decoding stays under ``decode_share``
        of the elapsed time (the final image is always decoded); other events
        carry ``image=None``; each refresh decodes only the token rows generated so far
        (``VQDecoder.decode_partial``). The first event
        comes right after the prefill. ``stats`` (``steps.summarize`` and the
        pipeline's times, s) is filled in the last event only: decode_time, the
        partial VQ decodes; stream_time, all the pipeline's work between the
        engine's steps (recording each step, partial decodes; decode_time included,
        the consumer's time excluded); final_decode_time; end_to_end_time.
        """
        self.check(config)
        cond, notice, notices = self.read_prompt(prompt)
        n = self.num_tokens
        gen = Generation(torch.full((n,), -1), torch.full((n,), -1), torch.full((n,), -1),
                         torch.full((n,), float("nan")), torch.zeros(n, dtype=torch.bool), notices=notices,
                         reading=notice.reading())
        with self._lock:
            t0 = time.perf_counter()
            decode_time = last_cost = stream_time = 0.0
            for step in decode(self.target, self.drafter, cond, config, n, seed, self.neighbors,
                               row_length=self.target.cfg.grid):
                t_step = time.perf_counter()
                gen.add(step)
                gen.image = None
                elapsed = time.perf_counter() - t0
                # decode if the share of time spent decoding stays within budget afterwards
                if decode_time + last_cost <= decode_share * (elapsed + last_cost):
                    t1 = time.perf_counter()
                    gen.image = self.vq.decode_partial(gen.tokens)
                    last_cost = time.perf_counter() - t1
                    decode_time += last_cost
                stream_time += time.perf_counter() - t_step
                if int(gen.tokens.min()) >= 0:
                    break
                yield gen
            t1 = time.perf_counter()
            gen.image = self.vq.decode_pil(gen.tokens[None])[0]
            gen.stats = {**summarize(gen.steps), "decode_time": decode_time, "stream_time": stream_time}
            gen.stats["final_decode_time"] = time.perf_counter() - t1
            gen.stats["end_to_end_time"] = time.perf_counter() - t0
            gen.done = True
        yield gen

    def __call__(self, prompt: str, config: DecodeConfig, seed: int = 0) -> Generation:
        """Generate one image; returns the finished ``Generation`` (image, tokens, steps, stats)."""
        last = None
        for last in self.stream(prompt, config, seed, decode_share=0.0):
            pass
        assert last is not None and last.done
        return last


# ----------------------------------------------------------------------------- loading

_CACHE: dict[tuple[str, str], LanternPipeline] = {}
_CACHE_LOCK = threading.Lock()


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def load_pipeline(name: str = EMBEDDED, device: str | torch.device | None = None) -> LanternPipeline:
    """The pipeline for preset ``name`` on ``device`` (default: CUDA if available), loaded once.

    Raises ``PresetUnavailable`` with a clear message when weights are missing
    (offline, not downloaded) or the preset needs a GPU that is not there.
    """
    device = torch.device(device) if device is not None else default_device()
    key = (name, str(device))
    with _CACHE_LOCK:
        if key not in _CACHE:
            _CACHE[key] = _load(get_preset(name), device)
        return _CACHE[key]


def _load(preset: Preset, device: torch.device) -> LanternPipeline:
    if preset.name == TINY_RANDOM:
        return tiny_random_pipeline(device=device)
    if preset.needs_gpu and device.type != "cuda":
        raise PresetUnavailable(
            f"Preset {preset.name!r} ({preset.title}) needs a GPU (about {preset.min_gpu_memory_gb:g} GB); "
            "this machine has none. Use the embedded 'emoji' preset, or run on a GPU Space."
        )
    try:
        paths = {n: preset.fetch(n) for n in preset.component_names() if n not in OPTIONAL_COMPONENTS}
    except WeightsUnavailable as err:
        raise PresetUnavailable(f"Preset {preset.name!r}: {err}") from err
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    target = load_gpt(paths["target"], device=device, dtype=dtype).eval()
    drafter, drafter_missing = None, None
    try:
        drafter = load_drafter(preset.fetch("drafter"), target=target, device=device, dtype=dtype).eval()
    except WeightsUnavailable as err:
        drafter_missing = str(err)
    spec = settings(preset)
    if spec.text_encoder == "saved":  # our own layout (assets/emoji)
        vq = VQDecoder.from_pretrained(paths["vq"], preset.grid, device=device)
        text: TextEncoder = load_text_encoder(paths["text_encoder"], device=device).eval()
    else:  # LlamaGen's public checkpoints
        vq = VQDecoder.from_llamagen(paths["vq"], preset.grid, device=device)
        text = T5TextEncoder.from_pretrained(paths["text_encoder"], device=device, dtype=dtype)
    neighbors = neighbor_table(vq.raw_codebook().to(device), spec.max_k)
    return LanternPipeline(preset, text, target, drafter, vq, neighbors, device, drafter_missing)


def tiny_random_pipeline(seed: int = 0, device: str | torch.device = "cpu", vocab: int = 256,
                         dim: int = 64, n_layer: int = 2, grid: int = 16) -> LanternPipeline:
    """A pipeline with random weights at a small shape (tests; fallback without trained weights).

    Word vocabulary "red green blue ..." (any other word is reported unknown),
    a random VQ decoder with 4x upsampling (64 px images), codebook ``vocab``.
    """
    device = torch.device(device)
    text, target, drafter, decoder, neighbors = tiny_components(seed, vocab, dim, n_layer, grid)
    for module in (target, drafter, decoder.vq):
        module.to(device)
    return LanternPipeline(get_preset(TINY_RANDOM), text, target, drafter, decoder, neighbors.to(device), device)


def preset_status(device: torch.device | None = None) -> dict[str, str | None]:
    """For each preset: None if it can be loaded here, else the reason it cannot (never downloads).

    A missing drafter alone does not make a preset unavailable (see the module docstring).
    """
    device = device or default_device()
    out: dict[str, str | None] = {}
    for name, preset in PRESETS.items():
        if name == TINY_RANDOM:
            out[name] = None
        elif preset.needs_gpu and device.type != "cuda":
            out[name] = f"needs a GPU (about {preset.min_gpu_memory_gb:g} GB)"
        else:
            missing = preset.missing(optional=False)
            out[name] = None if not missing else str(missing[0])
    return out
