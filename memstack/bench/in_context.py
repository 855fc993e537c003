"""Needed-context recall *in context*: a needed token counts only with the text it stood in.

    >>> from memstack.bench.in_context import in_context_counts, normalized
    >>> from memstack.bench.needed import Need
    >>> texts = [normalized("src/util/dates.py:41: def parse_date(text, fmt=ISO_FORMAT):")]
    >>> need = Need("ISO_FORMAT", frozenset({0}))
    >>> names = {"role": "developer", "content": "Names: parse_date ISO_FORMAT 41"}
    >>> in_context_counts([need], [names], [None], texts)    # a bag of names: not kept
    (1, 0)
    >>> line = {"role": "developer",
    ...         "content": "… dates.py:41: def parse_date(text, fmt=ISO_FORMAT):"}
    >>> in_context_counts([need], [line], [None], texts)     # the line it stood in: kept
    (1, 1)

The lenient measure (``memstack.bench.needed``) keeps a need when its token appears
anywhere in the view, so a list of names copied from a masked output scores like the
output itself. The agent cannot edit from a bare ``120`` or ``parse_date``: it needs
the line they stood in. Here a need (a token and the earlier history items that held it)
is kept at a call when the view

1. holds one of those history items **unchanged** (found by content, as the replay
   does), or
2. has another item (a summary, a placeholder, an excerpt) whose text shows the token
   **inside a stretch of a holder's original text**: around one occurrence of the token
   in the view, the characters before and after it agree with the characters around an
   occurrence of the token in the holder for at least ``CONTEXT_CHARS`` characters in all
   (split between the two sides in any way), or — for a holder with fewer characters
   besides the token — for all of them.

Texts are compared after whitespace is collapsed (runs of spaces, tabs and newlines
become one space, the ends are stripped: ``normalized``), so a summary that flattens a
line onto one still quotes it. Occurrences follow ``memstack.compaction.salient.occurs``
(not glued to a longer word). Stretches never span two view items. A need whose only
evidence is the token between other names (``parse_date ISO_FORMAT 41``) is not kept,
unless those neighbours were its neighbours in the original text too.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from memstack.bench.needed import Need, item_text

__all__ = ["CONTEXT_CHARS", "in_context_counts", "normalized", "shown_in_context"]

#: Characters of original text around a token that a view must show with it.
CONTEXT_CHARS = 32

_SPACE = re.compile(r"\s+")


def normalized(text: str) -> str:
    """``text`` with every run of whitespace one space, ends stripped."""
    return _SPACE.sub(" ", text).strip()


def _glued(char: str) -> bool:
    return char.isalnum() or char == "_"


def _occurrences(token: str, text: str) -> Iterator[int]:
    """Start of every occurrence of ``token`` in ``text`` not glued to a longer word."""
    start = text.find(token)
    end_of = len(token)
    while start >= 0:
        end = start + end_of
        before = text[start - 1] if start else " "
        after = text[end] if end < len(text) else " "
        if not _glued(before) and not _glued(after):
            yield start
        start = text.find(token, start + 1)


def _agreement(holder: str, p: int, view: str, q: int, size: int, cap: int) -> int:
    """Characters around the token at ``holder[p]`` and ``view[q]`` that agree (up to cap)."""
    left = 0
    while left < cap and left < p and left < q and holder[p - left - 1] == view[q - left - 1]:
        left += 1
    right = 0
    hp, vq = p + size, q + size
    limit = cap - left
    while (
        right < limit
        and hp + right < len(holder)
        and vq + right < len(view)
        and holder[hp + right] == view[vq + right]
    ):
        right += 1
    return left + right


def shown_in_context(
    token: str, holders: Sequence[str], view_text: str, *, context: int = CONTEXT_CHARS
) -> bool:
    """Whether ``view_text`` shows ``token`` inside a stretch of one of ``holders``.

    All texts are expected ``normalized``; see the module docstring for the rule.
    """
    seen = list(_occurrences(token, view_text))
    if not seen:
        return False
    size = len(token)
    for holder in holders:
        wanted = min(context, len(holder) - size)
        for p in _occurrences(token, holder):
            for q in seen:
                if _agreement(holder, p, view_text, q, size, wanted) >= wanted:
                    return True
    return False


def in_context_counts(
    needs: Sequence[Need],
    view: Sequence[Mapping[str, Any]],
    originals: Sequence[int | None],
    texts: Sequence[str],
    *,
    context: int = CONTEXT_CHARS,
) -> tuple[int, int]:
    """``(needed, kept in context)`` for one call's view.

    ``originals`` gives, per view item, its history index when it is an unchanged history
    item (else None); ``texts`` the ``normalized`` ``item_text`` of every history item.
    """
    if not needs:
        return 0, 0
    present = {index for index in originals if index is not None}
    others: list[str] | None = None
    kept = 0
    for need in needs:
        if not need.holders.isdisjoint(present):
            kept += 1
            continue
        if others is None:  # only built when some need is not held by an unchanged item
            others = [
                normalized(item_text(item))
                for item, index in zip(view, originals, strict=True)
                if index is None
            ]
        holders = [texts[index] for index in sorted(need.holders)]
        if any(shown_in_context(need.token, holders, text, context=context) for text in others):
            kept += 1
    return len(needs), kept
