"""Loading and saving LlamaGen T2I GPT and LANTERN drafter checkpoints from local paths.

Layouts:

* **native**: ``GPT.state_dict()`` keys, i.e. HF-style names without ``model.``:
  ``embed_tokens.weight``, ``cls_embedding.cap_proj.fc1.weight``,
  ``cls_embedding.cap_proj.fc2.weight``, ``cls_embedding.uncond_embedding``,
  ``layers.{i}.self_attn.{q,k,v,o}_proj.weight``, ``layers.{i}.mlp.{gate,up,down}_proj.weight``,
  ``layers.{i}.input_layernorm.weight``, ``layers.{i}.post_attention_layernorm.weight``,
  ``norm.weight``, ``lm_head.weight``.
* **hf** (LANTERN's conversion ``jadohu/LlamaGen-T2I``; also what :func:`save_gpt`
  writes): ``model.`` + native, except ``lm_head.weight``; with a ``config.json``.
* **original** (FoundationVision ``t2i_XL_stage1_256.pt``): ``tok_embeddings``,
  ``layers.{i}.attention.wqkv`` (q, k, v stacked along dim 0), ``attention.wo``,
  ``feed_forward.w1|w3|w2`` (= gate|up|down), ``attention_norm``, ``ffn_norm``,
  ``norm``, ``output``, ``cls_embedding.*``; a pickle whose weights sit under
  ``"model"`` (or ``"module"``/``"state_dict"``), loaded with ``weights_only=True``.
  No config: the sizes are read from the tensor shapes; head_dim and grid, which the
  shapes do not determine, from a ``freqs_cis`` table if present, else they must be given.
* **drafter** (``jadohu/llamagen_drafter``): ``config.json`` (target's, with
  ``num_hidden_layers`` 1) + ``pytorch_model.bin`` or ``model.safetensors`` with
  ``embed_tokens.weight``, ``fc.weight|bias``, ``layers.0.self_attn.*``,
  ``layers.0.mlp.*``, ``layers.0.post_attention_layernorm.weight``
  (= ``Drafter.state_dict()`` keys).

Every loader checks the key set and shapes before loading and raises
:class:`CheckpointError` naming the missing / unexpected / mis-shaped keys.
Weights are loaded with ``assign=True`` into a model built under
:func:`uninitialized` (its parameters never written, so nothing is computed or
touched twice), then moved to ``device``/``dtype``.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import re
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor, nn
from safetensors.torch import load_file, save_file
from torch.overrides import TorchFunctionMode

from .drafter import Drafter
from .gpt import GPT, GPTConfig

__all__ = [
    "CheckpointError",
    "ORIGINAL_RULES",
    "source_key",
    "original_to_native",
    "native_to_original",
    "hf_to_native",
    "native_to_hf",
    "detect_layout",
    "to_native",
    "config_from_hf",
    "config_to_hf",
    "config_from_original",
    "read_state_dict",
    "load_torch_weights",
    "load_gpt",
    "load_gpt_state_dict",
    "save_gpt",
    "load_drafter",
    "save_drafter",
    "count_parameters",
    "xl_parameter_counts",
]


class CheckpointError(ValueError):
    """A checkpoint does not match the expected layout (names the offending keys)."""


# ---- key tables ------------------------------------------------------------------
# (original template, [native templates]); "{i}" is a layer index. Several native
# templates = one original tensor split evenly along dim 0 (in that order).
ORIGINAL_RULES: list[tuple[str, list[str]]] = [
    ("tok_embeddings.weight", ["embed_tokens.weight"]),
    ("cls_embedding.cap_proj.fc1.weight", ["cls_embedding.cap_proj.fc1.weight"]),
    ("cls_embedding.cap_proj.fc2.weight", ["cls_embedding.cap_proj.fc2.weight"]),
    ("cls_embedding.uncond_embedding", ["cls_embedding.uncond_embedding"]),
    ("layers.{i}.attention.wqkv.weight",
     ["layers.{i}.self_attn.q_proj.weight", "layers.{i}.self_attn.k_proj.weight", "layers.{i}.self_attn.v_proj.weight"]),
    ("layers.{i}.attention.wo.weight", ["layers.{i}.self_attn.o_proj.weight"]),
    ("layers.{i}.feed_forward.w1.weight", ["layers.{i}.mlp.gate_proj.weight"]),
    ("layers.{i}.feed_forward.w3.weight", ["layers.{i}.mlp.up_proj.weight"]),
    ("layers.{i}.feed_forward.w2.weight", ["layers.{i}.mlp.down_proj.weight"]),
    ("layers.{i}.attention_norm.weight", ["layers.{i}.input_layernorm.weight"]),
    ("layers.{i}.ffn_norm.weight", ["layers.{i}.post_attention_layernorm.weight"]),
    ("norm.weight", ["norm.weight"]),
    ("output.weight", ["lm_head.weight"]),
]

# Non-weight entries some files carry (rope tables, masks, caches): dropped silently.
IGNORED_KEYS = re.compile(r"(^|\.)(freqs_cis|causal_mask|rotary_emb\.inv_freq)$|(^|\.)kv_cache\.|(^|\.)codebook_used$")

HF_PREFIX = "model."


def _compile(template: str) -> re.Pattern[str]:
    return re.compile("^" + re.escape(template).replace(r"\{i\}", r"(?P<i>\d+)") + "$")


def _fill(template: str, m: re.Match[str]) -> str:
    return template.replace("{i}", m.group("i")) if "{i}" in template else template


def _check_unused(src_name: str, unused: list[str]) -> None:
    if unused:
        raise CheckpointError(f"unexpected keys in {src_name} checkpoint: {_fmt(unused)}")


def _fmt(keys: list[str], limit: int = 12) -> str:
    keys = sorted(keys)
    s = ", ".join(keys[:limit])
    return s + (f", ... ({len(keys)} in all)" if len(keys) > limit else "")


def original_to_native(sd: dict[str, Tensor]) -> dict[str, Tensor]:
    """FoundationVision keys -> native keys (splits ``wqkv``); unknown keys raise CheckpointError."""
    out: dict[str, Tensor] = {}
    unused = []
    rules = [(_compile(o), n) for o, n in ORIGINAL_RULES]
    for key, t in sd.items():
        if IGNORED_KEYS.search(key):
            continue
        for pat, targets in rules:
            m = pat.match(key)
            if m is None:
                continue
            if len(targets) == 1:
                out[_fill(targets[0], m)] = t
            else:
                if t.shape[0] % len(targets):
                    raise CheckpointError(f"{key}: shape {tuple(t.shape)} cannot be split in {len(targets)}")
                for name, part in zip(targets, t.chunk(len(targets), dim=0)):
                    out[_fill(name, m)] = part.contiguous()
            break
        else:
            unused.append(key)
    _check_unused("original-layout", unused)
    return out


def native_to_original(sd: dict[str, Tensor]) -> dict[str, Tensor]:
    """Native keys -> FoundationVision keys (stacks q, k, v into ``wqkv``)."""
    out: dict[str, Tensor] = {}
    remaining = dict(sd)
    for orig, targets in ORIGINAL_RULES:
        first = _compile(targets[0])
        for key in [k for k in remaining if first.match(k)]:
            m = first.match(key)
            names = [_fill(t, m) for t in targets]
            missing = [n for n in names if n not in remaining]
            if missing:
                raise CheckpointError(f"missing keys for {_fill(orig, m)}: {_fmt(missing)}")
            parts = [remaining.pop(n) for n in names]
            out[_fill(orig, m)] = parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)
    _check_unused("native", [k for k in remaining if not IGNORED_KEYS.search(k)])
    return out


def hf_to_native(sd: dict[str, Tensor]) -> dict[str, Tensor]:
    out, unused = {}, []
    for key, t in sd.items():
        if IGNORED_KEYS.search(key):
            continue
        if key == "lm_head.weight":
            out[key] = t
        elif key.startswith(HF_PREFIX):
            out[key[len(HF_PREFIX):]] = t
        else:
            unused.append(key)
    _check_unused("HF-layout", unused)
    return out


def native_to_hf(sd: dict[str, Tensor]) -> dict[str, Tensor]:
    return {(k if k == "lm_head.weight" else HF_PREFIX + k): v for k, v in sd.items()}


def detect_layout(sd: dict[str, Tensor]) -> str:
    """'hf', 'original' or 'native' from the key names."""
    if any(k.startswith(HF_PREFIX) for k in sd):
        return "hf"
    if "tok_embeddings.weight" in sd or any(".attention.wqkv." in k for k in sd):
        return "original"
    return "native"


def to_native(sd: dict[str, Tensor], layout: str | None = None) -> dict[str, Tensor]:
    layout = layout or detect_layout(sd)
    conv: dict[str, Callable[[dict[str, Tensor]], dict[str, Tensor]]] = {
        "hf": hf_to_native, "original": original_to_native,
        "native": lambda d: {k: v for k, v in d.items() if not IGNORED_KEYS.search(k)},
    }
    if layout not in conv:
        raise ValueError(f"unknown layout {layout!r}")
    return conv[layout](sd)


# ---- configs -----------------------------------------------------------------------

_INPUT_TYPE_DEFAULTS = {"t2i": (256, 120), "t2i2": (1024, 120)}


def config_from_hf(conf: dict[str, Any]) -> GPTConfig:
    """An HF-style LlamaGen ``config.json`` dict -> GPTConfig."""
    try:
        input_type = conf.get("input_type", "t2i")
        if input_type not in _INPUT_TYPE_DEFAULTS:
            raise CheckpointError(f"unsupported input_type {input_type!r} (text-to-image only)")
        block_default, cls_default = _INPUT_TYPE_DEFAULTS[input_type]
        block = int(conf.get("block_size", block_default))
        grid = math.isqrt(block)
        if grid * grid != block:
            raise CheckpointError(f"block_size {block} is not a square")
        n_head = int(conf["num_attention_heads"])
        if int(conf.get("num_key_value_heads", n_head)) != n_head:
            raise CheckpointError("grouped-query attention (num_key_value_heads != num_attention_heads) is not supported")
        act = conf.get("hidden_act", "silu")
        if act != "silu":
            raise CheckpointError(f"hidden_act {act!r} is not supported (SwiGLU/silu only)")
        return GPTConfig(
            vocab_size=int(conf["vocab_size"]),
            dim=int(conf["hidden_size"]),
            n_layer=int(conf["num_hidden_layers"]),
            n_head=n_head,
            ffn_hidden=int(conf["intermediate_size"]),
            cls_token_num=int(conf.get("cls_token_num", cls_default)),
            caption_dim=int(conf.get("caption_dim", 2048)),
            grid=grid,
            rope_base=float(conf.get("rope_base", conf.get("rope_theta", 10000.0))),
            norm_eps=float(conf.get("rms_norm_eps", conf.get("norm_eps", 1e-5))),
            class_dropout_p=float(conf.get("class_dropout_p", 0.1)),
            prefix_rope=str(conf.get("prefix_rope", "zero")),
        )
    except KeyError as e:
        raise CheckpointError(f"config.json lacks field {e.args[0]!r}") from None


def config_to_hf(cfg: GPTConfig) -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.dim,
        "intermediate_size": cfg.ffn_hidden,
        "num_hidden_layers": cfg.n_layer,
        "num_attention_heads": cfg.n_head,
        "num_key_value_heads": cfg.n_head,
        "hidden_act": "silu",
        "rms_norm_eps": cfg.norm_eps,
        "rope_base": cfg.rope_base,
        "rope_theta": cfg.rope_base,
        "block_size": cfg.n_image_tokens,
        "max_position_embeddings": cfg.cls_token_num + cfg.n_image_tokens,
        "cls_token_num": cfg.cls_token_num,
        "caption_dim": cfg.caption_dim,
        "input_type": "t2i",
        "class_dropout_p": cfg.class_dropout_p,
        "prefix_rope": cfg.prefix_rope,
        "attention_bias": False,
        "tie_word_embeddings": False,
    }


def config_from_original(sd: dict[str, Tensor], head_dim: int | None = None, grid: int | None = None,
                         **overrides: Any) -> GPTConfig:
    """Infer a GPTConfig from original-layout (or native) tensors.

    The shapes give vocab, width, depth, SwiGLU width, prefix length and caption width. They
    do not give the head count (``wqkv`` is ``[3 dim, dim]`` for any) nor the image grid:
    both come from a rotary table ``freqs_cis [P + grid^2, head_dim / 2, 2]`` where the file
    has one, else from ``head_dim`` (or ``n_head=`` in ``overrides``) and ``grid``; a missing
    one raises ValueError naming it, a given one that contradicts the table CheckpointError.
    ``overrides`` set any other GPTConfig field.
    """
    nat = sd if "embed_tokens.weight" in sd else original_to_native(sd)
    try:
        vocab, dim = nat["embed_tokens.weight"].shape
        layers = {int(m.group(1)) for k in nat if (m := re.match(r"layers\.(\d+)\.", k))}
        base: dict[str, Any] = dict(
            vocab_size=vocab, dim=dim, n_layer=len(layers),
            ffn_hidden=nat["layers.0.mlp.gate_proj.weight"].shape[0],
            cls_token_num=nat["cls_embedding.uncond_embedding"].shape[0],
            caption_dim=nat["cls_embedding.cap_proj.fc1.weight"].shape[1],
        )
    except KeyError as e:
        raise CheckpointError(f"cannot infer the config: missing key {e.args[0]!r}") from None
    if "n_head" in overrides:
        head_dim = head_dim if head_dim is not None else dim // overrides["n_head"]
    found = dict(zip(("head_dim", "grid"), _rope_table_sizes(sd, base["cls_token_num"]) or (None, None)))
    given = {"head_dim": head_dim, "grid": grid}
    for name, value in given.items():
        if value is not None and found[name] is not None and value != found[name]:
            raise CheckpointError(f"{name}={value} contradicts the file's rotary table freqs_cis ({name} {found[name]})")
    head_dim, grid = (given[n] if given[n] is not None else found[n] for n in ("head_dim", "grid"))
    missing = [n for n, v in (("head_dim", head_dim), ("grid", grid)) if v is None]
    if missing:
        raise ValueError(
            f"an original-layout checkpoint does not determine {' and '.join(missing)} (its weights have the "
            f"same shapes for any head count and image size, and it has no freqs_cis table): pass "
            f"{', '.join(m + '=' for m in missing)} (LlamaGen T2I XL: head_dim=64, grid=16 at 256 px, 32 at 512 px) "
            "or cfg=")
    base.update(n_head=dim // head_dim, grid=grid)
    base.update({k: v for k, v in overrides.items() if k != "n_head"})
    return GPTConfig(**base)


def _rope_table_sizes(sd: dict[str, Tensor], prefix_len: int) -> tuple[int, int] | None:
    """(head_dim, grid) from a LlamaGen rotary table ``freqs_cis [P + grid^2, head_dim / 2, 2]``, or None."""
    table = next((v for k, v in sd.items() if k.split(".")[-1] == "freqs_cis"), None)
    if table is None or table.dim() != 3:
        return None
    grid = math.isqrt(max(table.shape[0] - prefix_len, 0))
    if grid * grid != table.shape[0] - prefix_len or grid == 0:
        raise CheckpointError(f"freqs_cis {tuple(table.shape)}: {table.shape[0]} rows are not {prefix_len} "
                              "prefix rows plus a square grid")
    return 2 * table.shape[1], grid


# ---- files -------------------------------------------------------------------------


def load_torch_weights(path: str | os.PathLike[str], use_ema: bool = False) -> dict[str, Tensor]:
    """The tensor dict of a ``torch.save`` file, unpickling nothing but tensors and containers.

    Reads with ``torch.load(weights_only=True)``; if that refuses the file, it is retried with
    ``argparse.Namespace`` allowed (LlamaGen's training checkpoints store their ``args``);
    anything else raises :class:`CheckpointError` ("Refusing to load ..."). The weights are
    the dict under ``"ema"`` (when ``use_ema``), else ``"model"``, ``"module"`` or
    ``"state_dict"``, else the file itself; key prefixes ``module.`` and ``_orig_mod.`` go.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint file at {path}")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as first:  # noqa: BLE001
        try:
            with torch.serialization.safe_globals([argparse.Namespace]):
                obj = torch.load(path, map_location="cpu", weights_only=True)
        except Exception:  # noqa: BLE001
            lines = str(first).strip().splitlines()
            hint = next((ln for ln in lines if "Unsupported global" in ln), lines[0] if lines else "")
            raise CheckpointError(
                f"Refusing to load {str(path)!r}: torch.load(weights_only=True) failed ({type(first).__name__}: "
                f"{hint.strip()}); only tensors and containers are unpickled, never arbitrary objects. If you "
                "trust the file, re-save just its weights: torch.save({'model': torch.load(path, "
                "weights_only=False)['model']}, 'clean.pt')."
            ) from first
    if isinstance(obj, dict):
        for key in (("ema",) if use_ema else ()) + ("model", "module", "state_dict"):
            if isinstance(obj.get(key), dict):
                obj = obj[key]
                break
    if not isinstance(obj, dict) or not obj or not all(isinstance(v, Tensor) for v in obj.values()):
        found = sorted(obj) if isinstance(obj, dict) else type(obj).__name__
        raise CheckpointError(f"{path}: no tensor state dict found (a dict of tensors, or one under "
                              f"'model' / 'ema' / 'state_dict'; found {found})")
    out = {}
    for k, v in obj.items():
        for p in ("module.", "_orig_mod."):
            if k.startswith(p):
                k = k[len(p):]
        out[k] = v
    return out


def _read_file(path: Path) -> dict[str, Tensor]:
    if path.suffix == ".safetensors":
        try:
            return load_file(str(path), device="cpu")
        except Exception as e:  # noqa: BLE001
            raise CheckpointError(f"{path}: corrupt safetensors file ({e})") from e
    return load_torch_weights(path)


def read_state_dict(path: str | os.PathLike[str]) -> dict[str, Tensor]:
    """Tensors from a file (``.safetensors``, ``.bin``/``.pt``/``.pth``) or a directory holding
    ``model.safetensors``, ``model.safetensors.index.json`` (shards), ``pytorch_model.bin`` or
    ``pytorch_model.bin.index.json``."""
    path = Path(path)
    if path.is_file():
        return _read_file(path)
    if not path.is_dir():
        raise FileNotFoundError(f"no checkpoint at {path}")
    for single, index in (("model.safetensors", "model.safetensors.index.json"),
                          ("pytorch_model.bin", "pytorch_model.bin.index.json")):
        if (path / single).is_file():
            return _read_file(path / single)
        if (path / index).is_file():
            weight_map = json.loads((path / index).read_text())["weight_map"]
            sd: dict[str, Tensor] = {}
            for shard in sorted(set(weight_map.values())):
                sd.update(_read_file(path / shard))
            return sd
    raise CheckpointError(f"{path}: no model.safetensors / pytorch_model.bin (or their index.json) found")


def _read_config(path: Path) -> dict[str, Any]:
    f = path / "config.json"
    if not f.is_file():
        raise CheckpointError(f"{path}: config.json not found")
    try:
        return json.loads(f.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{f}: invalid JSON ({e})") from e


def source_key(key: str, layout: str) -> str:
    """The name a native key has in a checkpoint of ``layout`` (for error messages)."""
    if layout == "hf":
        return key if key == "lm_head.weight" else HF_PREFIX + key
    if layout == "original":
        for orig, targets in ORIGINAL_RULES:
            for t in targets:
                m = _compile(t).match(key)
                if m:
                    return _fill(orig, m)
    return key


class _SkipInit(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__module__", None) == "torch.nn.init":
            return args[0] if args else kwargs["tensor"]
        return func(*args, **(kwargs or {}))


def uninitialized() -> TorchFunctionMode:
    """A context in which ``torch.nn.init`` functions leave their tensor as it is (uninitialised memory).

    For models whose every parameter is then replaced by ``load_state_dict(assign=True)``:
    construction costs no random init, and unlike a ``meta``-device model it runs no
    meta kernels (PyTorch's Python meta kernels import ``torch._dynamo``, seconds at
    start-up). Storage is allocated on the default device but never written, so the OS
    maps no pages for it. Thread-local, like every torch function mode.
    """
    return _SkipInit()


def _load_into(model: nn.Module, sd: dict[str, Tensor], what: str,
               device: torch.device | str, dtype: torch.dtype | None, layout: str = "native") -> None:
    """Strict, shape-checked ``load_state_dict(assign=True)`` into a model built under :func:`uninitialized`.

    ``sd`` has native keys; errors name the keys as they are in the ``layout`` file."""
    expected = model.state_dict()
    name = functools.partial(source_key, layout=layout)
    missing = sorted({name(k) for k in expected if k not in sd})
    unexpected = sorted({name(k) for k in sd if k not in expected})
    bad = [f"{name(k)} {tuple(sd[k].shape)} != {tuple(v.shape)}" for k, v in expected.items()
           if k in sd and tuple(sd[k].shape) != tuple(v.shape)]
    problems = []
    if missing:
        problems.append(f"missing keys: {_fmt(missing)}")
    if unexpected:
        problems.append(f"unexpected keys: {_fmt(unexpected)}")
    if bad:
        problems.append(f"shape mismatches: {_fmt(bad)}")
    if problems:
        raise CheckpointError(f"{what} checkpoint does not match the model: " + "; ".join(problems))
    dt = dtype or torch.float32
    sd = {k: v.to(dtype=dt) if v.is_floating_point() else v for k, v in sd.items()}
    model.load_state_dict(sd, strict=True, assign=True)
    model.to(device=device, dtype=dt)


# ---- GPT ---------------------------------------------------------------------------


def load_gpt_state_dict(sd: dict[str, Tensor], cfg: GPTConfig, layout: str | None = None,
                        device: torch.device | str = "cpu", dtype: torch.dtype | None = None) -> GPT:
    """Build a GPT from an in-memory state dict in any layout ('hf', 'original', 'native')."""
    layout = layout or detect_layout(sd)
    nat = to_native(sd, layout)
    with uninitialized():
        model = GPT(cfg)
    _load_into(model, nat, f"GPT ({layout} layout)", device, dtype, layout)
    return model.eval()


def load_gpt(path: str | os.PathLike[str], device: torch.device | str = "cpu", dtype: torch.dtype | None = None,
             cfg: GPTConfig | None = None, **original_overrides: Any) -> GPT:
    """Load the target GPT from a directory (``config.json`` + weights, HF or native layout) or
    from an original FoundationVision ``.pt`` file, whose config comes from its shapes and
    ``original_overrides`` (``head_dim=``, ``grid=``: needed unless the file has a rotary
    table, see :func:`config_from_original`) unless ``cfg`` is given. dtype default float32."""
    path = Path(path)
    sd = read_state_dict(path)
    if cfg is None:
        if path.is_dir() and (path / "config.json").is_file():
            cfg = config_from_hf(_read_config(path))
        else:
            cfg = config_from_original(sd, **original_overrides)
    return load_gpt_state_dict(sd, cfg, None, device, dtype)


def save_gpt(model: GPT, directory: str | os.PathLike[str], layout: str = "hf") -> Path:
    """Write ``config.json`` + ``model.safetensors`` (HF layout by default; 'native' also possible)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    sd = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    if layout == "hf":
        sd = native_to_hf(sd)
    elif layout != "native":
        raise ValueError("layout must be 'hf' or 'native' (original-layout files are read only)")
    (directory / "config.json").write_text(json.dumps(config_to_hf(model.cfg), indent=2))
    save_file(sd, str(directory / "model.safetensors"))
    return directory


# ---- drafter -----------------------------------------------------------------------


def load_drafter(path: str | os.PathLike[str], target: GPT | None = None, device: torch.device | str = "cpu",
                 dtype: torch.dtype | None = None, cfg: GPTConfig | None = None) -> Drafter:
    """Load a LANTERN drafter from a directory (``config.json`` + ``pytorch_model.bin`` or
    ``model.safetensors``). With ``target`` given, the drafter references ``target.lm_head``
    and, if the file lacks ``embed_tokens.weight``, copies the target's embedding."""
    path = Path(path)
    sd = {k: v for k, v in read_state_dict(path).items() if not IGNORED_KEYS.search(k)}
    if cfg is None:
        cfg = config_from_hf(_read_config(path)) if path.is_dir() else None
        if cfg is None:
            raise CheckpointError(f"{path}: a drafter needs its config.json (or pass cfg=)")
    if "embed_tokens.weight" not in sd and target is not None:
        sd["embed_tokens.weight"] = target.embed_tokens.weight.detach().cpu()
    with uninitialized():
        model = Drafter(cfg)
    _load_into(model, sd, "drafter", device, dtype)
    if target is not None:
        model.set_lm_head(target.lm_head)
    return model.eval()


def save_drafter(model: Drafter, directory: str | os.PathLike[str]) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    conf = config_to_hf(model.cfg)
    conf["bias"] = True
    (directory / "config.json").write_text(json.dumps(conf, indent=2))
    save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()},
              str(directory / "model.safetensors"))
    return directory


# ---- sizes -------------------------------------------------------------------------


def count_parameters(module: nn.Module, trainable_only: bool = False) -> int:
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


def xl_parameter_counts() -> dict[str, int]:
    """Exact sizes of the GPT-XL target and its drafter, built on the ``meta`` device."""
    with torch.device("meta"):
        gpt = GPT(GPTConfig.llamagen_xl())
        drafter = Drafter(GPTConfig.llamagen_xl_drafter())
    return {
        "gpt_parameters": count_parameters(gpt),
        "gpt_buffers": sum(b.numel() for b in gpt.buffers()),  # uncond_embedding
        "drafter_parameters": count_parameters(drafter),
        "drafter_trainable": count_parameters(drafter, trainable_only=True),
        "drafter_embedding": drafter.embed_tokens.weight.numel(),
    }
