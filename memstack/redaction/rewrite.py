"""Apply a text rewrite to every free-text field of an item, and to nothing else.

    >>> from memstack.redaction.rewrite import rewrite_item
    >>> call = {"type": "function_call", "call_id": "c1", "name": "mail",
    ...         "arguments": '{"to": "ann@example.com", "n": 2}'}
    >>> rewrite_item(call, lambda text: text.replace("ann@example.com", "[EMAIL]"))["arguments"]
    '{"to":"[EMAIL]","n":2}'

Ids, ``call_id``s, item types, roles, statuses, tool names and opaque payloads (images,
files, reasoning's ``encrypted_content``) are never touched, so calls and outputs still
pair up. Tool-call ``arguments`` and tool ``output`` strings that hold JSON are parsed,
rewritten value by value and written back as JSON, so they stay valid and escaped text
(``\\n`` inside a PEM key, ``\\u00e9``) is seen as the text it is. A JSON number that a
rewrite changes (a card number sent as an int) becomes a string.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["PROTECTED_KEYS", "rewrite_item", "rewrite_json_text"]

TextRewrite = Callable[[str], str]

PROTECTED_KEYS = frozenset(
    {
        "id",
        "call_id",
        "type",
        "role",
        "status",
        "name",
        "encrypted_content",
        "image_url",
        "file_data",
        "file_id",
        "file_url",
        "server_label",
        "approval_request_id",
        "memstack_pinned",
    }
)
# Fields that usually hold JSON text: tool-call arguments and tool outputs.
_JSON_FIELDS = frozenset({"arguments", "output", "input"})


def rewrite_item(item: Mapping[str, Any], rewrite: TextRewrite) -> dict[str, Any]:
    """A copy of ``item`` with ``rewrite`` applied to each free-text string."""
    return {key: _field(key, value, rewrite) for key, value in item.items()}


def _field(key: str, value: Any, rewrite: TextRewrite) -> Any:
    if key in PROTECTED_KEYS:
        return value
    if isinstance(value, str) and key in _JSON_FIELDS:
        return rewrite_json_text(value, rewrite)
    return _value(value, rewrite)


def _value(value: Any, rewrite: TextRewrite) -> Any:
    if isinstance(value, str):
        return rewrite(value)
    if isinstance(value, Mapping):
        return rewrite_item(value, rewrite)
    if isinstance(value, list):
        return [_value(element, rewrite) for element in value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        text = json.dumps(value)
        changed = rewrite(text)
        return value if changed == text else changed
    return value


def rewrite_json_text(text: str, rewrite: TextRewrite) -> str:
    """``text`` rewritten; JSON containers value by value (keys kept), anything else as text."""
    stripped = text.lstrip()
    if stripped[:1] in ("{", "["):
        try:
            parsed = json.loads(text)
        except ValueError:
            return rewrite(text)
        changed = _json_value(parsed, rewrite)
        if changed == parsed:
            return text  # untouched JSON keeps its exact spelling
        return json.dumps(changed, ensure_ascii=False, separators=(",", ":"))
    return rewrite(text)


def _json_value(value: Any, rewrite: TextRewrite) -> Any:
    if isinstance(value, dict):
        return {key: _json_value(element, rewrite) for key, element in value.items()}
    if isinstance(value, list):
        return [_json_value(element, rewrite) for element in value]
    return _value(value, rewrite)
