"""Excerpts: the lines of a long text that hold the names an agent went on to use.

    >>> from memstack.compaction.excerpts import excerpt
    >>> listing = "\\n".join(f"{n}: line {n}" for n in range(100, 140))
    >>> listing += "\\n141:     def parse_date(text, fmt=ISO_FORMAT):\\n142:         return None"
    >>> excerpt(listing, ["parse_date"], budget=200)
    ['141:     def parse_date(text, fmt=ISO_FORMAT):']

A name alone tells an agent that something exists; the line it stood in tells it what
was said (the signature to call, the line to edit, the value to compare). Masking and
the extractive summariser use these pure functions to keep, from an output they drop,
the lines around the names the agent used after reading it, verbatim (so the prompt
still quotes the original text).

``used_names(items)`` are the salient tokens (``memstack.compaction.salient``) of the
agent's own words in ``items``: its messages and its tool-call arguments, the names it
demonstrably acted on. ``excerpt(text, names, budget=N)`` picks the lines of ``text``
holding one of ``names``, in text order, each clipped to ``width`` characters around
each name (a one-line JSON output gives one stretch per name), until ``budget``
characters are used; lines holding names
that no earlier picked line holds come first, so a small budget covers more names.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from memstack.compaction.render import message_text
from memstack.compaction.salient import occurs, salient_tokens
from memstack.history import item_type, pair_key

__all__ = ["agent_text", "excerpt", "used_names"]

Item = Mapping[str, Any]

#: Longest quoted line; longer ones are clipped around the name they hold.
LINE_CHARS = 160


def agent_text(item: Item) -> str:
    """The agent's own words in ``item`` (message text, decoded call arguments), else ''."""
    kind = item_type(item)
    if kind == "message":
        return message_text(item.get("content")) if item.get("role") == "assistant" else ""
    if pair_key(item) is None or "output" in kind:
        return ""
    raw = item.get("arguments", item.get("input", item.get("action", "")))
    if isinstance(raw, str):
        with contextlib.suppress(ValueError):
            raw = json.loads(raw)
    return arguments_text(raw)


def arguments_text(arguments: object) -> str:
    """Call arguments as the agent wrote them: string values as they are, one per line."""
    if isinstance(arguments, str):
        return arguments
    if isinstance(arguments, Mapping):
        return "\n".join(arguments_text(value) for value in arguments.values())
    if isinstance(arguments, list | tuple):
        return "\n".join(arguments_text(value) for value in arguments)
    return json.dumps(arguments)


def used_names(items: Iterable[Item]) -> list[str]:
    """Salient tokens of the agent's own words in ``items``, each once, in order."""
    found: dict[str, None] = {}
    for item in items:
        for token in salient_tokens(agent_text(item)):
            found.setdefault(token, None)
    return list(found)


def _stretch(line: str, begin: int, width: int) -> str:
    return line.strip() if len(line) <= width else line[begin : begin + width].strip()


def excerpt(text: str, names: Sequence[str], *, budget: int, width: int = LINE_CHARS) -> list[str]:
    """Lines of ``text`` holding one of ``names`` (see the module docstring)."""
    if budget <= 0 or not names:
        return []
    lines = text.split("\n")
    starts = list(itertools.accumulate((len(line) + 1 for line in lines[:-1]), initial=0))
    # A candidate is a whole line, or in a line longer than ``width`` (one-line JSON) the
    # stretch of ``width`` characters around one name: keyed by (line, start in line).
    holding: dict[tuple[int, int], list[str]] = {}
    for name in names:  # one scan of the text per name, not one per line
        at = text.find(name)
        while at >= 0:
            number = bisect.bisect_right(starts, at) - 1
            line = lines[number]
            column = at - starts[number]
            if occurs(name, line[max(0, column - 1) : column + len(name) + 1]):
                begin = (
                    0 if len(line) <= width else max(0, min(column - width // 2, len(line) - width))
                )
                held = holding.setdefault((number, begin), [])
                if name not in held:
                    held.append(name)
            at = text.find(name, at + 1)
    candidates = [
        (place, _stretch(lines[place[0]], place[1], width), frozenset(held))
        for place, held in sorted(holding.items())
    ]
    covered: set[str] = set()
    chosen: dict[tuple[int, int], str] = {}
    used = 0
    # First pass: stretches that bring a name no chosen one holds yet; then the rest.
    for fresh_only in (True, False):
        for place, line, holds in candidates:
            if place in chosen or (fresh_only and holds <= covered):
                continue
            if used + len(line) + 1 > budget:
                continue
            chosen[place] = line
            covered |= holds
            used += len(line) + 1
    return [chosen[place] for place in sorted(chosen)]
