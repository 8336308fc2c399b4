"""VQ image tokenizer: turn image-token ids back into pixels.

Decoding runs on :class:`~lantern_demo.vq_net.VQDecoderNet`, the decoding half of
``diffusers.VQModel`` (same weights, same function, no diffusers import). Two sources
are supported:

* LlamaGen's ``VQ_16`` tokenizer (``peizesun/llamagen_t2i``, ``vq_ds16_t2i.pt``),
  converted on load by a table-driven rename (see :data:`LLAMAGEN_VQ_RENAMES`);
* any ``VQModel`` saved with ``save_pretrained`` (e.g. the small emoji tokenizer
  we train ourselves), loaded with :meth:`VQDecoder.from_pretrained`.

LlamaGen checkpoint layout relied on (``torch.save`` pickle)
------------------------------------------------------------
A dict with the weights under ``"model"`` (a training checkpoint may also hold
``"ema"``, ``"optimizer"``, ``"args"`` = ``argparse.Namespace``, ...). Keys
(``*`` is ``encoder`` or ``decoder``)::

    *.conv_in.{weight,bias}
    *.conv_blocks.{i}.res.{j}.{norm1,conv1,norm2,conv2,nin_shortcut}.{weight,bias}
    *.conv_blocks.{i}.attn.{j}.{norm,q,k,v,proj_out}.{weight,bias}   (q/k/v/proj_out: 1x1 convs)
    encoder.conv_blocks.{i}.downsample.conv.{weight,bias}
    decoder.conv_blocks.{i}.upsample.conv.{weight,bias}
    *.mid.{0,1,2}       (resnet, attention, resnet)
    *.norm_out, *.conv_out
    quant_conv, post_quant_conv
    quantize.embedding.weight   [V, D]  (L2-normalised at lookup time by LlamaGen)
    quantize.codebook_used      (buffer, dropped)

Decoder ``conv_blocks`` index 0 is the lowest resolution, which is also
diffusers' ``up_blocks`` order, so block indices are kept as they are.

The conversion folds LlamaGen's lookup-time L2 normalisation into the codebook
(rows of ``quantize.embedding.weight`` are normalised), so that diffusers'
plain lookup gives the same latents. The *raw* (un-normalised) codebook is
kept separately: LANTERN's neighbour table is computed from it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor
from PIL import Image

from .checkpoints import CheckpointError, load_torch_weights
from .vq_net import VQDecoderConfig, VQDecoderNet

__all__ = [
    "LLAMAGEN_VQ_RENAMES",
    "LLAMAGEN_VQ_DROP",
    "ConvertedVQ",
    "VQDecoder",
    "convert_llamagen_vq_state_dict",
    "llamagen_vq_config",
    "llamagen_vq_config_from_state_dict",
    "load_llamagen_checkpoint",
    "load_llamagen_vq",
]

#: Neutral placeholder colour for not-yet-generated cells (RGB).
PLACEHOLDER_RGB = (128, 128, 128)


# ---------------------------------------------------------------------------
# Config
# ---------------------------------------------------------------------------


def llamagen_vq_config(
    ch: int = 128,
    ch_mult: Sequence[int] = (1, 1, 2, 2, 4),
    z_channels: int = 256,
    codebook_size: int = 16384,
    codebook_dim: int = 8,
    num_res_blocks: int = 2,
    norm_groups: int = 32,
    in_channels: int = 3,
    out_channels: int = 3,
    image_size: int = 256,
) -> dict[str, Any]:
    """``diffusers.VQModel`` constructor kwargs reproducing LlamaGen's VQ network.

    Defaults are LlamaGen's ``VQ_16`` (ch 128, ch_mult (1,1,2,2,4): downsample 16,
    z 256, codebook 16384 x 8, 2 res blocks per encoder level and 3 per decoder
    level, GroupNorm(32)). Attention sits only at the lowest resolution (the last
    encoder level, the first decoder level) and in both mid blocks. Pass smaller
    widths for tests: ``ch`` and every ``ch * m`` must be divisible by ``norm_groups``.

    Use as ``VQModel(**llamagen_vq_config(...))``.
    """
    ch_mult = tuple(int(m) for m in ch_mult)
    n = len(ch_mult)
    if n < 1:
        raise ValueError("ch_mult must not be empty")
    widths = tuple(ch * m for m in ch_mult)
    for w in widths:
        if w % norm_groups:
            raise ValueError(f"channel width {w} is not divisible by norm_groups={norm_groups}")
    if z_channels % norm_groups:
        raise ValueError(f"z_channels={z_channels} is not divisible by norm_groups={norm_groups}")
    return dict(
        in_channels=in_channels,
        out_channels=out_channels,
        down_block_types=("DownEncoderBlock2D",) * (n - 1) + ("AttnDownEncoderBlock2D",),
        up_block_types=("AttnUpDecoderBlock2D",) + ("UpDecoderBlock2D",) * (n - 1),
        block_out_channels=widths,
        layers_per_block=num_res_blocks,
        act_fn="silu",
        latent_channels=z_channels,
        vq_embed_dim=codebook_dim,
        num_vq_embeddings=codebook_size,
        norm_num_groups=norm_groups,
        norm_type="group",
        mid_block_add_attention=True,
        lookup_from_codebook=True,
        sample_size=image_size,
    )


def llamagen_vq_config_from_state_dict(
    sd: Mapping[str, Tensor], norm_groups: int = 32, image_size: int | None = None
) -> dict[str, Any]:
    """Infer :func:`llamagen_vq_config` kwargs from a LlamaGen VQ state dict.

    Widths, depth, codebook shape and res-block count are read from tensor
    shapes; ``norm_groups`` cannot be inferred (LlamaGen uses 32).
    """
    try:
        codebook_size, codebook_dim = sd["quantize.embedding.weight"].shape
        ch = sd["encoder.conv_in.weight"].shape[0]
        z_channels = sd["post_quant_conv.weight"].shape[0]
    except KeyError as e:  # pragma: no cover - message only
        raise ValueError(f"not a LlamaGen VQ state dict: missing {e}") from None
    levels = sorted({int(m.group(1)) for k in sd if (m := re.match(r"decoder\.conv_blocks\.(\d+)\.", k))})
    if not levels or levels != list(range(len(levels))):
        raise ValueError("not a LlamaGen VQ state dict: decoder.conv_blocks.* missing or not contiguous")
    # decoder level i outputs ch * ch_mult[n-1-i]
    dec_out = [sd[f"decoder.conv_blocks.{i}.res.0.conv2.weight"].shape[0] for i in levels]
    ch_mult = tuple(w // ch for w in reversed(dec_out))
    n_res = len({int(m.group(1)) for k in sd if (m := re.match(r"encoder\.conv_blocks\.0\.res\.(\d+)\.", k))})
    if image_size is None:
        image_size = 16 * 2 ** (len(ch_mult) - 1)
    return llamagen_vq_config(
        ch=ch,
        ch_mult=ch_mult,
        z_channels=z_channels,
        codebook_size=codebook_size,
        codebook_dim=codebook_dim,
        num_res_blocks=n_res,
        norm_groups=norm_groups,
        image_size=image_size,
    )


# ---------------------------------------------------------------------------
# Conversion
# ---------------------------------------------------------------------------

#: Ordered (regex, replacement) rules; every rule is applied to every key in turn.
LLAMAGEN_VQ_RENAMES: tuple[tuple[str, str], ...] = (
    (r"^(encoder|decoder)\.norm_out\.", r"\1.conv_norm_out."),
    (r"^(encoder|decoder)\.mid\.0\.", r"\1.mid_block.resnets.0."),
    (r"^(encoder|decoder)\.mid\.1\.", r"\1.mid_block.attentions.0."),
    (r"^(encoder|decoder)\.mid\.2\.", r"\1.mid_block.resnets.1."),
    (r"^encoder\.conv_blocks\.(\d+)\.", r"encoder.down_blocks.\1."),
    (r"^decoder\.conv_blocks\.(\d+)\.", r"decoder.up_blocks.\1."),  # same index, no reversal
    (r"\.res\.(\d+)\.", r".resnets.\1."),
    (r"\.attn\.(\d+)\.", r".attentions.\1."),
    (r"\.downsample\.conv\.", r".downsamplers.0.conv."),
    (r"\.upsample\.conv\.", r".upsamplers.0.conv."),
    (r"\.nin_shortcut\.", r".conv_shortcut."),
    (r"(attentions\.\d+)\.norm\.", r"\1.group_norm."),
    (r"(attentions\.\d+)\.q\.", r"\1.to_q."),
    (r"(attentions\.\d+)\.k\.", r"\1.to_k."),
    (r"(attentions\.\d+)\.v\.", r"\1.to_v."),
    (r"(attentions\.\d+)\.proj_out\.", r"\1.to_out.0."),
)

#: Source keys dropped by the conversion.
LLAMAGEN_VQ_DROP: tuple[str, ...] = (r"^quantize\.codebook_used$",)

#: Converted keys whose 1x1-conv weight [out, in, 1, 1] becomes a Linear weight [out, in].
_CONV1X1_TO_LINEAR = re.compile(r"attentions\.\d+\.to_(q|k|v|out\.0)\.weight$")
_CODEBOOK_KEY = "quantize.embedding.weight"


@dataclass
class ConvertedVQ:
    """Result of :func:`convert_llamagen_vq_state_dict`.

    state_dict: VQModel state dict (codebook rows L2-normalised, float32; the rest as stored).
    raw_codebook: [V, D] the checkpoint's codebook as stored (un-normalised).
    """

    state_dict: dict[str, Tensor]
    raw_codebook: Tensor


def _rename(key: str) -> str:
    for pat, rep in LLAMAGEN_VQ_RENAMES:
        key = re.sub(pat, rep, key)
    return key


def convert_llamagen_vq_state_dict(sd: Mapping[str, Tensor], normalize_codebook: bool = True) -> ConvertedVQ:
    """Convert a LlamaGen VQ state dict to ``diffusers.VQModel`` names and layouts.

    Renames by :data:`LLAMAGEN_VQ_RENAMES`, reshapes attention 1x1 convs to
    linear weights, drops :data:`LLAMAGEN_VQ_DROP`, L2-normalises the codebook
    rows in float32 and keeps them float32 whatever the file's dtype (LlamaGen
    normalises at lookup time, in float32; ``normalize_codebook=False`` keeps them
    as stored). A leading ``module.`` (DDP) prefix is stripped.
    """
    if _CODEBOOK_KEY not in sd and f"module.{_CODEBOOK_KEY}" not in sd:
        raise ValueError(f"not a LlamaGen VQ state dict: no {_CODEBOOK_KEY!r} (keys: {list(sd)[:5]}...)")
    out: dict[str, Tensor] = {}
    raw = None
    for key, value in sd.items():
        if key.startswith("module."):
            key = key[len("module.") :]
        if any(re.search(p, key) for p in LLAMAGEN_VQ_DROP):
            continue
        new = _rename(key)
        if new in out:
            raise ValueError(f"conversion maps two keys onto {new!r}")
        if _CONV1X1_TO_LINEAR.search(new) and value.dim() == 4:
            if value.shape[2:] != (1, 1):
                raise ValueError(f"{key}: expected a 1x1 conv weight, got {tuple(value.shape)}")
            value = value[:, :, 0, 0]
        if new == _CODEBOOK_KEY:
            raw = value.detach().clone()
            if normalize_codebook:  # float32, as LlamaGen's lookup: rounding unit vectors to fp16 costs ~1e-3 in pixels
                value = F.normalize(value.float(), p=2, dim=-1)
        out[new] = value
    assert raw is not None
    return ConvertedVQ(out, raw)


# ---------------------------------------------------------------------------
# Checkpoint loading
# ---------------------------------------------------------------------------


def load_llamagen_checkpoint(path: str | os.PathLike, use_ema: bool = False) -> dict[str, Tensor]:
    """LlamaGen VQ weights from a ``torch.save`` file, read safely by
    :func:`~lantern_demo.checkpoints.load_torch_weights` (``"ema"`` weights when ``use_ema``);
    a file it refuses raises ``RuntimeError`` with its reason."""
    try:
        return load_torch_weights(path, use_ema=use_ema)
    except CheckpointError as e:
        raise RuntimeError(str(e)) from e


def load_llamagen_vq(
    path: str | os.PathLike,
    *,
    use_ema: bool = False,
    config: Mapping[str, Any] | None = None,
    norm_groups: int = 32,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
) -> tuple[VQDecoderNet, Tensor]:
    """The decoder of LlamaGen's ``vq_ds16_t2i.pt``; returns ``(net, raw_codebook [V, D] float32)``.

    ``config`` (VQModel kwargs) defaults to one inferred from the weights' shapes.
    """
    sd = load_llamagen_checkpoint(path, use_ema=use_ema)
    conv = convert_llamagen_vq_state_dict(sd)
    cfg = dict(config) if config is not None else llamagen_vq_config_from_state_dict(sd, norm_groups=norm_groups)
    try:
        net = VQDecoderNet.from_state_dict(VQDecoderConfig.from_vqmodel(cfg), conv.state_dict, what=os.fspath(path))
    except ValueError as e:
        raise RuntimeError(f"{os.fspath(path)!r} does not match the VQ_16 layout: {e}") from None
    return net.to(device=device, dtype=dtype), conv.raw_codebook.float()


# ---------------------------------------------------------------------------
# Decoder wrapper
# ---------------------------------------------------------------------------


class VQDecoder:
    """Decode raster image-token ids to pixels.

    vq: a :class:`VQDecoderNet`, or a ``diffusers.VQModel`` (its decoder is taken, weights
    shared). grid: tokens per side, ``int`` or ``(H, W)``. raw_codebook: [V, D] codebook for
    neighbour tables; defaults to the model's own codebook (right for models we train; for
    LlamaGen pass the un-normalised one).
    """

    def __init__(self, vq: "VQDecoderNet | torch.nn.Module", grid: int | tuple[int, int],
                 raw_codebook: Tensor | None = None, fill_token: int = 0):
        self.vq = (vq if isinstance(vq, VQDecoderNet) else VQDecoderNet.from_vqmodel(vq)).eval()
        self.grid = (grid, grid) if isinstance(grid, int) else (int(grid[0]), int(grid[1]))
        self.factor = 2 ** (len(self.vq.cfg.block_out_channels) - 1)
        self.codebook_size = self.vq.cfg.num_vq_embeddings
        self.embed_dim = self.vq.cfg.embed_dim
        self._raw = None if raw_codebook is None else raw_codebook.detach().float().cpu()
        if self._raw is not None and tuple(self._raw.shape) != (self.codebook_size, self.embed_dim):
            raise ValueError(f"raw codebook {tuple(self._raw.shape)} != ({self.codebook_size}, {self.embed_dim})")
        if not 0 <= fill_token < self.codebook_size:
            raise ValueError(f"fill_token {fill_token} out of range")
        self.fill_token = fill_token

    # -- construction -------------------------------------------------------
    @classmethod
    def from_llamagen(cls, path: str | os.PathLike, grid: int | tuple[int, int] = 16, **kw) -> "VQDecoder":
        """From LlamaGen's ``vq_ds16_t2i.pt`` (kwargs go to :func:`load_llamagen_vq`)."""
        vq, raw = load_llamagen_vq(path, **kw)
        return cls(vq, grid, raw_codebook=raw)

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike,
        grid: int | tuple[int, int],
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> "VQDecoder":
        """From a directory written by ``VQModel.save_pretrained`` (e.g. our emoji tokenizer)."""
        return cls(VQDecoderNet.from_pretrained(path, device=device, dtype=dtype), grid)

    # -- properties ---------------------------------------------------------
    @property
    def num_tokens(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def image_size(self) -> tuple[int, int]:
        """(height, width) in pixels."""
        return self.grid[0] * self.factor, self.grid[1] * self.factor

    @property
    def device(self) -> torch.device:
        return self.vq.quantize.embedding.weight.device

    def raw_codebook(self) -> Tensor:
        """[V, D] float32 CPU codebook as trained/stored, for neighbour tables."""
        if self._raw is not None:
            return self._raw
        return self.vq.quantize.embedding.weight.detach().float().cpu()

    # -- decoding -----------------------------------------------------------
    def _check_ids(self, ids: Tensor) -> Tensor:
        ids = torch.as_tensor(ids)
        if ids.dim() == 1:
            ids = ids[None]
        if ids.dim() != 2 or ids.shape[1] != self.num_tokens:
            raise ValueError(f"expected ids [B, {self.num_tokens}], got {tuple(ids.shape)}")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.codebook_size):
            raise ValueError(f"token ids must lie in [0, {self.codebook_size})")
        return ids.to(device=self.device, dtype=torch.long)

    @torch.inference_mode()
    def decode(self, ids: Tensor, output: str = "uint8", clamp: bool = True) -> Tensor:
        """Decode ids [B, N] (raster order; [N] is taken as B = 1).

        output="uint8": [B, H, W, 3] uint8 (0..255); output="float": [B, 3, H, W]
        float32, nominally in [-1, 1]: clamped to it by default (images), the decoder's
        raw values with ``clamp=False`` (numerical checks, research; float output only).
        """
        if output not in ("uint8", "float"):
            raise ValueError("output must be 'uint8' or 'float'")
        if not clamp and output != "float":
            raise ValueError("clamp=False needs output='float' (uint8 images are always clamped)")
        x = self._decode_rows(self._check_ids(ids), self.grid[0], clamp)
        return x if output == "float" else _to_uint8(x)

    def _decode_rows(self, ids: Tensor, rows: int, clamp: bool = True) -> Tensor:
        """ids [B, rows * W] (valid ids on the model's device) -> float32 [B, 3, rows * factor, W * factor],
        clamped to [-1, 1] unless ``clamp`` is False: whole images, or the top ``rows`` token rows
        for a streamed preview."""
        x = self.vq.decode(ids, (ids.shape[0], rows, self.grid[1], self.embed_dim)).float()
        return x.clamp(-1, 1) if clamp else x

    def decode_pil(self, ids: Tensor) -> list:
        """Decode ids [B, N] to a list of PIL images."""
        return [Image.fromarray(a.numpy()) for a in self.decode(ids)]

    @torch.inference_mode()
    def decode_partial(self, ids: Tensor, placeholder: tuple[int, int, int] = PLACEHOLDER_RGB):
        """Decode a partly generated image; ids [N] with -1 at missing positions. Returns a PIL image.

        Only the token rows up to the last generated one are decoded, with
        :data:`PREVIEW_CONTEXT` more rows below them as context, in one pass (so early
        previews cost a share of a full decode, and the shown rows are decoded together:
        no seams). Missing positions are decoded with ``fill_token`` (only so that the
        convolutional decoder has an input there) and their pixel blocks, like the rows
        not decoded, are painted with the neutral ``placeholder`` colour. The decoder's
        group norms and mid-block attention span the decoded rows, so a preview can differ
        slightly from the final full decode, which is exact (a complete ``ids`` is decoded
        whole).
        """
        ids = torch.as_tensor(ids).reshape(-1).cpu().long()
        if ids.numel() != self.num_tokens:
            raise ValueError(f"expected {self.num_tokens} ids, got {ids.numel()}")
        missing = ids < 0
        h, w = self.grid
        f = self.factor
        hp, wp = self.image_size
        paint = torch.tensor(placeholder, dtype=torch.uint8)
        img = paint.expand(hp, wp, 3).clone()
        rows = torch.nonzero((~missing).view(h, w).any(1)).flatten()
        if rows.numel():
            r1 = int(rows[-1]) + 1
            b1 = min(h, r1 + PREVIEW_CONTEXT)
            filled = torch.where(missing, torch.full_like(ids, self.fill_token), ids).view(h, w)[:b1]
            band = _to_uint8(self._decode_rows(filled.reshape(1, -1).to(self.device), b1))[0]
            img[:r1 * f] = band[:r1 * f]
            cell = missing.view(h, w)[:r1]
            img[:r1 * f][cell.repeat_interleave(f, 0).repeat_interleave(f, 1)] = paint
        return Image.fromarray(img.numpy())


def _to_uint8(x: Tensor) -> Tensor:
    """float [B, 3, H, W] in [-1, 1] -> uint8 [B, H, W, 3] on the CPU."""
    return ((x + 1) * 127.5).round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).cpu()


#: Token rows below the last generated one that a streamed preview decodes as context.
PREVIEW_CONTEXT = 2
