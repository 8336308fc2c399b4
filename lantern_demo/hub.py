"""Where model components come from, and fetching them through huggingface_hub.

Files are resolved with ``hf_hub_download`` / ``snapshot_download`` in the
standard Hugging Face cache, so the usual environment applies: ``HF_HOME`` /
``HF_HUB_CACHE`` choose the cache, ``HF_HUB_OFFLINE=1`` forbids network access
(checked at call time here, so it may be set after import), ``HF_TOKEN`` for
gated repos. Anything that cannot be resolved raises :class:`WeightsUnavailable`
with one message naming the component, the repo, the revision and the command
that fetches it.

A :class:`Preset` lists the components of one model family (target GPT,
drafter, VQ tokenizer, text encoder) with resolution and token grid. Presets
with ``local_dir`` set (the embedded default model, added later) read their
components from a local folder and never touch the hub.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

__all__ = [
    "Component",
    "OPTIONAL_COMPONENTS",
    "PRESETS",
    "Preset",
    "WeightsUnavailable",
    "fetch",
    "get_preset",
    "hub_cache_dir",
    "offline_mode",
    "register_preset",
]

_TRUE = {"1", "true", "yes", "on"}


def offline_mode() -> bool:
    """True when ``HF_HUB_OFFLINE`` is set in the environment (read now, not at import)."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE:
        return True
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def hub_cache_dir() -> str:
    """The hub cache in use: ``HF_HUB_CACHE``, else ``$HF_HOME/hub``, else the library default."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return os.path.join(os.environ["HF_HOME"], "hub")
    from huggingface_hub import constants

    return constants.HF_HUB_CACHE


def download_command(repo_id: str, filename: str | None = None, revision: str | None = None,
                     allow_patterns: Sequence[str] | None = None) -> str:
    """The ``hf download`` command line that fetches a component into the cache."""
    parts = ["hf", "download", repo_id]
    if filename:
        parts.append(filename)
    elif allow_patterns:
        parts += ["--include", *(f"'{p}'" for p in allow_patterns)]
    if revision:
        parts += ["--revision", revision]
    return " ".join(parts)


class WeightsUnavailable(RuntimeError):
    """A model component could not be found locally nor downloaded.

    Attributes: component, repo_id, filename, revision, reason, cache_dir, path
    (for local components), command (the fetch command line, or None).
    """

    def __init__(
        self,
        component: str,
        repo_id: str | None = None,
        *,
        filename: str | None = None,
        revision: str | None = None,
        reason: str = "",
        cache_dir: str | None = None,
        path: str | None = None,
        allow_patterns: Sequence[str] | None = None,
    ):
        self.component = component
        self.repo_id = repo_id
        self.filename = filename
        self.revision = revision
        self.reason = reason
        self.cache_dir = cache_dir
        self.path = path
        self.command = download_command(repo_id, filename, revision, allow_patterns) if repo_id else None
        super().__init__(self._message())

    def _message(self) -> str:
        if self.repo_id is None:
            return (
                f"Weights for the {self.component} are unavailable: {self.path or '(no path)'} "
                f"{self.reason or 'is missing'}. Build or restore that folder and run again."
            )
        what = f"{self.filename!r} from {self.repo_id}" if self.filename else f"{self.repo_id}"
        rev = self.revision or "main"
        cache = self.cache_dir or hub_cache_dir()
        return (
            f"Weights for the {self.component} are unavailable: {what} (revision {rev}) "
            f"{self.reason or 'could not be fetched'}. "
            f"To get them, run on a machine with internet access: `{self.command}` "
            f"(huggingface_hub < 1.0: `huggingface-cli download ...` with the same arguments); "
            f"it stores them in the Hugging Face cache ({cache}). Copy that cache here or point "
            f"HF_HOME (or HF_HUB_CACHE) at it, then run again; HF_HUB_OFFLINE=1 keeps the app offline."
        )


def _reason(exc: BaseException, local_only: bool, cache_dir: str) -> str:
    from huggingface_hub import errors

    if isinstance(exc, errors.GatedRepoError):
        return "is gated: accept its terms on the Hub and log in (`hf auth login` or HF_TOKEN)"
    if isinstance(exc, errors.RepositoryNotFoundError):
        return "was not found on the Hub (wrong id, or private: log in with `hf auth login`)"
    if isinstance(exc, errors.RevisionNotFoundError):
        return "does not exist at that revision"
    if isinstance(exc, (errors.LocalEntryNotFoundError, errors.OfflineModeIsEnabled)) or local_only:
        why = "downloads are disabled (HF_HUB_OFFLINE=1)" if local_only else "the Hub could not be reached"
        return f"is not in the local cache ({cache_dir}) and {why}"
    if isinstance(exc, errors.EntryNotFoundError):
        return "is not in that repository"
    first = str(exc).strip().splitlines()
    return f"could not be fetched ({type(exc).__name__}: {first[0] if first else ''})"


def _fetch_errors() -> tuple[type[BaseException], ...]:
    from huggingface_hub import errors

    errs: list[type[BaseException]] = [
        errors.HfHubHTTPError,
        errors.EntryNotFoundError,
        errors.LocalEntryNotFoundError,
        errors.OfflineModeIsEnabled,
        errors.RepositoryNotFoundError,
        errors.RevisionNotFoundError,
        errors.HFValidationError,
        OSError,
    ]
    try:  # network errors of the HTTP client used by huggingface_hub
        import httpx

        errs.append(httpx.HTTPError)
    except ImportError:  # pragma: no cover
        pass
    return tuple(errs)


def fetch(
    repo_id: str,
    filename: str | None = None,
    revision: str | None = None,
    *,
    component: str | None = None,
    allow_patterns: Sequence[str] | None = None,
    required: Sequence[str] = (),
    cache_dir: str | os.PathLike | None = None,
    local_files_only: bool | None = None,
) -> Path:
    """Resolve a file (``filename``) or a repo snapshot (``filename=None``) to a local path.

    Uses the standard cache (``cache_dir`` overrides it). ``local_files_only``
    defaults to :func:`offline_mode`. For snapshots, ``allow_patterns`` limits
    what is downloaded and every pattern in ``required`` (glob, relative to the
    repo root) must match at least one file afterwards -- an offline snapshot
    may be partial. Raises :class:`WeightsUnavailable` on any failure.
    """
    from huggingface_hub import hf_hub_download, snapshot_download

    name = component or (f"file {filename}" if filename else f"repository {repo_id}")
    local_only = offline_mode() if local_files_only is None else bool(local_files_only)
    cache = os.fspath(cache_dir) if cache_dir is not None else None
    cache_shown = cache or hub_cache_dir()
    try:
        if filename is not None:
            path = hf_hub_download(repo_id, filename, revision=revision, cache_dir=cache,
                                   local_files_only=local_only)
            return Path(path)
        folder = Path(snapshot_download(repo_id, revision=revision, cache_dir=cache, local_files_only=local_only,
                                        allow_patterns=list(allow_patterns) if allow_patterns else None))
    except _fetch_errors() as e:
        raise WeightsUnavailable(name, repo_id, filename=filename, revision=revision,
                                 reason=_reason(e, local_only, cache_shown), cache_dir=cache_shown,
                                 allow_patterns=allow_patterns) from e
    files = [p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()]
    missing = [pat for pat in required if not any(fnmatch.fnmatch(f, pat) for f in files)]
    if missing:
        raise WeightsUnavailable(name, repo_id, revision=revision, cache_dir=cache_shown,
                                 allow_patterns=allow_patterns,
                                 reason=f"is incomplete in the local cache ({folder}): no file matching "
                                 + ", ".join(missing))
    return folder


# ---------------------------------------------------------------------------
# Presets
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Component:
    """One component on the Hub: a single ``filename`` or a snapshot of ``repo_id``.

    revision: branch, tag or commit (None = main; pin commits once verified).
    allow_patterns: snapshot files to fetch; required: globs that must be present.
    """

    repo_id: str
    filename: str | None = None
    revision: str | None = None
    allow_patterns: tuple[str, ...] | None = None
    required: tuple[str, ...] = ()

    def fetch(self, name: str = "component", **kw) -> Path:
        return fetch(self.repo_id, self.filename, self.revision, component=name,
                     allow_patterns=self.allow_patterns, required=self.required, **kw)

    def command(self) -> str:
        return download_command(self.repo_id, self.filename, self.revision, self.allow_patterns)


COMPONENT_NAMES = ("target", "drafter", "vq", "text_encoder")
#: Components a preset can run without: no drafter means only the drafter-free methods (AR, SJD).
OPTIONAL_COMPONENTS = ("drafter",)
_COMPONENT_TITLES = {
    "target": "target model",
    "drafter": "drafter",
    "vq": "VQ image tokenizer",
    "text_encoder": "text encoder",
}


@dataclass(frozen=True)
class Preset:
    """A model family the app can run.

    name: registry key; title: shown in the UI; resolution: image side in pixels;
    grid: tokens per side (grid**2 image tokens); target / drafter / vq /
    text_encoder: where each component comes from (None = not used);
    needs_gpu: too slow/large for CPU; min_gpu_memory_gb: rough need in bf16.

    Hook for local (embedded) presets: with ``local_dir`` set, every component
    is read from ``local_dir/<subdir>`` where ``<subdir>`` is ``local_layout[name]``
    (default: the component name, e.g. ``assets/emoji/vq``); the hub is not used.
    """

    name: str
    title: str
    resolution: int
    grid: int
    target: Component | None = None
    drafter: Component | None = None
    vq: Component | None = None
    text_encoder: Component | None = None
    needs_gpu: bool = False
    min_gpu_memory_gb: float | None = None
    local_dir: str | None = None
    local_layout: Mapping[str, str] = field(default_factory=dict)
    notes: str = ""

    @property
    def num_tokens(self) -> int:
        return self.grid * self.grid

    @property
    def components(self) -> dict[str, Component]:
        """The hub components in use, by name (empty for a local preset)."""
        if self.local_dir is not None:
            return {}
        return {n: c for n in COMPONENT_NAMES if (c := getattr(self, n)) is not None}

    def fetch(self, name: str, **kw) -> Path:
        """Local path of component ``name`` (a file, or a snapshot/local folder)."""
        if name not in self.component_names():
            raise KeyError(f"preset {self.name!r} has no component {name!r}; it has {self.component_names()}")
        title = f"{_COMPONENT_TITLES.get(name, name)} of preset {self.name!r}"
        if self.local_dir is not None:
            path = Path(self.local_dir) / self.local_layout.get(name, name)
            if not path.exists():
                raise WeightsUnavailable(title, path=str(path), reason="does not exist")
            return path
        return getattr(self, name).fetch(title, **kw)

    def component_names(self) -> tuple[str, ...]:
        """Components this preset uses (local: the keys of ``local_layout``, default all four)."""
        if self.local_dir is not None:
            return tuple(self.local_layout) if self.local_layout else COMPONENT_NAMES
        return tuple(n for n in COMPONENT_NAMES if getattr(self, n) is not None)

    def fetch_all(self, **kw) -> dict[str, Path]:
        """Fetch every component; the first failure raises :class:`WeightsUnavailable`."""
        return {n: self.fetch(n, **kw) for n in self.component_names()}

    def missing(self, optional: bool = True, **kw) -> list[WeightsUnavailable]:
        """Components not available locally, as exceptions (never downloads).

        optional: also report the ``OPTIONAL_COMPONENTS`` (those a preset runs without).
        """
        out = []
        for n in self.component_names():
            if not optional and n in OPTIONAL_COMPONENTS:
                continue
            try:
                self.fetch(n, **({**kw, "local_files_only": True} if self.local_dir is None else {}))
            except WeightsUnavailable as e:
                out.append(e)
        return out

    def download_commands(self) -> list[str]:
        return [c.command() for c in self.components.values()]


_TARGET_FILES = ("*.json", "*.safetensors")
_DRAFTER_FILES = ("*.json", "*.safetensors", "*.bin")
# flan-t5-xl: the full encoder-decoder checkpoint is fetched (T5EncoderModel keeps
# the encoder). Assumes the repo carries safetensors shards; if it only has
# pytorch_model*.bin, add "*.bin" here.
_T5_FILES = ("config.json", "*.safetensors", "*.safetensors.index.json", "tokenizer*", "spiece.model",
             "special_tokens_map.json")

_VQ16 = Component("peizesun/llamagen_t2i", filename="vq_ds16_t2i.pt")
_FLAN_T5_XL = Component("google/flan-t5-xl", allow_patterns=_T5_FILES, required=("config.json", "*.safetensors"))

PRESETS: dict[str, Preset] = {}


def register_preset(preset: Preset, replace: bool = False) -> Preset:
    if preset.name in PRESETS and not replace:
        raise ValueError(f"preset {preset.name!r} already registered")
    PRESETS[preset.name] = preset
    return preset


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise KeyError(f"unknown preset {name!r}; available: {', '.join(PRESETS)}") from None


register_preset(Preset(
    name="llamagen-t2i",
    title="LlamaGen T2I XL, stage I (256 px)",
    resolution=256,
    grid=16,
    target=Component("jadohu/LlamaGen-T2I", allow_patterns=_TARGET_FILES, required=("config.json", "*.safetensors")),
    drafter=Component("jadohu/llamagen_drafter", allow_patterns=_DRAFTER_FILES, required=("config.json",)),
    vq=_VQ16,
    text_encoder=_FLAN_T5_XL,
    needs_gpu=True,
    min_gpu_memory_gb=8.0,
    notes="GPT-XL 775M + flan-t5-xl encoder; LANTERN's release checkpoints.",
))

register_preset(Preset(
    name="llamagen-t2i-512",
    title="LlamaGen T2I XL, stage II (512 px)",
    resolution=512,
    grid=32,
    target=Component("jadohu/LlamaGen-T2I-2", allow_patterns=_TARGET_FILES, required=("config.json", "*.safetensors")),
    drafter=Component("jadohu/llamagen2_drafter", allow_patterns=_DRAFTER_FILES, required=("config.json",)),
    vq=_VQ16,
    text_encoder=_FLAN_T5_XL,
    needs_gpu=True,
    min_gpu_memory_gb=10.0,
    notes="1024 image tokens per image.",
))
