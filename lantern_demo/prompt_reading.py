"""How a class-conditioned model reads what people type: emoji characters, typos, other scripts.

The embedded model knows emojis by their English names (a class per emoji). People also type
the emoji itself ("🙂", "❤️🐱"), misspell a name ("pizzza"), or write in another script
("猫"). These functions turn a prompt into the words the class matcher compares with the
names, and find close known names to suggest when nothing matches:

* :func:`spell_emoji` replaces every emoji character by its English CLDR name, taken from
  the ``emoji`` package ("🙂" -> "slightly smiling face");
* :func:`close_names` ranks known names by how closely their words match the prompt's words
  (``difflib`` similarity), for "did you mean" suggestions;
* :func:`is_non_latin` tells a prompt written without Latin letters, so the user hears that
  the model reads English names rather than that their words are "unknown".
"""

from __future__ import annotations

import difflib
import unicodedata
from collections.abc import Sequence

import emoji


def _cldr_name(chars: str, data: dict) -> str:
    return " " + data["en"].strip(":").replace("_", " ") + " "


def spell_emoji(text: str) -> str:
    """``text`` with each emoji character replaced by its English name, spaces around it."""
    return " ".join(emoji.replace_emoji(text, replace=_cldr_name).split())


def is_non_latin(text: str) -> bool:
    """True when ``text`` has letters and none of them is a Latin letter (e.g. "猫", "日本の旗")."""
    letters = [ch for ch in text if ch.isalpha()]
    return bool(letters) and not any("LATIN" in unicodedata.name(ch, "") for ch in letters)


def close_names(words: Sequence[str], names: Sequence[str], n: int = 3, cutoff: float = 0.7) -> list[str]:
    """Up to ``n`` of ``names`` whose words best match ``words``, best first (no match: []).

    A name scores the mean, over the prompt's words, of each word's best ``difflib`` ratio
    against the name's words; names scoring below ``cutoff`` are left out. Ties keep the
    order of ``names`` (so shorter, more common names can be listed first by the caller).
    """
    words = [w for w in words if w]
    if not words:
        return []
    scored = []
    for i, name in enumerate(names):
        parts = name.split()
        score = sum(max(difflib.SequenceMatcher(None, w, p).ratio() for p in parts) for w in words) / len(words)
        if score >= cutoff:
            scored.append((-score, i, name))
    return [name for _, _, name in sorted(scored)[:n]]
