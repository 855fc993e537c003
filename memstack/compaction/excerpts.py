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
the first name it holds, until ``budget`` characters are used; lines holding names
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


def _clip(line: str, name: str, width: int) -> str:
    line = line.strip()
    if len(line) <= width:
        return line
    at = max(0, line.find(name) - width // 3)
    return line[at : at + width]


def excerpt(
    text: str, names: Sequence[str], *, budget: int, width: int = LINE_CHARS
) -> list[str]:
    """Lines of ``text`` holding one of ``names`` (see the module docstring)."""
    if budget <= 0 or not names:
        return []
    lines = text.split("\n")
    starts = list(itertools.accumulate((len(line) + 1 for line in lines[:-1]), initial=0))
    holding: dict[int, list[str]] = {}
    for name in names:  # one scan of the text per name, not one per line
        at = text.find(name)
        while at >= 0:
            number = bisect.bisect_right(starts, at) - 1
            if occurs(name, lines[number]) and name not in holding.setdefault(number, []):
                holding[number].append(name)
            at = text.find(name, starts[number] + len(lines[number]) + 1)
    candidates = [
        (number, _clip(lines[number], held[0], width), frozenset(held))
        for number, held in sorted(holding.items())
        if held
    ]
    covered: set[str] = set()
    chosen: dict[int, str] = {}
    used = 0
    # First pass: lines that bring a name no chosen line holds yet; then the rest.
    for fresh_only in (True, False):
        for number, line, held in candidates:
            if number in chosen or (fresh_only and held <= covered):
                continue
            if used + len(line) + 1 > budget:
                continue
            chosen[number] = line
            covered |= held
            used += len(line) + 1
    return [chosen[number] for number in sorted(chosen)]
