"""JSON texts as stores hold them, parsed by the C scanner itself.

    >>> from memstack.json_text import loads, scan
    >>> loads('{"role":"user","content":"hi"}')["content"]
    'hi'
    >>> loads(' [1] ')  # whitespace around: json.loads's way, same answer
    [1]
    >>> scan('[{"n":1},{"role":"user"}]', 1)
    ({'n': 1}, 8)

A read parses one text per stored row and one per opened envelope: ``json.loads`` wraps
the scanner in three Python calls and two regular-expression matches, about a third of
what parsing a short item costs. Texts written without surrounding whitespace (every
store's, the SDK's included) go to the scanner directly; any other text, valid or not,
gets ``json.loads``'s answer, its error included.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = ["loads", "scan"]

# What json.loads calls, in C (typeshed leaves the attribute out).
_scan_once: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def loads(text: str) -> Any:
    """``json.loads(text)``: the same value, or the same ``ValueError``."""
    try:
        value, end = _scan_once(text, 0)
    except StopIteration:
        return json.loads(text)  # not a value at 0: json.loads says why (or skips spaces)
    if end != len(text):
        return json.loads(text)  # trailing text: spaces, or "Extra data"
    return value


def scan(text: str, at: int) -> tuple[Any, int]:
    """The JSON value that starts exactly at ``text[at]`` and the index just after it;
    ``ValueError`` when none does."""
    try:
        return _scan_once(text, at)
    except StopIteration:
        raise ValueError(f"no JSON value at index {at}") from None
