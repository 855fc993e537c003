"""Stored rows parsed once for the whole process: the source of every stack read.

    >>> from memstack.backends.rows import parse, parsed
    >>> value, key = parse('{"role": "user", "content": "hi"}')
    >>> value["content"], len(key)
    ('hi', 16)
    >>> first = parsed("demo", "s1", 7, '{"role": "user", "content": "hi"}')
    >>> parsed("demo", "s1", 7, '{"role": "user", "content": "hi"}')[0] is first[0]
    True

Parsing JSON rows is most of what a bare read costs. ``newest_rows`` keeps what a
session's read parsed in the process cache (``memstack.incremental``), by each row's
content key (a 16-byte digest of its stored text), and the next read of that session
parses only the rows whose key it has not seen: another process's write, an in-place
rewrite and a reused row id change the text and are parsed again, never answered stale.
The keys go up with the values, so counts and placeholders derived from them are looked
up too. Only values and keys are kept (``cache.compact``: their dict keys shared), not
the texts: a kept read weighs them, and nothing else keeps them, so the budget counts
them once; a read too big for one entry keeps its rows one by one instead (``parsed``),
under the store, session and row id, compared with the whole text. Values are shared:
read-only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Any

import memstack.cache as cache
import memstack.incremental as incremental
import memstack.json_text as json_text
from memstack.backends.capabilities import Tail

__all__ = ["newest_rows", "parse", "parsed"]


_LEFT_OUT: Any = object()  # a row that does not parse (a kept read's result for it)


def text_key(text: str) -> bytes:
    """A stored row's content key: a digest of its text."""
    hasher = _EMPTY.copy()  # half the cost of making a hasher, for the same digest
    hasher.update(text.encode("utf-8", "surrogatepass"))
    return hasher.digest()


_EMPTY = hashlib.blake2b(digest_size=16)  # copied, never updated itself


def parse(text: str) -> tuple[Any, bytes]:
    """The value of one stored row and its content key; ``ValueError`` if not JSON."""
    return cache.compact(json_text.loads(text)), text_key(text)


def parsed(store: Hashable, session_id: str, row_id: Any, text: str) -> tuple[Any, bytes]:
    """``parse``, kept row by row: for a read too big to be kept whole (the cache keeps no
    entry over an eighth of its budget), and taken only for the same text, whole."""
    slot = ("row", store, session_id, row_id)
    known = cache.get(slot)
    if known is not cache.MISSING and known[0] == text:
        return known[1], known[2]
    value, key = parse(text)
    cache.put(slot, (text, value, key), weight=_weight([text]))
    return value, key


def _weight(texts: Sequence[str]) -> int:
    """What a kept read of ``texts`` holds: the texts (its keys) and their values."""
    chars = sum(map(len, texts))
    return chars + 64 * len(texts) + cache.parsed_weight(chars, len(texts))


async def newest_rows(
    fetch: Callable[[int, int], Awaitable[Sequence[Sequence[Any]]]],
    n: int,
    *,
    store: Hashable,
    session_id: str,
    skip: tuple[type[Exception], ...] = (ValueError,),
    whole_up_to: int = 0,
) -> Tail:
    """The newest ``n`` values of the ``(id, text)`` rows ``fetch(window, whole_up_to)``
    reads, newest first.

    As the SDK's reads do, ``n`` counts rows that parse: the window doubles while rows
    left out keep it short. ``fetch(window, m)`` with ``m > 0`` reads every row instead
    when the session holds at most ``m``: more rows than the window, or fewer, are then
    the whole session; exactly as many may not be.
    """
    window = n
    slot = ("rows read", store, session_id, skip)  # what a row left out depends on too
    while True:
        rows = await fetch(window, whole_up_to)
        whole_up_to = 0
        texts = [text for _, text in reversed(rows)]
        # Each row's content key (a digest of its text) names it: the rows the last read
        # of this session parsed are found by key (``memstack.incremental``), and only
        # their values are kept, not the texts (a text weighs as much as its value).
        row_keys = list(map(text_key, texts))
        known = incremental.previous(slot, row_keys)
        weight = cache.parsed_weight(sum(map(len, texts)), len(texts))
        weight += incremental.KEY_WEIGHT * len(texts)
        whole = weight <= cache.max_bytes() // 8  # else kept row by row
        values: list[Any] = []
        keys: list[bytes | None] = []
        for index, (row_id, text) in enumerate(reversed(rows)):
            found = known[index]
            if found is incremental.MISSING:
                try:
                    found = known[index] = (
                        cache.compact(json_text.loads(text))
                        if whole
                        else parsed(store, session_id, row_id, text)[0]
                    )
                except skip:
                    known[index] = _LEFT_OUT
                    continue
            elif found is _LEFT_OUT:
                continue
            values.append(found)
            keys.append(row_keys[index])
        if whole:  # one entry holds the values, and weighs them
            incremental.keep(slot, row_keys, known, weight=weight)
        if len(rows) > window:  # an adaptive read took the whole session
            return Tail(values, [None] * len(values), keys, complete=True)
        if len(values) >= n or len(rows) < window:
            start = max(0, len(values) - n)
            complete = len(rows) < window and start == 0
            return Tail(values[start:], [None] * (len(values) - start), keys[start:], complete)
        window *= 2
