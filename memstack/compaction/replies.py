"""Old replies trimmed to the sentences that hold names, verbatim.

    >>> from memstack.compaction.replies import trimmed_reply
    >>> reply = ("Thanks for waiting! I checked everything carefully for you. "
    ...          "Your flight HAT056 leaves EWR on 2024-05-25 at 06:00 and lands at 09:30.\\n"
    ...          "Is there anything else I can help you with today?")
    >>> print(trimmed_reply(reply))
    … Your flight HAT056 leaves EWR on 2024-05-25 at 06:00 and lands at 09:30. …

Why: a support agent's replies are mostly courtesy and explanation around a few facts
(the reservation id, the flight, the date, the amount); once the user has answered, what
the agent goes on to re-use from its own reply is those facts. An old reply keeps the
sentences that hold a salient token (``memstack.compaction.salient``), as written, so
the model still reads its own words around each one; a kept sentence shorter than
``SHORT`` characters brings the next one ("Reservation ID: FQ8APE." alone says little).
Dropped stretches become ``…``. A reply with no names keeps its first sentence. The
result depends on the reply alone, so it reads the same at every later call (the
prompt prefix stays byte-stable).

``restated``: names the view already shows verbatim above the reply (the user's words,
the agent's calls, the key fields of old answers). A sentence whose names are all among
them only repeats what is still in front of the model ("Your flight HAT056 on
2024-05-25" under the reservation that lists it) and is dropped like one without names:

    >>> print(trimmed_reply(reply, restated={"HAT056", "EWR", "2024-05-25", "06:00", "09:30"}))
    Thanks for waiting! …
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

from memstack.compaction.salient import salient_tokens

__all__ = ["SHORT", "reply_names", "trimmed_message", "trimmed_reply"]

#: A kept sentence shorter than this brings its successor along.
SHORT = 24
#: Longest sentence kept when a reply holds no name at all.
FIRST = 160
_GAP = "…"
# A sentence ends at . ! or ? followed by whitespace; each line is split on its own.
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def trimmed_reply(text: str, restated: Collection[str] = ()) -> str | None:
    """``text`` with its sentences that hold no new name left out; None when nothing would go.

    A name is new unless it is in ``restated`` (see the module docstring).
    """
    lines = [line for line in text.split("\n") if line.strip()]
    sentences = [(number, s) for number, line in enumerate(lines) for s in _SENTENCE.split(line)]
    if not sentences:
        return None
    keep = [any(name not in restated for name in salient_tokens(s)) for _, s in sentences]
    if not any(keep):
        first = sentences[0][1]
        return None if len(first) >= len(text) else first[:FIRST] + f" {_GAP}"
    for index in range(len(sentences) - 1):
        if keep[index] and len(sentences[index][1]) < SHORT:
            keep[index + 1] = True
    out = "" if keep[0] else _GAP
    for index, ((number, sentence), kept) in enumerate(zip(sentences, keep, strict=True)):
        if not kept:
            continue
        if index and keep[index - 1]:  # adjacent: the original separator, as one space or line
            out += "\n" if sentences[index - 1][0] != number else " "
        elif out:
            out += " " if out == _GAP else f" {_GAP} "
        out += sentence
    if not keep[-1]:
        out += f" {_GAP}"
    return out if len(out) < len(text) else None


def trimmed_message(
    item: Mapping[str, Any], restated: Collection[str] = ()
) -> dict[str, Any] | None:
    """An assistant message with its text trimmed (``trimmed_reply``); None when it stays.

    The content is a string (as stored by hand) or a list of parts (as the Agents SDK
    stores a model's message: ``{"type": "output_text", "text": …}``); every text part is
    trimmed on its own and every other field is kept, so the item stays a valid input.
    """
    if item.get("role") != "assistant":
        return None
    content = item.get("content")
    if isinstance(content, str):
        short = trimmed_reply(content, restated)
        return None if short is None else {**item, "content": short}
    if not isinstance(content, list):
        return None
    parts: list[Any] = []
    changed = False
    for part in content:
        text = part.get("text") if isinstance(part, Mapping) else None
        short = trimmed_reply(text, restated) if isinstance(text, str) else None
        if short is None:
            parts.append(part)
        else:
            parts.append({**part, "text": short})
            changed = True
    return {**item, "content": parts} if changed else None


def reply_names(item: Mapping[str, Any]) -> list[str]:
    """The salient tokens of an assistant message's text (what ``restated`` is checked for)."""
    content = item.get("content")
    if isinstance(content, str):
        return salient_tokens(content)
    if not isinstance(content, list):
        return []
    texts = [p.get("text") for p in content if isinstance(p, Mapping)]
    return salient_tokens("\n".join(t for t in texts if isinstance(t, str)))
