"""Stored rows parsed once for the whole process: the source of every stack read.

    >>> from memstack.backends.rows import parsed
    >>> first = parsed("demo", "s1", 7, '{"role": "user", "content": "hi"}')
    >>> parsed("demo", "s1", 7, '{"role": "user", "content": "hi"}')[0] is first[0]
    True
    >>> parsed("demo", "s1", 7, '{"role": "user", "content": "bye"}')[0] is first[0]
    False

Parsing JSON rows is most of what a bare read costs. An adapter that reads a tail as raw
``(id, text)`` rows finds each row's value in the process cache (``memstack.cache``) under
the store, session and row id, and takes it only when the stored text is the same, whole:
another process's write, an in-place rewrite and a reused row id are misses, never a
stale value. The value comes with its content key (a digest of the text), so counts and
placeholders derived from it are looked up too. Values are shared: read-only.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Any

import memstack.cache as cache
import memstack.incremental as incremental
from memstack.backends.capabilities import Tail

__all__ = ["newest_rows", "parsed"]

# A parsed JSON value holds about two and a half times its text in objects, and the text
# is kept too: measured with tracemalloc over production-stack reads of real transcripts
# (the weights of a full cache then cover what it holds: 223 MB held, 225 MB weighed).
_WEIGHT_PER_CHAR = 4


def parsed(store: Hashable, session_id: str, row_id: Any, text: str) -> tuple[Any, bytes]:
    """The value of one stored row and its content key; ``ValueError`` if not JSON."""
    slot = ("row", store, session_id, row_id)
    known = cache.get(slot)
    if known is not cache.MISSING and known[0] == text:
        return known[1], known[2]
    value = json.loads(text)
    key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
    cache.put(slot, (text, value, key), weight=len(text) * _WEIGHT_PER_CHAR)
    return value, key


async def newest_rows(
    fetch: Callable[[int], Awaitable[Sequence[Sequence[Any]]]],
    n: int,
    *,
    store: Hashable,
    session_id: str,
    skip: tuple[type[Exception], ...] = (ValueError,),
) -> Tail:
    """The newest ``n`` values of the ``(id, text)`` rows ``fetch(window)`` reads, newest first.

    As the SDK's reads do, ``n`` counts rows that parse: the window doubles while rows
    left out keep it short.
    """
    window = n
    slot = ("rows read", store, session_id, skip)  # what a row left out depends on too
    while True:
        rows = await fetch(window)
        texts = [text for _, text in reversed(rows)]
        # The rows the last read of this session parsed, by their text (``memstack.incremental``).
        known = incremental.previous(slot, texts)
        values: list[Any] = []
        keys: list[bytes | None] = []
        for index, (row_id, text) in enumerate(reversed(rows)):
            found = known[index]
            if found is incremental.MISSING:
                try:
                    found = known[index] = parsed(store, session_id, row_id, text)
                except skip:
                    known[index] = None
                    continue
            elif found is None:
                continue
            values.append(found[0])
            keys.append(found[1])
        incremental.keep(slot, texts, known)
        if len(values) >= n or len(rows) < window:
            start = max(0, len(values) - n)
            complete = len(rows) < window and start == 0
            return Tail(values[start:], [None] * (len(values) - start), keys[start:], complete)
        window *= 2
