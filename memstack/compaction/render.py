"""What a summariser reads: the covered items as a role-tagged transcript.

    >>> from memstack.compaction.render import render_transcript
    >>> print(render_transcript([
    ...     {"role": "user", "content": "Weather in Oslo?"},
    ...     {"type": "function_call", "call_id": "c1", "name": "weather",
    ...      "arguments": '{"city": "Oslo"}'},
    ...     {"type": "function_call_output", "call_id": "c1", "output": "7°C, rain"},
    ... ]))
    USER: Weather in Oslo?
    CALL weather({"city": "Oslo"}) [c1]
    OUTPUT weather [c1]: 7°C, rain

Tool calls keep their name and full arguments and their outputs stay tool outputs: a
summariser that is shown a tool result as something the user said will report it as
the user's words.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from memstack.history import CALL_TO_OUTPUT, is_output, item_type, pair_key

__all__ = ["DEFAULT_INSTRUCTIONS", "message_text", "render_prompt", "render_transcript"]

Item = Mapping[str, Any]

DEFAULT_INSTRUCTIONS = """\
You compact the history of a conversation between a user and an AI assistant that uses \
tools, so the assistant can continue without the full transcript. Write a dense, faithful \
summary in the language of the conversation, under these headings:

## Goal
What the user wants, with constraints and preferences.
## Progress
What was done, in order: decisions, results, and the tool calls that mattered (tool, key \
arguments, what they showed).
## Facts
Identifiers, names, numbers, file paths, errors and values the assistant will need again, \
copied exactly.
## Open
Unanswered questions and next steps.

Use only the transcript and the previous summary it extends; keep everything from the \
previous summary that still matters. Never invent. In the transcript, USER, ASSISTANT, \
SYSTEM and DEVELOPER lines are messages; CALL lines are tool calls the assistant made and \
OUTPUT lines are what those tools returned (not messages from the user)."""


def message_text(content: object) -> str:
    """The text of a message's content: a string, or the text of each part."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return "" if content is None else json.dumps(content, default=str)
    parts: list[str] = []
    for part in content:
        if not isinstance(part, Mapping):
            parts.append(str(part))
            continue
        kind = part.get("type")
        if isinstance(part.get("text"), str):
            parts.append(part["text"])
        elif isinstance(part.get("refusal"), str):
            parts.append(f"[refusal] {part['refusal']}")
        elif kind == "input_file":
            parts.append(f"[file {part.get('filename') or part.get('file_id') or ''}]".strip())
        else:
            parts.append(f"[{kind or 'part'}]")
    return "\n".join(parts)


def _clip(text: str, limit: int | None) -> str:
    if limit is None or len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    omitted = len(text) - head - tail
    return f"{text[:head]}\n… [{omitted} characters omitted] …\n{text[-tail:]}"


def _payload(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(p, Mapping) for p in value):
        return message_text(value)
    return json.dumps(value, ensure_ascii=False, default=str)


def _call_text(item: Item) -> str:
    kind = item_type(item)
    name = item.get("name") or kind
    if "arguments" in item:
        args = _payload(item["arguments"])
    elif "input" in item:
        args = _payload(item["input"])
    else:
        fields = {k: v for k, v in item.items() if k not in ("type", "id", "call_id", "status")}
        args = json.dumps(fields, ensure_ascii=False, default=str)
    return f"{name}({args})"


def render_item(
    item: Item, names: Mapping[tuple[str, str], str], max_output_chars: int | None
) -> str:
    """One item as transcript text; ``names`` maps a call's pair key to its tool name."""
    kind = item_type(item)
    key = pair_key(item)
    ident = f" [{key[1]}]" if key is not None else ""
    if kind == "message":
        role = str(item.get("role") or "message").upper()
        return f"{role}: {message_text(item.get('content'))}"
    if (key is not None and not is_output(item)) or kind in CALL_TO_OUTPUT:
        return f"CALL {_call_text(item)}{ident}"
    if is_output(item):
        name = names.get(key) if key is not None else None
        body = item.get("output", {k: v for k, v in item.items() if k not in ("type",)})
        return f"OUTPUT {name or kind}{ident}: {_clip(_payload(body), max_output_chars)}"
    if kind == "reasoning":
        summary = item.get("summary")
        return f"REASONING: {message_text(summary) if summary else '[not readable]'}"
    if kind == "compaction":
        return "EARLIER CONTEXT: [compacted by the provider; not readable]"
    fields = {k: v for k, v in item.items() if k not in ("type", "id", "status")}
    return f"{kind.upper()}: {_clip(json.dumps(fields, ensure_ascii=False, default=str), 2000)}"


def render_transcript(items: Sequence[Item], *, max_output_chars: int | None = None) -> str:
    """Every item, oldest first, one entry per item; long tool outputs clipped in the middle."""
    names: dict[tuple[str, str], str] = {}
    for item in items:
        key = pair_key(item)
        if key is not None and not is_output(item):
            names[key] = str(item.get("name") or item_type(item))
    return "\n".join(render_item(item, names, max_output_chars) for item in items)


def render_prompt(previous: str | None, transcript: str) -> str:
    """The user message sent to a summariser."""
    before = previous.strip() if previous else "(none: this is the start of the conversation)"
    return (
        f"PREVIOUS SUMMARY:\n{before}\n\n"
        f"TRANSCRIPT TO ADD (oldest first):\n{transcript}\n\n"
        "Write the updated summary now."
    )
