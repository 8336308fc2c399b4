"""Quality metrics of the benchmark (speed statistics come from ``engine.summarize``).

- ``sequence_nll``: per-token negative log-likelihood of a generated sequence
  under the target's *guided* sampling distribution (CFG, temperature, top-k,
  top-p exactly as ``sampling.probs_from_logits`` forms it for decoding),
  recomputed teacher-forced with ``GPT.forward_train`` on a batch of two rows
  (conditional, unconditional = ``caption_drop_mask``), which is the same
  network as the cached decoding path.
- ``frechet_distance``: Fréchet distance between Gaussians fitted to two
  feature sets (the FID formula, here in our eval encoder's space).
- ``precision_recall``: k-NN manifold precision and recall (Kynkäänniemi et
  al., 2019): a sample is "inside" the other set's manifold if it falls in the
  ball of some point of that set whose radius is the distance to the point's
  k-th nearest neighbour in its own set.
- ``retrieval_accuracy``: top-1 image-to-text retrieval among the run's prompts.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..sampling import SamplingConfig, probs_from_logits

#: probability floor for tokens outside the target's support (possible only with
#: top-k/top-p filtering plus a relaxed method); such tokens are counted separately.
PROB_FLOOR = 1e-12


@torch.no_grad()
def guided_probs(target, caption: Any, tokens: Tensor, sampling: SamplingConfig) -> Tensor:
    """[N, V] next-token distributions the sampler used at every position of ``tokens`` [N].

    caption: the pipeline's condition (``gpt.Caption``: emb [L, C], mask [L] | None).
    """
    emb = caption.emb[None].to(target.device)
    mask = None if caption.mask is None else caption.mask[None].to(target.device)
    rows = sampling.rows
    if rows == 2:
        emb = emb.expand(2, -1, -1)
        mask = None if mask is None else mask.expand(2, -1)
        drop = torch.tensor([False, True], device=target.device)
    else:
        drop = None
    seq = tokens.to(target.device).reshape(1, -1).expand(rows, -1)
    logits, _ = target.forward_train(emb, seq, caption_drop_mask=drop, caption_mask=mask)
    return probs_from_logits(logits.float(), sampling)


def sequence_nll(target, caption: Any, tokens: Tensor, sampling: SamplingConfig) -> dict[str, float]:
    """Mean per-token NLL (nats) of ``tokens`` under the guided target distribution.

    Returns nll (mean over tokens, with probabilities floored at ``PROB_FLOOR``),
    out_of_support (tokens with zero target probability) and top1 (share of
    tokens that are the target's argmax).
    """
    p = guided_probs(target, caption, tokens, sampling)
    t = tokens.to(p.device).long()
    pt = p.gather(-1, t[:, None]).squeeze(-1).double()
    return {
        "nll": float(-torch.log(pt.clamp_min(PROB_FLOOR)).mean()),
        "out_of_support": float((pt <= 0).sum()),
        "top1": float((p.argmax(-1) == t).double().mean()),
    }


def frechet_distance(x: np.ndarray, y: np.ndarray) -> float:
    """||mu_x - mu_y||^2 + Tr(S_x + S_y - 2 (S_x S_y)^(1/2)) for features [N, D], [M, D]."""
    from scipy import linalg  # requirements-dev.txt only: the rest of the benchmark runs without it

    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if len(x) < 2 or len(y) < 2:
        return float("nan")
    mu1, mu2 = x.mean(0), y.mean(0)
    s1, s2 = np.cov(x, rowvar=False), np.cov(y, rowvar=False)
    with warnings.catch_warnings():  # near-singular covariances with few samples
        warnings.simplefilter("ignore")
        covmean = linalg.sqrtm(s1 @ s2)
    if not np.isfinite(covmean).all():
        eps = np.eye(len(s1)) * 1e-6
        covmean = linalg.sqrtm((s1 + eps) @ (s2 + eps))
    covmean = np.real(covmean)
    diff = mu1 - mu2
    return float(diff @ diff + np.trace(s1) + np.trace(s2) - 2 * np.trace(covmean))


def fd_bootstrap_std(fake: np.ndarray, real: np.ndarray, n: int = 20, seed: int = 0) -> float:
    """Standard deviation of the FD over bootstrap resamples of ``fake`` (its sampling noise)."""
    if len(fake) < 3:
        return float("nan")
    rng = np.random.default_rng(seed)
    vals = [frechet_distance(fake[rng.integers(0, len(fake), len(fake))], real) for _ in range(n)]
    return float(np.std(vals))


def _kth_radius(x: np.ndarray, k: int) -> np.ndarray:
    d = np.sqrt(((x[:, None] - x[None]) ** 2).sum(-1))
    return np.sort(d, axis=1)[:, k]  # column 0 is the point itself


def _inside(points: np.ndarray, centres: np.ndarray, radii: np.ndarray) -> np.ndarray:
    d = np.sqrt(((points[:, None] - centres[None]) ** 2).sum(-1))
    return (d <= radii[None]).any(1)


def precision_recall(real: np.ndarray, fake: np.ndarray, k: int = 3) -> tuple[float, float]:
    """k-NN manifold precision (fake inside real) and recall (real inside fake)."""
    real, fake = np.asarray(real, np.float64), np.asarray(fake, np.float64)
    if len(real) <= k or len(fake) <= k:
        return float("nan"), float("nan")
    precision = float(_inside(fake, real, _kth_radius(real, k)).mean())
    recall = float(_inside(real, fake, _kth_radius(fake, k)).mean())
    return precision, recall


def retrieval_accuracy(image_feats: np.ndarray, text_feats: np.ndarray) -> float:
    """Share of images i whose most similar prompt (cosine) among all prompts is prompt i."""
    if len(image_feats) == 0:
        return float("nan")
    a = F.normalize(torch.from_numpy(np.asarray(image_feats, np.float64)), dim=-1)
    b = F.normalize(torch.from_numpy(np.asarray(text_feats, np.float64)), dim=-1)
    sim = a @ b.T
    return float((sim.argmax(1) == torch.arange(len(a))).double().mean())


def mean_se(values: list[float]) -> tuple[float, float]:
    """Mean and standard error of the mean (nan-safe for one value)."""
    v = [x for x in values if x == x]
    if not v:
        return float("nan"), float("nan")
    m = sum(v) / len(v)
    if len(v) < 2:
        return m, float("nan")
    var = sum((x - m) ** 2 for x in v) / (len(v) - 1)
    return m, math.sqrt(var / len(v))
