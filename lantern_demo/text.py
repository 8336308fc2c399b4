"""Text encoders: prompts -> left-padded caption embeddings for the image GPT.

One interface, :class:`TextEncoder`: ``encode(prompts) -> TextEmbedding`` with

* ``emb``  [B, L, C]: L = the encoder's ``max_length``; valid tokens sit at the
  END of each row (left padding), pad positions are exactly zero;
* ``mask`` [B, L] bool, True at valid tokens;
* ``notices``: one :class:`PromptNotice` per prompt (cleaned text, token count,
  truncation, unknown words, empty) for the UI to show.

Implementations:

* :class:`T5TextEncoder` -- LlamaGen's text encoder (flan-t5-xl encoder; any T5
  checkpoint directory works). Captions are cleaned (:func:`clean_caption`),
  tokenised to at most 120 tokens (including ``</s>``), right-padded for the
  encoder, then rotated so that the valid tokens come last and the pad
  embeddings are zeroed -- the layout LlamaGen's GPT was trained with.
* :class:`WordTextEncoder` -- a small trainable word-embedding table for our own
  tiny model (an ``nn.Module``, trained jointly with the GPT).
* :class:`ClassTextEncoder` -- class conditioning in LlamaGen's c2i style for
  our tiny model: the prompt is matched by its words to one of the classes
  (emojis) the model was trained on, and that class's learned embedding is the
  one-position caption.

:func:`load_text_encoder` opens either of our own two formats from a folder.
"""

from __future__ import annotations

import html
import json
import math
import os
import re
import urllib.parse
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Protocol, Sequence, runtime_checkable

import torch
from torch import Tensor, nn
from safetensors.torch import load_file, save_file

from .prompt_reading import close_names, is_non_latin, spell_emoji

__all__ = [
    "PromptNotice",
    "TextEmbedding",
    "TextEncoder",
    "T5TextEncoder",
    "WordTextEncoder",
    "ClassTextEncoder",
    "load_text_encoder",
    "build_vocab",
    "clean_caption",
    "left_align",
    "split_words",
]


# ---------------------------------------------------------------------------
# Result types and interface
# ---------------------------------------------------------------------------


#: How the notice's "did you mean" message starts.
SUGGESTION_PREFIX = "Did you mean "


@dataclass
class PromptNotice:
    """What happened to one prompt on its way into the model.

    prompt: as given; cleaned: the text the encoder actually saw;
    n_tokens: valid positions in the embedding (for T5 including ``</s>``);
    truncated: tokens beyond ``max_length`` were dropped; unknown_words: words
    the vocabulary cannot represent (dropped by the word encoder, mapped to
    ``<unk>`` by T5); empty: nothing of the prompt's content reached the model;
    matched: the class a class encoder chose, where it is not what the prompt
    says word for word (None otherwise); read_as: the prompt with its emoji characters
    spelled as English names, where it has any (None otherwise); suggestions: known names
    close to the words of a prompt that named nothing known; non_latin: the prompt is
    written without Latin letters (the class encoder reads English names only).
    """

    prompt: str
    cleaned: str
    n_tokens: int
    truncated: bool = False
    unknown_words: list[str] = field(default_factory=list)
    empty: bool = False
    matched: str | None = None
    read_as: str | None = None
    suggestions: list[str] = field(default_factory=list)
    non_latin: bool = False

    def messages(self) -> list[str]:
        """Human-readable warnings (empty list when nothing to report)."""
        out = []
        if self.read_as is not None:
            out.append(f"Read as \u201c{self.read_as}\u201d.")
        quoted = ", ".join(f"\u201c{w}\u201d" for w in self.unknown_words)
        if self.empty and self.non_latin:
            out.append("The embedded model reads English emoji names only; the image is drawn without a caption.")
        elif self.empty and self.unknown_words:
            out.append(f"The model knows none of the words {quoted}; the image is drawn without a caption.")
        elif self.empty:
            out.append("The prompt has no usable words; the image is generated without a caption.")
        elif self.unknown_words:
            out.append(f"Unknown words ignored: {quoted}.")
        if self.truncated:
            out.append(f"The prompt is too long and was cut to {self.n_tokens} tokens.")
        if self.suggestions:
            out.append(SUGGESTION_PREFIX + ", ".join(f"\u201c{n}\u201d" for n in self.suggestions) + "?")
        if self.matched is not None:
            out.append(f"Drawing the closest emoji the model knows: \u201c{self.matched}\u201d.")
        return out

    def reading(self) -> dict:
        """How the prompt was read, as JSON-ready fields (the API's ``stats["prompt_reading"]``).

        read_as: the prompt with emoji characters spelled as names (None: it has none);
        understood_as: what reached the model (a class encoder's chosen name, a word encoder's
        known words; None: nothing); matched: the closest class, where not named word for word;
        nothing_matched: the image is drawn without a caption; suggestions: close known names;
        non_latin, unknown_words, truncated: as the fields.
        """
        return {"read_as": self.read_as, "understood_as": self.cleaned or None, "matched": self.matched,
                "nothing_matched": self.empty, "suggestions": list(self.suggestions), "non_latin": self.non_latin,
                "unknown_words": list(self.unknown_words), "truncated": self.truncated}


@dataclass
class TextEmbedding:
    """Left-padded caption embeddings: emb [B, L, C], mask [B, L] bool, notices (B).

    Give the GPT the mask with the embedding (this object, or ``gpt.Caption(emb[b], mask[b])``):
    a bare ``emb[b]`` is taken as L valid tokens, so its zero padding would be attended,
    where LlamaGen's sampler masks the padded keys.
    """

    emb: Tensor
    mask: Tensor
    notices: list[PromptNotice]

    def __len__(self) -> int:
        return self.emb.shape[0]

    def to(self, device=None, dtype=None) -> "TextEmbedding":
        return TextEmbedding(self.emb.to(device=device, dtype=dtype), self.mask.to(device=device), self.notices)


@runtime_checkable
class TextEncoder(Protocol):
    """Anything that turns prompts into a :class:`TextEmbedding`."""

    max_length: int  # L
    dim: int  # C

    def encode(self, prompts: Sequence[str]) -> TextEmbedding: ...


def left_align(emb: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Move each row's valid tokens to the end and zero the padding.

    emb [B, L, C], mask [B, L] with the valid tokens first (right padding, as a
    tokenizer produces). Row b with n valid tokens becomes
    ``cat(emb[b, n:], emb[b, :n])`` (pads first), i.e. a rotation by n, and
    ``mask[b] = [False] * (L - n) + [True] * n``. Pad embeddings are set to 0.
    """
    b, L = mask.shape
    n = mask.long().sum(dim=1, keepdim=True)  # [B, 1]
    pos = torch.arange(L, device=mask.device)[None, :]  # [1, L]
    src = (pos + n) % L  # new[j] = old[(j + n) % L]
    out = torch.gather(emb, 1, src[..., None].expand(b, L, emb.shape[-1]))
    new_mask = pos >= (L - n)
    return out * new_mask[..., None].to(out.dtype), new_mask


# ---------------------------------------------------------------------------
# Caption cleaning (T5 / LlamaGen)
# ---------------------------------------------------------------------------

# Our own rule list approximating the caption cleaning LlamaGen applies before
# T5 (inherited from PixArt / DeepFloyd IF): it lowercases, and removes web
# debris (urls, html, @handles, file names, ids, shop phrases). Differences from
# the original, on purpose: no ftfy/BeautifulSoup dependency (mojibake is not
# repaired; tags are removed by a regex), and fewer alphanumeric-code rules.
_CLEAN_RULES: tuple[tuple[re.Pattern, str], ...] = tuple(
    (re.compile(p), r)
    for p, r in (
        (r"<person>", "person"),
        (r"\b(?:https?://|www\.)\S*", ""),  # urls with a scheme or www.
        (r"\b[\w.-]+\.(?:com|co|ru|net|org|edu|gov|it)\b[\w/.%?=&-]*", ""),  # bare domains
        (r"<[^<>]{0,200}>", ""),  # html tags
        (r"@\w+\b", ""),  # @handles
        ("[\u31c0-\u9fff]+", ""),  # CJK strokes .. unified ideographs (not in the T5 training captions)
        ("[\u058a\u05be\u1400\u1806\u2010-\u2015\u2e17\u2e1a\u2e3a\u2e3b\u2e40\u301c\u3030\u30a0"
         "\ufe31\ufe32\ufe58\ufe63\uff0d-]+", "-"),  # every dash -> "-"
        ("[`\u00b4\u00ab\u00bb\u201c\u201d\u00a8]", '"'),  # double quotes
        ("[\u2018\u2019]", "'"),  # single quotes
        (r"&quot;?|&amp;?", ""),  # leftover entities
        (r"\b\d{1,3}(?:\.\d{1,3}){3}\b", " "),  # ip addresses
        (r"\\n", " "),  # literal backslash-n
        (r"#\d{1,3}\b|#\d{5,}\b|\b\d{6,}\b", ""),  # numbering / ids
        (r"\S+\.(?:png|jpe?g|bmp|webp|eps|pdf|apk|mp4)\b", ""),  # file names
        (r"[\"']{2,}", '"'),
        (r"\.{2,}", " "),
        (r"[#\u00ae\u2022\u00a9\u2122&@\u00b7\u00ba\u00bd\u00be\u00bf\u00a1\u00a7~()\[\]{}|\\/*]+", " "),
        (r"\s+\.\s+", " "),
        (r"\b[a-z]{1,3}\d{3,15}\b", ""),  # product codes like ab1234
        (r"(?:worldwide\s+)?(?:free\s+)?shipping", ""),
        (r"(?:free\s)?download(?:\sfree)?", ""),
        (r"\bclick\b\s(?:for|on)\s\w+", ""),
        (r"\bpage\s+\d+\b", ""),
        (r"\b\d+(?:\.\d+)?[x\u0445\u00d7]\d+(?:\.\d+)?\b", ""),  # sizes like 1920x1080
        (r"\s+:\s+", ": "),
        (r"\s+", " "),
    )
)
_MANY_SEPARATORS = re.compile(r"[-_]")
_EDGE_RULES = tuple(
    (re.compile(p), r)
    for p, r in (
        (r"^[\"']([\s\S]+)[\"']$", r"\1"),  # enclosing quotes
        (r"^['_,\-:;]", ""),
        (r"['_,\-:+]$", ""),
        (r"^\.\S+$", ""),
    )
)


def _clean_once(text: str) -> str:
    s = urllib.parse.unquote_plus(str(text))
    s = html.unescape(html.unescape(s)).strip().lower()
    for pat, rep in _CLEAN_RULES[:-1]:
        s = pat.sub(rep, s)
    if len(_MANY_SEPARATORS.findall(s)) > 3:  # this-is-a-slug / snake_case
        s = _MANY_SEPARATORS.sub(" ", s)
    s = _CLEAN_RULES[-1][0].sub(" ", s).strip()
    for pat, rep in _EDGE_RULES:
        s = pat.sub(rep, s)
    return s.strip()


def clean_caption(text: str) -> str:
    """Normalise a caption the way LlamaGen's T5 inputs were (approximately).

    Lowercases; strips urls, html tags/entities, @handles, CJK ideographs, file
    names, ip addresses, long numbers, shop phrases and stray punctuation;
    unifies dashes and quotes; collapses whitespace. Applied twice, as LlamaGen
    does. ``"A <b>red</b> cat  http://x.com/a.png"`` -> ``"a red cat"``.
    """
    return _clean_once(_clean_once(text))


# ---------------------------------------------------------------------------
# T5 (LlamaGen)
# ---------------------------------------------------------------------------


class T5TextEncoder:
    """T5 encoder (LlamaGen: ``google/flan-t5-xl``) behind :class:`TextEncoder`.

    model: ``transformers.T5EncoderModel``; tokenizer: its tokenizer (must append
    ``</s>``). ``encode`` returns emb [B, max_length, d_model] in the model's dtype.
    """

    def __init__(self, model, tokenizer, max_length: int = 120, clean: bool = True):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.max_length = int(max_length)
        self.clean = clean
        self.dim = int(model.config.d_model)

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike,
        *,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        max_length: int = 120,
        clean: bool = True,
        **model_kwargs,
    ) -> "T5TextEncoder":
        """Load encoder weights and tokenizer from a local directory (flan-t5-xl layout).

        A full encoder-decoder checkpoint is fine: only the encoder is kept.
        """
        from transformers import AutoTokenizer, T5EncoderModel

        path = os.fspath(path)
        tok = AutoTokenizer.from_pretrained(path)
        model = T5EncoderModel.from_pretrained(path, dtype=dtype, **model_kwargs).to(device)
        model.requires_grad_(False)
        return cls(model, tok, max_length=max_length, clean=clean)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def to(self, device=None, dtype=None) -> "T5TextEncoder":
        self.model.to(device=device, dtype=dtype)
        return self

    def _unknown_words(self, texts: list[str]) -> list[list[str]]:
        unk = self.tokenizer.unk_token_id
        out: list[list[str]] = []
        for text in texts:
            words = text.split()
            found: list[str] = []
            if unk is not None and words:
                ids = self.tokenizer(words, add_special_tokens=False)["input_ids"]
                found = [w for w, t in zip(words, ids) if unk in t]
            out.append(list(dict.fromkeys(found)))
        return out

    @torch.inference_mode()
    def encode(self, prompts: Sequence[str]) -> TextEmbedding:
        prompts = [str(p) for p in prompts]
        texts = [clean_caption(p) if self.clean else p.strip() for p in prompts]
        full_len = [len(ids) for ids in self.tokenizer(texts, add_special_tokens=True)["input_ids"]]
        batch = self.tokenizer(
            texts,
            max_length=self.max_length,
            padding="max_length",
            truncation=True,
            add_special_tokens=True,
            return_attention_mask=True,
            return_tensors="pt",
        )
        ids = batch["input_ids"].to(self.device)
        mask = batch["attention_mask"].to(self.device)
        hidden = self.model(input_ids=ids, attention_mask=mask).last_hidden_state
        emb, new_mask = left_align(hidden, mask.bool())
        unknown = self._unknown_words(texts)
        notices = [
            PromptNotice(
                prompt=p,
                cleaned=t,
                n_tokens=int(m.sum()),
                truncated=n > self.max_length,
                unknown_words=u,
                empty=not t,
            )
            for p, t, n, m, u in zip(prompts, texts, full_len, mask, unknown)
        ]
        return TextEmbedding(emb, new_mask, notices)


# ---------------------------------------------------------------------------
# Word-level encoder (our tiny model)
# ---------------------------------------------------------------------------

_WORD = re.compile(r"[^\W_]+")
WORD_VOCAB_FILE = "vocab.json"
WORD_WEIGHTS_FILE = "text_encoder.safetensors"
_WORD_FORMAT = "lantern-word-text-encoder/1"


def _strip_vs(text: str) -> str:
    """``text`` without emoji variation selectors (U+FE0E, U+FE0F)."""
    return str(text).replace("\ufe0f", "").replace("\ufe0e", "")


def split_words(text: str) -> list[str]:
    """Lowercase and split on everything that is not a letter or digit (Unicode-aware)."""
    return _WORD.findall(str(text).lower())


def build_vocab(captions: Iterable[str], min_count: int = 1, max_size: int | None = None) -> list[str]:
    """Words seen at least ``min_count`` times, most frequent first (ties alphabetical)."""
    counts = Counter(w for c in captions for w in split_words(c))
    words = sorted((w for w, n in counts.items() if n >= min_count), key=lambda w: (-counts[w], w))
    return words[:max_size] if max_size is not None else words


class _LookupTextEncoder(nn.Module):
    """An embedding table looked up by the ids of the subclass's ``tokenize`` (0 = nothing, a zero row).

    Subclasses set ``self.dim`` and ``self.embedding`` and define ``tokenize`` and ``_meta``
    (the JSON that ``load_text_encoder`` rebuilds them from).
    """

    dim: int
    embedding: nn.Embedding

    def tokenize(self, prompts: Sequence[str]) -> tuple[Tensor, Tensor, list[PromptNotice]]:
        raise NotImplementedError

    def _meta(self) -> dict:
        raise NotImplementedError

    def forward(self, ids: Tensor) -> Tensor:
        """ids [B, L] (0 = nothing) -> emb [B, L, C], zero where ids is 0."""
        return self.embedding(ids) * (ids != 0)[..., None].to(self.embedding.weight.dtype)

    def encode(self, prompts: Sequence[str]) -> TextEmbedding:
        ids, mask, notices = self.tokenize(prompts)
        dev = self.embedding.weight.device
        ids, mask = ids.to(dev), mask.to(dev)
        return TextEmbedding(self(ids), mask, notices)

    def save(self, directory: str | os.PathLike) -> None:
        """Write ``text_encoder.safetensors`` (embedding.weight) and ``vocab.json`` (``_meta``)."""
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, WORD_VOCAB_FILE), "w", encoding="utf-8") as f:
            json.dump(self._meta(), f, ensure_ascii=False, indent=0)
        save_file({"embedding.weight": self.embedding.weight.detach().cpu().contiguous()},
                  os.path.join(directory, WORD_WEIGHTS_FILE))

    @classmethod
    def load(cls, directory: str | os.PathLike, device: str | torch.device = "cpu"):
        """The encoder saved in ``directory``; an error if it is not a ``cls``."""
        enc = load_text_encoder(directory, device)
        if not isinstance(enc, cls):
            raise ValueError(f"{directory}: not a {cls.__name__} (a {type(enc).__name__})")
        return enc


def _read_as(prompt: str) -> str | None:
    """``prompt`` with its emoji characters spelled as names (None when it has none)."""
    spelled = spell_emoji(prompt)
    return spelled if spelled != " ".join(prompt.split()) else None


class WordTextEncoder(_LookupTextEncoder):
    """Trainable word embeddings behind :class:`TextEncoder`.

    vocab: list of words (id of ``vocab[i]`` is ``i + 1``; 0 is padding).
    Prompts are split with :func:`split_words` after their emoji characters are spelled
    as names (``read_as``); unknown words are dropped and reported; at most ``max_length``
    known words are kept (the rest truncated). A prompt with no known word gives an
    all-padding row (mask all False) and an ``empty`` notice with close vocabulary words
    as suggestions. Gradients flow through :meth:`encode` / :meth:`forward`.
    """

    def __init__(self, vocab: Sequence[str], dim: int = 64, max_length: int = 16, init_std: float = 0.02):
        super().__init__()
        vocab = [str(w) for w in vocab]
        if len(set(vocab)) != len(vocab):
            raise ValueError("vocab has duplicate words")
        self.vocab = vocab
        self.index = {w: i + 1 for i, w in enumerate(vocab)}
        self.dim = int(dim)
        self.max_length = int(max_length)
        self.embedding = nn.Embedding(len(vocab) + 1, self.dim, padding_idx=0)
        nn.init.normal_(self.embedding.weight, std=init_std)
        with torch.no_grad():
            self.embedding.weight[0].zero_()

    def tokenize(self, prompts: Sequence[str]) -> tuple[Tensor, Tensor, list[PromptNotice]]:
        """-> ids [B, L] int64 (left-padded with 0), mask [B, L] bool, notices."""
        L = self.max_length
        ids = torch.zeros(len(prompts), L, dtype=torch.long)
        notices = []
        for b, p in enumerate(prompts):
            words = split_words(spell_emoji(str(p)))
            known = [self.index[w] for w in words if w in self.index]
            unknown = list(dict.fromkeys(w for w in words if w not in self.index))
            kept = known[:L]
            if kept:
                ids[b, L - len(kept):] = torch.tensor(kept)
            notices.append(
                PromptNotice(
                    prompt=str(p),
                    cleaned=" ".join(self.vocab[i - 1] for i in kept),
                    n_tokens=len(kept),
                    truncated=len(known) > L,
                    unknown_words=unknown,
                    empty=not kept,
                    read_as=_read_as(str(p)),
                    suggestions=[] if kept else close_names(unknown, self.vocab),
                    non_latin=not kept and is_non_latin(str(p)),
                )
            )
        return ids, ids != 0, notices

    def _meta(self) -> dict:
        return {"format": _WORD_FORMAT, "dim": self.dim, "max_length": self.max_length, "vocab": self.vocab}


_CLASS_FORMAT = "lantern-class-text-encoder/1"


class ClassTextEncoder(_LookupTextEncoder):
    """One learned embedding per class behind :class:`TextEncoder`; prompts pick the class by their words.

    names[c]: the names of class c (e.g. an emoji's name and aliases); stop_words:
    words that say nothing about the class (the caption templates' "an", "emoji", ...).
    A prompt's known content words are compared with every name by TF-IDF cosine
    (word weight ``log(1 + n_names / names containing it)``); the best name's class
    wins, ties going to the lower class id. ``encode`` gives emb [B, 1, C] (the
    class embedding) with mask [B, 1]; a prompt without a known content word gives
    a zero row with mask False (the GPT then uses its unconditional embedding)
    and an ``empty`` notice. Class ids in ``tokenize`` are ``c + 1`` (0 = none).
    symbols[c] (optional): the emoji character(s) of class c; a prompt that contains one picks
    that class before any word is read (the longest symbol wins; variation selectors are ignored).
    """

    max_length = 1

    def __init__(self, names: Sequence[Sequence[str]], dim: int = 64, stop_words: Iterable[str] = (),
                 init_std: float = 0.02, symbols: Sequence[str] | None = None):
        super().__init__()
        self.names = [[str(n) for n in ns] for ns in names]
        if not self.names or any(not ns for ns in self.names):
            raise ValueError("every class needs at least one name")
        if symbols is not None and len(symbols) != len(self.names):
            raise ValueError(f"symbols: one per class expected ({len(self.names)}), got {len(symbols)}")
        self.symbols = None if symbols is None else [str(x) for x in symbols]
        self._by_symbol = sorted(((_strip_vs(x), c) for c, x in enumerate(self.symbols or []) if _strip_vs(x)),
                                 key=lambda t: -len(t[0]))
        self.stop_words = sorted(set(stop_words))
        self.dim = int(dim)
        stop = set(self.stop_words)
        self._name_words = [(c, frozenset(w for w in split_words(n) if w not in stop))
                            for c, ns in enumerate(self.names) for n in ns]
        df = Counter(w for _, ws in self._name_words for w in ws)
        n_names = len(self._name_words)
        self._idf2 = {w: math.log1p(n_names / k) ** 2 for w, k in df.items()}
        self._norm = [math.sqrt(sum(self._idf2[w] for w in ws)) for _, ws in self._name_words]
        self.known = set(df) | stop
        self._primary = sorted((ns[0] for ns in self.names), key=len)  # suggestions: shorter names first
        self.embedding = nn.Embedding(len(self.names) + 1, self.dim, padding_idx=0)
        nn.init.normal_(self.embedding.weight, std=init_std)
        with torch.no_grad():
            self.embedding.weight[0].zero_()

    def match(self, prompt: str) -> tuple[int | None, list[str], list[str]]:
        """-> (class id or None, the prompt's known content words, its unknown words)."""
        bare = _strip_vs(prompt)
        for symbol, c in self._by_symbol:
            if symbol in bare:
                return c, split_words(self.names[c][0]), []
        words = split_words(spell_emoji(prompt))
        unknown = list(dict.fromkeys(w for w in words if w not in self.known))
        content = list(dict.fromkeys(w for w in words if w in self._idf2))
        if not content:
            return None, content, unknown
        q = set(content)
        q_norm = math.sqrt(sum(self._idf2[w] for w in q))
        best, best_score = None, 0.0
        for (c, ws), norm in zip(self._name_words, self._norm):
            shared = q & ws
            if shared:
                score = sum(self._idf2[w] for w in shared) / (q_norm * norm)
                if score > best_score + 1e-12:
                    best, best_score = c, score
        return best, content, unknown

    def tokenize(self, prompts: Sequence[str]) -> tuple[Tensor, Tensor, list[PromptNotice]]:
        """-> ids [B, 1] int64 (class + 1, 0 = no class), mask [B, 1] bool, notices."""
        ids = torch.zeros(len(prompts), 1, dtype=torch.long)
        notices = []
        for b, p in enumerate(prompts):
            c, content, unknown = self.match(p)
            name = None if c is None else self.names[c][0]
            exact = c is not None and any(
                set(content) == set(w for w in split_words(n) if w not in self.stop_words) for n in self.names[c])
            if c is not None:
                ids[b, 0] = c + 1
            notices.append(PromptNotice(prompt=str(p), cleaned=name or "", n_tokens=int(c is not None),
                                        unknown_words=unknown, empty=c is None,
                                        matched=None if c is None or exact else name,
                                        read_as=_read_as(str(p)),
                                        suggestions=[] if c is not None else close_names(unknown, self._primary),
                                        non_latin=c is None and is_non_latin(str(p))))
        return ids, ids != 0, notices

    def _meta(self) -> dict:
        meta = {"format": _CLASS_FORMAT, "dim": self.dim, "stop_words": self.stop_words, "names": self.names}
        return meta if self.symbols is None else {**meta, "symbols": self.symbols}

    @classmethod
    def from_meta(cls, meta: dict) -> "ClassTextEncoder":
        return cls(meta["names"], dim=meta["dim"], stop_words=meta["stop_words"], symbols=meta.get("symbols"))


def load_text_encoder(directory: str | os.PathLike, device: str | torch.device = "cpu") -> _LookupTextEncoder:
    """A :class:`WordTextEncoder` or :class:`ClassTextEncoder` saved in ``directory`` (by its ``format``)."""
    with open(os.path.join(directory, WORD_VOCAB_FILE), encoding="utf-8") as f:
        meta = json.load(f)
    fmt = meta.get("format")
    if fmt == _WORD_FORMAT:
        enc: _LookupTextEncoder = WordTextEncoder(meta["vocab"], dim=meta["dim"], max_length=meta["max_length"])
    elif fmt == _CLASS_FORMAT:
        enc = ClassTextEncoder.from_meta(meta)
    else:
        raise ValueError(f"{directory}: not a text encoder of ours (format {fmt!r})")
    enc.load_state_dict(load_file(os.path.join(directory, WORD_WEIGHTS_FILE)))
    return enc.to(device)
