"""Needed-context recall: of the context the agent went on to use, how much it could still see.

    >>> from memstack.bench.needed import needs_per_call, recall_counts
    >>> from memstack.bench.transcripts import model_calls
    >>> history = [
    ...     {"role": "user", "content": "fix the bug"},
    ...     {"type": "function_call", "call_id": "c1", "name": "bash",
    ...      "arguments": '{"command": "grep -rn parse_date src"}'},
    ...     {"type": "function_call_output", "call_id": "c1",
    ...      "output": "src/util/dates.py:41: def parse_date(text):"},
    ...     {"type": "function_call", "call_id": "c2", "name": "bash",
    ...      "arguments": '{"command": "sed -n 30,60p src/util/dates.py"}'},
    ... ]
    >>> needs = needs_per_call(history, model_calls(history), always_visible="")
    >>> [need.token for need in needs[1]]
    ['src/util/dates.py']
    >>> masked = {**history[2], "output": "[omitted]"}
    >>> recall_counts(needs[1], [history[0], history[1], masked])
    (1, 0)
    >>> recall_counts(needs[1], history[:3])
    (1, 1)

At each model call of a real transcript, take what the agent produced next (its message
text and its tool-call arguments) and its salient tokens (``memstack.compaction.salient``).
A token is *needed* when it occurs in the history before the call, in some item other
than the newest user message, and is not visible anyway: tokens found in the system
prompt, the tool schemas or the newest user message are left out, since every strategy
sends those. The agent demonstrably used that context. A strategy's recall at the call
is the share of the needed tokens its view for the call still carries, verbatim or
inside a summary or placeholder; the benchmark sums needed and kept over every call
(micro-average), so long conversations weigh by their calls.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memstack.bench.transcripts import ModelCall
from memstack.compaction.salient import occurs, salient_tokens
from memstack.history import is_user_message, item_type, pair_key

__all__ = ["Need", "item_text", "needs_per_call", "produced_text", "recall_counts"]

Item = Mapping[str, Any]
_NOT_TEXT = frozenset({"type", "id", "call_id", "status", "encrypted_content", "role", "name"})


@dataclass(frozen=True)
class Need:
    """A token the agent used at a call, and the history items (by index) that carried it."""

    token: str
    holders: frozenset[int]


def _strings(value: object, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, Mapping):
        for key, inner in value.items():
            if key not in _NOT_TEXT:
                _strings(inner, out)
    elif isinstance(value, list | tuple):
        for inner in value:
            _strings(inner, out)


def item_text(item: Item) -> str:
    """What the model reads in ``item``: its texts, with tool-call arguments decoded."""
    out: list[str] = []
    for key, value in item.items():
        if key in _NOT_TEXT:
            continue
        if key == "arguments" and isinstance(value, str):
            with contextlib.suppress(ValueError):
                value = json.loads(value)
        _strings(value, out)
    return "\n".join(out)


def produced_text(items: Sequence[Item]) -> str:
    """The agent's own words in one call's output: message text and tool-call arguments."""
    parts = []
    for item in items:
        is_call = pair_key(item) is not None and item_type(item) != "function_call_output"
        if is_call or (item_type(item) == "message" and item.get("role") == "assistant"):
            parts.append(item_text(item))
    return "\n".join(parts)


def needs_per_call(
    history: Sequence[Item], calls: Sequence[ModelCall], *, always_visible: str
) -> list[list[Need]]:
    """For each call, the tokens it used from earlier history (see the module docstring)."""
    texts = [item_text(item) for item in history]
    holders: dict[str, list[int]] = {}
    anyway: dict[str, bool] = {}
    result: list[list[Need]] = []
    newest_user: int | None = None
    scanned = 0
    for call in calls:
        for index in range(scanned, call.start):
            if is_user_message(history[index]):
                newest_user = index
        scanned = call.start
        needs = []
        for token in salient_tokens(produced_text(history[call.start : call.stop])):
            if token not in anyway:
                anyway[token] = occurs(token, always_visible)
                holders[token] = [i for i, text in enumerate(texts) if occurs(token, text)]
            if anyway[token] or (newest_user is not None and newest_user in holders[token]):
                continue
            earlier = frozenset(i for i in holders[token] if i < call.start and i != newest_user)
            if earlier:
                needs.append(Need(token, earlier))
        result.append(needs)
    return result


def recall_counts(
    needs: Sequence[Need],
    view: Sequence[Item],
    *,
    originals: Sequence[int | None] | None = None,
) -> tuple[int, int]:
    """``(needed, kept)`` for one call's view.

    ``originals`` gives, per view item, its index in the history when it is an unchanged
    history item (the caller knows by content); other items (summaries, placeholders)
    are searched as text. Without it every view item is searched.
    """
    if not needs:
        return 0, 0
    indexes = originals if originals is not None else [None] * len(view)
    present = {index for index in indexes if index is not None}
    others = [item_text(item) for item, index in zip(view, indexes, strict=True) if index is None]
    kept = sum(
        1
        for need in needs
        if not need.holders.isdisjoint(present) or any(occurs(need.token, t) for t in others)
    )
    return len(needs), kept
