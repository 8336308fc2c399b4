"""The page's notice about the prompt: how it was read, and close names to try when nothing matched.

A suggestion is a link to ``#try:<name>`` (URL-quoted): the page's script (``client.JS``)
puts the name into the prompt box when it is clicked; the text stays copyable.
"""

from __future__ import annotations

import urllib.parse

from ..text import SUGGESTION_PREFIX

#: Link target of a suggestion (the page's script reads names from such links).
TRY_LINK = "#try:"


def try_links(names: list[str]) -> str:
    """Markdown links that fill the prompt with each name, e.g. "[pizza](#try:pizza) · [pie](#try:pie)"."""
    return " · ".join(f"[{name}]({TRY_LINK}{urllib.parse.quote(name)})" for name in names)


def prompt_notice(reading: dict, messages: list[str]) -> str:
    """Markdown for the notice: ``messages`` (``PromptNotice.messages`` and the pipeline's), as an
    info line each; when nothing in the prompt matched (``reading["nothing_matched"]``), a
    highlighted block (a quote) with the suggestions as links."""
    if not reading.get("nothing_matched"):
        return "\n\n".join(f"ℹ️ {m}" for m in messages)
    lines = ["⚠️ **The model did not recognise this prompt.**",
             *(m for m in messages if not m.startswith(SUGGESTION_PREFIX))]
    if reading.get("suggestions"):
        lines.append("Did you mean: " + try_links(reading["suggestions"]) + " (click to use)")
    return "\n>\n".join("> " + line for line in lines)
