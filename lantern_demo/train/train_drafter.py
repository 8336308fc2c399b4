"""Train the EAGLE-style one-layer drafter of the emoji GPT.

Model: ``lantern_demo.drafter.Drafter`` at the target's widths with one layer
(``cfg.as_drafter()``); its ``embed_tokens`` is a frozen copy of the target's,
its logits come from the target's ``lm_head`` (not trained here).

Data: **teacher-forced target hidden states** on the training emojis' VQ
tokens, with soft targets from the target itself. Each step runs the frozen
target (``GPT.forward_train``) on a batch of (caption, tokens), then the
drafter (``Drafter.forward_train``) on the target's prefix embeddings and
hidden states, and minimises (EAGLE's recipe)

* feature regression: smooth-L1 between the drafter's output at entry k and
  the target's hidden state at k + 1, and
* distillation: cross-entropy of the drafter's next-token distribution against
  the target's own distribution at the same position (weight 0.1 x ... see
  ``CLS_WEIGHT``),

on image entries only (the drafter never predicts image token 0: the target's
prefill does). Captions are dropped (-> ``uncond_embedding``) with probability
``DROP_P`` so that the unconditional CFG row, which the engine also drafts
with, is learned too.

Why not self-distillation (training on the target's own samples, as the
LANTERN paper does)? It was measured and did not pay: ``--drafter-self-samples
N`` draws N samples of the target on training captions
(``self_samples.sample_tokens``, batched: 3,584 samples in about 10 minutes on
one thread inside the retrain stage) and fills half of every batch with them.
With N = 3,584 and the same 1,200 steps (``python -m lantern_demo.train --out
DIR --stages drafter --drafter-self-samples 3584``), on 32 held-out prompts in
one run LANTERN's tokens per target pass went from 2.61 to 2.54 and exact SD's
stayed at 2.49 (wall time vs AR: LANTERN 1.11x -> 1.13x, SD 1.07x -> 1.09x,
within the noise), and the teacher-forced agreement on held-out emojis did not
move (0.711 -> 0.709). The soft targets already give the drafter the
*target's* distribution at every position; the drafter is limited by its one
layer, not by where its prefixes come from. Measured again on the class-conditional
v2 target, whose samples are its memorised training emojis (same command; 16
held-out prompts of the standing benchmark): exact SD's tokens per target pass
went from 2.44 to 2.34 and LANTERN's (chain, delta 0.4, k 128) from 2.37 to
2.52, held-out agreement 0.597 -> 0.610. So the default (N = 0) keeps the
cheaper recipe. Acceptance measured with the real engine is
reported in the model card.
"""

from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from . import precision
from .train_gpt import _param_groups, lr_schedule

DROP_P = 0.25
REG_WEIGHT = 1.0
CLS_WEIGHT = 0.1


def make_drafter(gpt):
    from ..drafter import Drafter

    d = Drafter(gpt.cfg.as_drafter(), lm_head=gpt.lm_head)
    with torch.no_grad():
        d.embed_tokens.weight.copy_(gpt.embed_tokens.weight)
    return d


def _batch_losses(gpt, drafter, text, cap_ids, cap_mask, tokens, drop):
    P = gpt.cfg.cls_token_num
    with torch.no_grad():
        emb = text(cap_ids)
        t_logits, hidden = gpt.forward_train(emb, tokens, drop, cap_mask)
        prefix_embeds, key_mask = gpt.embed_prefix(emb, cap_mask, drop)
        hidden = hidden.float()
        p_target = F.softmax(t_logits.float()[:, 1:], dim=-1)  # image tokens 1..N-1
    d_logits, feats = drafter.forward_train(prefix_embeds.float(), hidden, tokens, key_mask)
    # image entry j sits at k = P - 1 + j; it predicts token j + 1 and its feature ~ hidden[k + 1]
    img_feats = feats[:, P - 1 : -1].float()
    reg = F.smooth_l1_loss(img_feats, hidden[:, P:])
    logq = F.log_softmax(d_logits[:, P - 1 : -1].float(), dim=-1)
    cls = -(p_target * logq).sum(-1).mean()
    agree = (logq.argmax(-1) == p_target.argmax(-1)).float().mean()
    return reg, cls, agree


def train_drafter(
    gpt,
    text,
    ids: torch.Tensor,
    bank,
    train_idx: np.ndarray,
    heldout_idx: np.ndarray,
    steps: int = 600,
    batch: int = 16,
    lr: float = 1.5e-3,
    seed: int = 0,
    log=print,
    eval_batch: int = 64,
    self_samples: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
):
    """Returns (drafter, metrics). ``gpt`` and ``text`` are frozen.

    ids [N, T] image codes; bank: the conditioning of every row (``train_gpt.ClassBank`` / ``CaptionBank``).
    self_samples: the target's own samples ``(ids [M, N], cap_ids [M, L], cap_mask [M, L])``
    (``self_samples.sample_tokens``); when given, half of every batch comes from them and
    half from the data ``ids``.
    """
    torch.manual_seed(seed + 1)
    g = torch.Generator().manual_seed(seed + 1)
    gpt.eval().requires_grad_(False)
    text.eval().requires_grad_(False)
    drafter = make_drafter(gpt)
    drafter.train()
    tr = torch.as_tensor(train_idx, dtype=torch.long)
    opt = torch.optim.AdamW(_param_groups([drafter], 0.0), lr=lr, betas=(0.9, 0.95))
    warm = max(1, min(50, steps // 10))
    t0 = time.time()
    ema = None
    for step in range(steps):
        for gr in opt.param_groups:
            gr["lr"] = lr_schedule(step, steps, lr, warm)
        n_data = batch if self_samples is None else batch - batch // 2
        items = tr[torch.randint(0, len(tr), (n_data,), generator=g)]
        cap_ids, cap_mask = bank.sample(items, g)
        tokens = ids[items]
        if self_samples is not None:
            j = torch.randint(0, len(self_samples[0]), (batch - n_data,), generator=g)
            tokens, cap_ids, cap_mask = (torch.cat([a, b[j]]) for a, b in zip((tokens, cap_ids, cap_mask), self_samples))
        drop = torch.rand(batch, generator=g) < DROP_P
        with sdpa_kernel(SDPBackend.MATH):
            with precision.autocast():
                reg, cls, agree = _batch_losses(gpt, drafter, text, cap_ids, cap_mask, tokens, drop)
            loss = REG_WEIGHT * reg + CLS_WEIGHT * cls
            opt.zero_grad(set_to_none=True)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        opt.step()
        ema = agree.item() if ema is None else 0.95 * ema + 0.05 * agree.item()
        if step % 50 == 0 or step == steps - 1:
            log(f"drafter step {step}/{steps} reg {reg.item():.4f} cls {cls.item():.4f} top1-agree {agree.item():.3f} "
                f"(ema {ema:.3f}) {time.time() - t0:.0f}s")
    drafter.eval()
    metrics = {
        "method": ("teacher-forced target hidden states, soft targets from the target (EAGLE losses)"
                   + ("" if self_samples is None else f"; half of each batch from {len(self_samples[0])} "
                      "samples of the target (self-distillation)")),
        "steps": steps,
        "batch": batch,
        "caption_drop": DROP_P,
        "train_seconds": round(time.time() - t0, 1),
        "params_trained": sum(p.numel() for p in drafter.parameters() if p.requires_grad),
        "params_total": sum(p.numel() for p in drafter.parameters()),
    }
    he = torch.as_tensor(heldout_idx, dtype=torch.long)
    if len(he):
        metrics["heldout_top1_agreement"] = top1_agreement(gpt, drafter, text, ids[he], *bank.first(he), eval_batch)
        log(f"drafter: held-out top-1 agreement with the target (teacher-forced, cond) {metrics['heldout_top1_agreement']:.3f}")
    return drafter, metrics


@torch.no_grad()
def top1_agreement(gpt, drafter, text, ids, cap_ids, cap_mask, batch: int = 64) -> float:
    hits, tot = 0.0, 0
    for i in range(0, len(ids), batch):
        sl = slice(i, i + batch)
        drop = torch.zeros(len(ids[sl]), dtype=torch.bool)
        with sdpa_kernel(SDPBackend.MATH), precision.autocast():
            _, _, agree = _batch_losses(gpt, drafter, text, cap_ids[sl], cap_mask[sl], ids[sl], drop)
        hits += agree.item() * len(ids[sl])
        tot += len(ids[sl])
    return hits / max(1, tot)


@torch.no_grad()
def draw_self_samples(gpt, text, bank, train_idx: np.ndarray, n: int, seed: int, log=print):
    """``n`` samples of the target on the conditioning (``bank``) of random training rows, at the
    emoji preset's sampling settings. Returns (ids [n, N], cap_ids [n, L], cap_mask [n, L])."""
    from ..presets import EMBEDDED, sampling as preset_sampling
    from .self_samples import sample_tokens

    g = torch.Generator().manual_seed(seed + 2)
    tr = torch.as_tensor(train_idx, dtype=torch.long)
    items = tr[torch.randint(0, len(tr), (n,), generator=g)]
    cap_ids, cap_mask = bank.sample(items, g)
    sampling = preset_sampling(EMBEDDED)
    return sample_tokens(gpt, text, cap_ids, cap_mask, sampling, seed=seed + 3, log=log), cap_ids, cap_mask
