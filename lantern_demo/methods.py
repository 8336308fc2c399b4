"""The decoding methods and their configuration: the one place that names them.

``METHOD_TABLE`` lists every method with what the engine, the app and the
benchmark need to know about it (its default draft shape, whether its acceptance
is relaxed, whether it takes LANTERN++'s lambda, whether it is an exact baseline,
its titles); the tuples below it are views of that table. ``DecodeConfig`` is a
method with its parameters, and ``DecodeConfig.validate`` is where every
parameter's range is checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from torch import Tensor

from .acceptance import Relaxation, check_relaxation
from .jacobi import INITS
from .sampling import SamplingConfig
from .trees import validate_shape

#: Draft shapes: a sampled chain, EAGLE-2's dynamic tree, a static tree (LANTERN++),
#: the SJD window (drafts without a drafter).
DRAFTS = ("chain", "tree", "static", "window")


@dataclass(frozen=True)
class Method:
    """One decoding method.

    draft: default draft shape (None: AR drafts nothing; "window": no drafter).
    relaxed: LANTERN's relaxed acceptance (delta and k) instead of the exact rule.
    uses_lam: the relaxation is also bounded by lambda * p(x) (LANTERN++).
    baseline: exact, offered as the app's baseline and the benchmark's reference.
    title: short name in tables and logs; choice: its label in the app's method selector.
    draft_fixed: the app and the API always run it on its ``draft`` shape, whatever the draft
        control says (EAGLE-2 is its dynamic tree: on a chain it would be SD). The engine takes
        any drafter shape (an experiment such as EAGLE-2's rule on a static tree).
    """

    name: str
    draft: str | None
    title: str
    choice: str
    draft_fixed: bool = False
    relaxed: bool = False
    uses_lam: bool = False
    baseline: bool = False


METHOD_TABLE = (
    Method("ar", None, "AR", "AR (plain, 1 token per pass)", baseline=True),
    Method("sd", "chain", "SD", "SD (exact speculative, chain)", baseline=True),
    Method("eagle", "tree", "EAGLE-2", "EAGLE-2 (exact, dynamic tree)", draft_fixed=True, baseline=True),
    Method("lantern", "tree", "LANTERN", "LANTERN (relaxed, δ and k)", relaxed=True),
    Method("lantern++", "static", "LANTERN++", "LANTERN++ (relaxed, λ and k, static tree)", relaxed=True,
           uses_lam=True),
    Method("sjd", "window", "SJD", "SJD (exact, no drafter: Jacobi window)", baseline=True),
    Method("sjd+lantern", "window", "SJD+LANTERN", "SJD+LANTERN (relaxed, no drafter, δ and k)", relaxed=True),
)
METHOD_INFO = {m.name: m for m in METHOD_TABLE}
METHODS = tuple(METHOD_INFO)
RELAXED = tuple(m.name for m in METHOD_TABLE if m.relaxed)
DRAFTER_FREE = tuple(m.name for m in METHOD_TABLE if m.draft in (None, "window"))
#: The drafter-free speculative methods (they draft a Jacobi window).
SJD_METHODS = tuple(m.name for m in METHOD_TABLE if m.draft == "window")
#: The exact methods offered as baselines and benchmark references.
BASELINES = tuple(m.name for m in METHOD_TABLE if m.baseline)
TITLES = {m.name: m.title for m in METHOD_TABLE}
DEFAULT_DRAFT = {m.name: m.draft for m in METHOD_TABLE}

#: Fields of ``DecodeConfig`` that ``from_values`` does not read from control values.
_NOT_CONTROLS = ("draft", "static_shape", "sampling")


def whole_number(name: str, value: Any) -> int:
    """``value`` as an int; ValueError (naming ``name``) unless it is a whole number."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not number.is_integer():
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    return int(number)


def boolean(name: str, value: Any) -> bool:
    """``value`` if it is a bool; ValueError (naming ``name``) otherwise."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, got {value!r}")
    return value


def _convert(name: str, kind: str, value: Any) -> Any:
    """A control value as a config field of annotation ``kind``; ValueError if it is of the wrong kind."""
    if kind == "int":
        return whole_number(name, value)
    if kind == "float":
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be a number, got {value!r}") from None
    if kind == "bool":
        return boolean(name, value)
    return value


#: Ranges of the integer parameters: (name, lowest, highest).
INT_RANGES = (("gamma", 1, 64), ("depth", 1, 32), ("branching", 1, 64), ("tree_tokens", 2, 1024),
              ("window", 1, 128))


@dataclass(frozen=True)
class DecodeConfig:
    """A decoding method and its parameters.

    method: a name of ``METHODS`` (see ``METHOD_TABLE``).
    draft: "chain" | "tree" (EAGLE-2 dynamic) | "static" (LANTERN++) | "window" (the SJD
        methods' only shape); None = the method's default.
    gamma: chain length (the most drafts per step).
    confidence: chain drafting stops early once the product of the drafted tokens'
        draft probabilities (EAGLE-2's path confidence, an estimate of the chance that
        every draft so far is accepted) falls below it; 0 = always ``gamma`` drafts.
        It decides from the drafter alone, so exact methods stay exact.
    depth: tree levels. branching: children per expanded tree node (EAGLE-2's top-k;
        not ``sampling.top_k``).
    tree_tokens: tree nodes verified per step including the root (dynamic and static).
    static_shape: explicit static tree as paths of child ranks (None = ``static_tree(...)``).
    delta, k, lam: the relaxation (``acceptance.Relaxation``); lam only for lantern++,
        where delta caps the per-position TVD as well (1 = no cap).
    window: SJD's draft window L (drafts verified per pass). init: how SJD starts a
        fresh draft ("random", "left" or "vertical", see ``jacobi.init_drafts``).
    coupled: SJD redrafts coupled with the previous drafts (SCD / MC-SJD's maximal
        coupling) instead of drawn independently; both exact.
    """

    method: str = "lantern"
    draft: str | None = None
    gamma: int = 4
    confidence: float = 0.0
    depth: int = 5
    branching: int = 10
    tree_tokens: int = 59
    static_shape: tuple[tuple[int, ...], ...] | None = None
    delta: float = 0.2
    k: int = 100
    lam: float = 2.0
    window: int = 16
    init: str = "vertical"
    coupled: bool = False
    sampling: SamplingConfig = field(default_factory=SamplingConfig)

    @classmethod
    def from_values(cls, values: Mapping[str, Any], drafts: Mapping[str, str] | None = None,
                    **overrides: Any) -> DecodeConfig:
        """The config of control values by name (``presets.CONTROL_DEFAULTS``: the fields of
        ``DecodeConfig`` and ``SamplingConfig``; other names are ignored, missing ones keep their
        defaults), with ``overrides``. draft "auto" (or missing) = the method's default shape:
        ``drafts[method]`` (a preset's choice, ``presets.PresetSettings.drafts``), else
        ``DEFAULT_DRAFT``; a ``draft_fixed`` method (EAGLE-2) always gets its own shape.
        Raises ValueError for a value of the wrong kind (e.g. a fraction where a whole number
        is needed); ranges are ``validate``'s.
        """
        values = {**values, **overrides}
        sampling = SamplingConfig(**{f.name: _convert(f.name, f.type, values[f.name])
                                     for f in fields(SamplingConfig) if f.name in values})
        kw = {f.name: _convert(f.name, f.type, values[f.name])
              for f in fields(cls) if f.name in values and f.name not in _NOT_CONTROLS}
        method = kw.get("method", cls.method)
        draft = values.get("draft", "auto")
        if method in DRAFTER_FREE:
            draft = None
        elif method in METHOD_INFO and METHOD_INFO[method].draft_fixed:
            draft = METHOD_INFO[method].draft
        elif draft == "auto":
            draft = {**DEFAULT_DRAFT, **(drafts or {})}.get(method)
        return cls(draft=draft, sampling=sampling, **kw)

    @property
    def info(self) -> Method:
        return METHOD_INFO[self.method]

    @property
    def shape(self) -> str | None:
        """The drafting shape actually used (None for AR)."""
        if self.method == "ar":
            return None
        return self.draft or DEFAULT_DRAFT[self.method]

    @property
    def relaxed(self) -> bool:
        return self.info.relaxed

    @property
    def needs_drafter(self) -> bool:
        return self.method not in DRAFTER_FREE

    @property
    def width(self) -> int:
        """Tokens one target pass verifies, the pending token included."""
        sizes = {None: 0, "chain": self.gamma, "window": self.window}
        return 1 + sizes.get(self.shape, self.tree_tokens)

    def validate(self, table_size: int | None = None) -> None:
        """Raise ValueError with a clear message for any out-of-range parameter.

        table_size: columns of the neighbour table a relaxed method will use (its k may
        not exceed them); None = not known here.
        """
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; choose one of {METHODS}")
        if self.draft is not None and self.draft not in DRAFTS:
            raise ValueError(f"unknown draft shape {self.draft!r}; choose one of {DRAFTS}")
        if self.method != "ar" and self.draft is not None and (self.draft == "window") == self.needs_drafter:
            raise ValueError(f"method {self.method!r} cannot use draft shape {self.draft!r}: "
                             "the SJD methods draft a window, the others a chain or tree")
        if self.init not in INITS:
            raise ValueError(f"unknown draft initialisation {self.init!r}; choose one of {INITS}")
        for name, lo, hi in INT_RANGES:
            value = getattr(self, name)
            if not lo <= value <= hi:
                raise ValueError(f"{name} must be in [{lo}, {hi}], got {value}")
        if not 0.0 <= self.confidence < 1.0:
            raise ValueError(f"confidence must be in [0, 1), got {self.confidence}")
        check_relaxation(self.k, self.delta, self.lam, table_size if self.relaxed else None)
        if self.static_shape is not None:
            validate_shape(self.static_shape)
        self.sampling.validate()

    def relaxation(self, neighbors: Tensor | None) -> Relaxation | None:
        """The Relaxation for this method (None for exact methods)."""
        if not self.relaxed:
            return None
        if neighbors is None:
            raise ValueError(f"method {self.method!r} needs a codebook neighbour table")
        return Relaxation(neighbors, self.k, self.delta, self.lam if self.info.uses_lam else None)
