"""Salient tokens: the parts of a text an agent re-uses verbatim (paths, names, numbers, quotes).

    >>> from memstack.compaction.salient import salient_tokens
    >>> salient_tokens('grep -n "def save" src/app/models.py | sed -n 120,140p')
    ['def save', 'src/app/models.py', '120', '140']
    >>> salient_tokens("Flight HAT001 from JFK for sara_doe_496 on 2024-05-01, the usual seat.")
    ['HAT001', 'JFK', 'sara_doe_496', '2024-05-01']
    >>> salient_tokens("self._cache.get(key) returns maxSize or None")
    ['self._cache.get', 'maxSize']

A salient token is, in order of precedence at each position of the text:

- a **quoted string**: the text between ``"…"``, ``'…'`` or backticks on one line, 3–100
  characters after stripping, with at least one letter or digit (a single quote must not
  touch a letter on its outer side, so "don't" opens nothing);
- a **path**: characters ``[A-Za-z0-9_.-]`` with at least one ``/`` between them
  (``src/a.py``, ``./run.sh``, ``/tmp/x``), trailing dots and dashes dropped;
- a **dotted name**: identifiers joined by dots (``models.py``, ``np.array``,
  ``self._cache.get``), at least 4 characters;
- an **identifier** that looks like code, at least 3 characters: it contains ``_``, mixes
  letters and digits (``HAT001``, ``utf8``), is camelCase (``maxSize``), or is all capitals
  (``JFK``, ``README``) — plain words ("Save", "column") are not salient;
- a **number** of at least 3 characters, digits joined by ``.``, ``:`` or ``-``
  (``120``, ``3.14``, ``2024-05-01``, ``12:30``) — 0–99 are everywhere and say little.

Quoted strings are also scanned for the other kinds. Tokens are returned once each, in
order of first appearance. ``occurs(token, text)`` is the matching rule used with them:
the token is in the text and not glued to a longer word on either side (``100`` is not in
``1000``; ``models.py`` is in ``app/models.py``).
"""

from __future__ import annotations

import functools
import re

__all__ = ["occurs", "salient_tokens"]

_QUOTED = re.compile(
    r'"([^"\n]{3,102})"'
    r"|(?<![A-Za-z])'([^'\n]{3,102})'(?![A-Za-z])"
    r"|`([^`\n]{3,102})`"
)
_TOKEN = re.compile(
    r"(?P<path>[\w.-]*(?:/[\w.-]+)+/?)"
    r"|(?P<dotted>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)"
    r"|(?P<word>[A-Za-z_]\w*)"
    r"|(?P<number>(?<![\w.])\d+(?:[.:-]\d+)*)"
)
_CAMEL = re.compile(r"[a-z][A-Z]")
_ALNUM = re.compile(r"[A-Za-z0-9]")


def _code_like(word: str) -> bool:
    if len(word) < 3:
        return False
    if "_" in word:
        rest = word.replace("_", "")
        return bool(rest) and not rest.isdigit()  # a letter somewhere
    if word.isalpha():
        return word.isupper() or bool(_CAMEL.search(word))
    return True  # letters and digits


def _accept(kind: str, text: str) -> str | None:
    if kind == "path":
        text = text.rstrip(".-")
        return text if len(text) >= 3 and "/" in text and _ALNUM.search(text) else None
    if kind == "dotted":
        return text if len(text) >= 4 else None
    if kind == "word":
        return text if _code_like(text) else None
    return text if len(text) >= 3 else None


def salient_tokens(text: str) -> list[str]:
    """The salient tokens of ``text``, each once, in order of first appearance."""
    return list(_salient(text))


@functools.lru_cache(maxsize=4096)
def _salient(text: str) -> tuple[str, ...]:
    # Cached: masking asks again for every old output at every model call.
    found: dict[str, None] = {}
    spans: list[tuple[int, str]] = []
    for match in _QUOTED.finditer(text):
        inner = next(g for g in match.groups() if g is not None).strip()
        if 3 <= len(inner) <= 100 and _ALNUM.search(inner):
            spans.append((match.start(), inner))
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup
        assert kind is not None
        token = _accept(kind, match.group())
        if token is not None:
            spans.append((match.start(), token))
    for _, token in sorted(spans, key=lambda span: span[0]):
        found.setdefault(token, None)
    return tuple(found)


def occurs(token: str, text: str) -> bool:
    """``token`` is in ``text``, not glued to a letter, digit or ``_`` on either side."""
    start = text.find(token)
    while start >= 0:
        end = start + len(token)
        before = text[start - 1] if start else " "
        after = text[end] if end < len(text) else " "
        if not (before.isalnum() or before == "_") and not (after.isalnum() or after == "_"):
            return True
        start = text.find(token, start + 1)
    return False
