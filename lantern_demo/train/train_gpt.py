"""Train the emoji GPT (LlamaGen architecture) jointly with its conditioning.

Model: ``lantern_demo.gpt.GPT`` at :func:`gpt_config` (vocab = the VQ codebook, 16x16 image
tokens; the retraining's sizes are in ``retrain.Settings``). Conditioning (``condition``,
:func:`make_conditioning`):

- ``"class"`` (the embedded model's): LlamaGen's class-to-image form. Every training emoji is a
  class with one learned embedding, the GPT's one-entry prefix; ``text.ClassTextEncoder`` maps a
  prompt to the class whose names share its words (:class:`ClassBank`).
- ``"caption"``: ``text.WordTextEncoder`` over the words of the training captions, 16 prefix
  positions, a random phrasing per image per step (:class:`CaptionBank`).

Training: teacher-forced next-token cross-entropy on image tokens [B, 256]
(``GPT.forward_train``). The condition is dropped with probability 0.15 (the row then uses
``uncond_embedding``) so that classifier-free guidance works. Optional input noise
(:func:`corrupt_inputs`): the model cannot read the emoji off a clean prefix alone and learns to
continue after a wrong token. Optional content loss (:func:`content_loss`): every word embedding
gets a direct gradient from its image. AdamW with warm-up and cosine (``optim``), bfloat16
autocast where the CPU runs it natively (``precision``), resumable in time-limited chunks
(``resume``). Attention runs on PyTorch's "math" SDPA backend while training: with a caption key
mask the CPU flash kernel was about 2x slower per step at these sizes.

What was measured to choose these settings: ``docs/training.md``.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from ..emoji.data import TEMPLATE_WORDS
from ..gpt import GPT, GPTConfig
from ..text import ClassTextEncoder, WordTextEncoder, build_vocab
from . import precision
from .optim import lr_schedule, param_groups
from .resume import Chunks, Paused, load_state, save_state

TEXT_DIM = 128
PREFIX = 16


def gpt_config(vocab_size: int, caption_dim: int = TEXT_DIM, **overrides):
    base = dict(vocab_size=vocab_size, dim=192, n_layer=6, n_head=6, ffn_hidden=512, cls_token_num=PREFIX,
                caption_dim=caption_dim, grid=16, class_dropout_p=0.15)
    base.update(overrides)
    return GPTConfig(**base)


def make_text_encoder(train_captions: list[str], dim: int = TEXT_DIM, max_length: int = PREFIX):
    vocab = build_vocab(train_captions)
    return WordTextEncoder(vocab, dim=dim, max_length=max_length, init_std=1.0 / math.sqrt(dim))


def make_class_encoder(names: list[list[str]], train_idx: np.ndarray, dim: int = TEXT_DIM,
                       symbols: list[str] | None = None):
    """Class conditioning: class c is training item ``train_idx[c]``, matched by its names (and by its
    emoji character ``symbols[train_idx[c]]`` when given)."""
    return ClassTextEncoder([names[i] for i in train_idx], dim=dim, stop_words=TEMPLATE_WORDS,
                            init_std=1.0 / math.sqrt(dim),
                            symbols=None if symbols is None else [symbols[i] for i in train_idx])


class ClassBank:
    """The class of every item: a training item its own class, any other the class its main caption matches.

    Same interface as :class:`CaptionBank` (ids [B, 1] = class + 1, mask [B, 1]).
    """

    def __init__(self, text, captions: list[list[str]], train_idx: np.ndarray):
        ids, _, _ = text.tokenize([c[1] if len(c) > 1 else c[0] for c in captions])
        ids[torch.as_tensor(train_idx, dtype=torch.long), 0] = torch.arange(len(train_idx)) + 1
        self.ids = ids

    @classmethod
    def of_classes(cls, row_class: np.ndarray) -> "ClassBank":
        """A bank whose row r is class ``row_class[r]`` (several rows per class: renditions of one emoji)."""
        bank = cls.__new__(cls)
        bank.ids = torch.as_tensor(np.asarray(row_class), dtype=torch.long)[:, None] + 1
        return bank

    def sample(self, items: torch.Tensor, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        return self.first(items)

    def first(self, items: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ids = self.ids[items]
        return ids, ids != 0


def make_conditioning(condition: str, captions: list[list[str]], names: list[list[str]] | None,
                      train_idx: np.ndarray, row_class: np.ndarray | None = None, symbols: list[str] | None = None):
    """(text encoder, bank) for ``condition`` "caption" (word encoder, 16 positions) or "class" (1 position).

    ``row_class`` (class conditioning only): the class of every row, when rows are renditions and
    ``names`` (and ``symbols``, the emoji characters) list one entry per class; otherwise every
    training row is its own class.
    """
    if row_class is not None:
        if condition != "class" or names is None:
            raise ValueError("row_class needs condition 'class' and one names entry per class")
        return make_class_encoder(names, np.arange(len(names)), symbols=symbols), ClassBank.of_classes(row_class)
    if condition == "caption":
        text = make_text_encoder([c for i in train_idx for c in captions[i]])
        return text, CaptionBank(text, captions)
    if condition == "class":
        if names is None:
            raise ValueError("class conditioning needs the items' names")
        text = make_class_encoder(names, train_idx)
        return text, ClassBank(text, captions, train_idx)
    raise ValueError(f"condition must be 'caption' or 'class', got {condition!r}")


class CaptionBank:
    """All phrasings of every item, tokenised once: ids [M, L], owner item of each, per-item ranges."""

    def __init__(self, text, captions: list[list[str]]):
        flat, start = [], []
        for caps in captions:
            start.append(len(flat))
            flat.extend(caps)
        start.append(len(flat))
        self.ids, self.mask, _ = text.tokenize(flat)
        self.start = torch.tensor(start)

    def sample(self, items: torch.Tensor, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        lo, hi = self.start[items], self.start[items + 1]
        pick = lo + (torch.rand(len(items), generator=g) * (hi - lo).float()).long().clamp_max(hi - lo - 1)
        return self.ids[pick], self.mask[pick]

    def first(self, items: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pick = self.start[items]
        return self.ids[pick], self.mask[pick]


def corrupt_inputs(tokens: torch.Tensor, p: float, vocab_size: int, g: torch.Generator) -> torch.Tensor:
    """Copy of ``tokens`` [B, N] with each entry replaced, with probability ``p``, by a uniform code in [0, vocab_size).

    Used for the GPT's inputs only; the loss still targets the clean ``tokens``.
    """
    if p <= 0:
        return tokens
    hit = torch.rand(tokens.shape, generator=g) < p
    noise = torch.randint(0, vocab_size, tokens.shape, generator=g)
    return torch.where(hit, noise, tokens)


def content_loss(head: torch.nn.Linear, emb: torch.Tensor, mask: torch.Tensor, tokens: torch.Tensor,
                 background: int) -> torch.Tensor:
    """Cross-entropy (nats) between ``head(mean word embedding)`` and the image's code histogram.

    emb [B, L, C] caption embeddings, mask [B, L] bool, tokens [B, N] image codes; the
    ``background`` code is left out of the histogram (it says nothing about the emoji).
    Rows with no caption word or no foreground code contribute 0. Returns a scalar.
    """
    m = mask[..., None].to(torch.float32)
    pooled = (emb.float() * m).sum(1) / m.sum(1).clamp_min(1)
    hist = torch.zeros(tokens.shape[0], head.out_features).scatter_add_(1, tokens, torch.ones(tokens.shape))
    hist[:, background] = 0
    hist = hist / hist.sum(1, keepdim=True).clamp_min(1)
    return -(hist * F.log_softmax(head(pooled), dim=-1)).sum(1).mean()


@torch.no_grad()
def nll_per_token(gpt, text, ids: torch.Tensor, cap_ids: torch.Tensor, cap_mask: torch.Tensor, batch: int = 64) -> float:
    """Mean conditional per-token NLL (nats) of image tokens ``ids`` [N, T] given captions."""
    gpt.eval()
    tot, cnt = 0.0, 0
    for i in range(0, len(ids), batch):
        emb = text(cap_ids[i : i + batch])
        with sdpa_kernel(SDPBackend.MATH), precision.autocast():
            logits, _ = gpt.forward_train(emb, ids[i : i + batch], None, cap_mask[i : i + batch])
        loss = F.cross_entropy(logits.float().flatten(0, 1), ids[i : i + batch].flatten(), reduction="sum")
        tot += loss.item()
        cnt += ids[i : i + batch].numel()
    return tot / max(1, cnt)


def _draw_batch(tr: torch.Tensor, ids: torch.Tensor, bank, batch: int, dropout: float, input_noise: float,
                vocab_size: int, g: torch.Generator):
    """One step's (cap_ids, cap_mask, drop [B] bool, noisy inputs [B, N], clean tokens [B, N]), drawn from ``g``."""
    items = tr[torch.randint(0, len(tr), (batch,), generator=g)]
    cap_ids, cap_mask = bank.sample(items, g)
    drop = torch.rand(batch, generator=g) < dropout
    tokens = ids[items]
    return cap_ids, cap_mask, drop, corrupt_inputs(tokens, input_noise, vocab_size, g), tokens


def _restore(state_path: Path, settings: dict, modules: list, opt, g: torch.Generator, steps: int, log):
    """Load a saved training state into ``modules``, ``opt``, ``g`` and torch's RNG; returns (step, ema, chunks)."""
    st = load_state(state_path, settings)
    for m, sd in zip(modules, st["modules"]):
        m.load_state_dict(sd)
    opt.load_state_dict(st["optimizer"])
    g.set_state(st["generator"])
    torch.set_rng_state(st["torch_rng"])
    chunks = Chunks(done=st["chunks"], start_step=st["step"])
    log(f"gpt: resumed at step {st['step']}/{steps} ({len(chunks.done)} chunk(s) before, "
        f"{chunks.seconds:.0f}s of training so far)")
    return st["step"], st["ema"], chunks


def _final_metrics(gpt, text, bank, ids: torch.Tensor, train_idx: np.ndarray, heldout_idx: np.ndarray,
                   settings: dict, chunks: list[dict], ema: float, aux, eval_batch: int, log) -> dict:
    """The trained GPT's record: settings, time, sizes, config, final losses and held-out / training NLL."""
    gpt.eval()
    text.eval()
    he = torch.as_tensor(heldout_idx, dtype=torch.long)
    rng = np.random.default_rng(settings["seed"])
    sub = torch.as_tensor(rng.choice(train_idx, size=min(len(train_idx), max(len(heldout_idx), 1)), replace=False))
    cfg = gpt.cfg
    metrics = {
        **{k: settings[k] for k in ("steps", "batch", "lr", "input_noise", "content_weight", "condition")},
        "train_seconds": round(sum(c["seconds"] for c in chunks), 1),
        "chunks": chunks,
        "params_gpt": sum(p.numel() for p in gpt.parameters()),
        "params_text_encoder": sum(p.numel() for p in text.parameters()),
        "text_vocab": len(getattr(text, "vocab", getattr(text, "known", ()))),
        "classes": len(getattr(text, "names", ())) or None,
        "config": {k: getattr(cfg, k) for k in ("vocab_size", "dim", "n_layer", "n_head", "ffn_hidden",
                                                   "cls_token_num", "caption_dim", "grid", "class_dropout_p",
                                                   "prefix_rope")},
        "final_train_loss_ema": ema,
        "final_content_loss": None if aux is None else aux.item(),
    }
    if len(he):
        metrics["heldout_nll"] = nll_per_token(gpt, text, ids[he], *bank.first(he), batch=eval_batch)
    metrics["train_nll"] = nll_per_token(gpt, text, ids[sub], *bank.first(sub), batch=eval_batch)
    log(f"gpt: held-out NLL {metrics.get('heldout_nll', float('nan')):.4f}, train NLL {metrics['train_nll']:.4f} nats/token")
    return metrics


def train_gpt(ids: torch.Tensor, captions: list[list[str]], train_idx: np.ndarray, heldout_idx: np.ndarray,
              vocab_size: int, steps: int = 3000, batch: int = 32, lr: float = 1.5e-3, wd: float = 0.05, seed: int = 0,
              log=print, config_overrides: dict | None = None, eval_batch: int = 64, input_noise: float = 0.0,
              content_weight: float = 0.0, condition: str = "caption", names: list[list[str]] | None = None,
              state_path: Path | None = None, resume: bool = False, time_limit: float | None = None,
              save_every: int = 200, row_class: np.ndarray | None = None, symbols: list[str] | None = None):
    """Returns (gpt, text_encoder, metrics).

    ids [N_items, T] image codes; ``input_noise``: see :func:`corrupt_inputs`; ``content_weight``:
    weight of :func:`content_loss` (the background code is the most frequent training code);
    ``condition``: see :func:`make_conditioning` (``names``: every item's names, for "class").
    Resumable (``resume``): the full state goes to ``state_path`` every ``save_every`` steps, and after
    ``time_limit`` seconds of this call, which then raises ``resume.Paused``; ``resume`` continues from it.
    """
    t_call = time.time()
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    text, bank = make_conditioning(condition, captions, names, train_idx, row_class, symbols)
    overrides = dict(config_overrides or {})
    if condition == "class":
        overrides.setdefault("cls_token_num", 1)
    cfg = gpt_config(vocab_size, text.dim, **overrides)
    gpt = GPT(cfg)
    tr = torch.as_tensor(train_idx, dtype=torch.long)
    modules = [gpt, text]
    if content_weight:
        head = torch.nn.Linear(text.dim, vocab_size)  # content loss only, not saved
        background = int(torch.bincount(ids[tr].flatten(), minlength=vocab_size).argmax())
        modules.append(head)
    opt = torch.optim.AdamW(param_groups(modules, wd), lr=lr, betas=(0.9, 0.95))
    warm = max(1, min(200, steps // 10))
    settings = {"steps": steps, "batch": batch, "lr": lr, "wd": wd, "seed": seed, "input_noise": input_noise,
                "content_weight": content_weight, "condition": condition, "items": len(train_idx),
                "overrides": {k: v for k, v in sorted(overrides.items())}}
    start, ema, chunks = 0, None, Chunks()
    if resume and state_path is not None:
        start, ema, chunks = _restore(state_path, settings, modules, opt, g, steps, log)

    def save(step: int) -> None:
        if state_path is not None:
            save_state(state_path, {"settings": settings, "step": step, "ema": ema,
                                    "modules": [m.state_dict() for m in modules], "optimizer": opt.state_dict(),
                                    "generator": g.get_state(), "torch_rng": torch.get_rng_state(),
                                    "chunks": chunks.close(step)})

    gpt.train()
    text.train()
    aux = None
    for step in range(start, steps):
        if time_limit is not None and time.time() - t_call > time_limit and step > start:
            save(step)
            raise Paused("gpt", step, steps, state_path)
        for gr in opt.param_groups:
            gr["lr"] = lr_schedule(step, steps, lr, warm)
        cap_ids, cap_mask, drop, inputs, tokens = _draw_batch(tr, ids, bank, batch, cfg.class_dropout_p,
                                                              input_noise, vocab_size, g)
        with sdpa_kernel(SDPBackend.MATH):
            with precision.autocast():
                emb = text(cap_ids)
                logits, _ = gpt.forward_train(emb, inputs, drop, cap_mask)
            loss = F.cross_entropy(logits.float().flatten(0, 1), tokens.flatten())
            total = loss
            if content_weight:
                aux = content_loss(head, emb, cap_mask, tokens, background)
                total = loss + content_weight * aux
            opt.zero_grad(set_to_none=True)
            total.backward()
        torch.nn.utils.clip_grad_norm_([p for m in modules for p in m.parameters()], 1.0)
        opt.step()
        ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
        if step % 100 == 0 or step == steps - 1:
            log(f"gpt step {step}/{steps} loss {loss.item():.4f} (ema {ema:.4f})"
                + (f" content {aux.item():.4f}" if aux is not None else "")
                + f" lr {lr_schedule(step, steps, lr, warm):.2e} {chunks.seconds:.0f}s")
        if (step + 1) % save_every == 0 and step + 1 < steps:
            save(step + 1)
    save(steps)
    metrics = _final_metrics(gpt, text, bank, ids, train_idx, heldout_idx, settings, chunks.close(steps), ema, aux,
                             eval_batch, log)
    return gpt, text, metrics
