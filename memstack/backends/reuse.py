"""Values read before, reused while their stored text is unchanged.

    >>> from memstack.backends.reuse import Reuse
    >>> reuse = Reuse()
    >>> first = reuse.value(7, '{"role": "user", "content": "hi"}')
    >>> reuse.value(7, '{"role": "user", "content": "hi"}') is first
    True
    >>> reuse.value(7, '{"role": "user", "content": "bye"}') is first
    False

A tail read returns mostly the rows the last one returned. Parsing them again is most of
what a bare read costs, and every layer above then re-derives what it derived before. A
store adapter that reads its rows raw (id and stored text) hands back, for a row whose
text is what it was, the very object it returned last time: parsing is skipped, and a
layer above can memoise by identity (``Identity``). The stored text is compared whole on
every hit, so another process's write, an in-place rewrite and a reused row id are all
misses, never a stale value. The objects are shared between reads: whoever asks for reuse
must never alter them, nor hand them to code that might.

Memos by identity keep their objects alive, so they are bounded by what those objects
hold: ``Reuse.derived`` keeps a derived value only while its row's value is held, and
``Identity`` is weighed by the caller. Rows too large to hold, and stores that parse
afresh, leave nothing behind.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar, cast

__all__ = ["Identity", "Reuse", "newest_values"]

V = TypeVar("V")
_UNSET: Any = object()


class Reuse:
    """Row id -> (stored text, parsed value), bounded by the characters it holds."""

    def __init__(self, max_chars: int = 8 << 20) -> None:
        self.max_chars = max_chars
        self._rows: dict[Any, tuple[str, Any]] = {}
        # id of each value held -> [value, what was derived from it]; gone with its row
        self._held: dict[int, list[Any]] = {}
        self._chars = 0
        self._lock = threading.Lock()  # threads with their own loops may share one stack

    def value(self, row_id: Any, text: str) -> Any:
        """The parsed value of ``text``, stored under ``row_id``; ``ValueError`` if not JSON."""
        known = self._rows.get(row_id)
        if known is not None and known[0] == text:
            return known[1]
        value = json.loads(text)
        if len(text) <= self.max_chars // 8:  # one huge row must not evict a whole tail
            self._put(row_id, text, value)
        return value

    def holds(self, value: object) -> bool:
        """True when ``value`` is one this holds for its row: read-only, and unchanged while
        it is seen again (a value a store hands back otherwise may be the store's own)."""
        slot = self._held.get(id(value))
        return slot is not None and slot[0] is value

    def derived(self, value: object, derive: Callable[[Any], V]) -> V:
        """``derive(value)``, memoised while this holds ``value`` for its row."""
        slot = self._held.get(id(value))
        if slot is None or slot[0] is not value:
            return derive(value)  # not held: nothing would bound a memo of it
        if slot[1] is _UNSET:
            slot[1] = derive(value)
        return cast("V", slot[1])

    def values(self, rows: Sequence[Sequence[Any]], skip: tuple[type[Exception], ...]) -> list[Any]:
        """Newest-first ``(id, text)`` rows as values, oldest first.

        A row whose parse raises one of ``skip`` is left out, as the store's own read
        leaves it out (the SDK's stores skip rows that are not JSON).
        """
        values = []
        for row_id, text in reversed(rows):
            try:
                values.append(self.value(row_id, text))
            except skip:
                continue
        return values

    def _put(self, row_id: Any, text: str, value: Any) -> None:
        with self._lock:
            old = self._rows.pop(row_id, None)
            if old is not None:
                self._drop(old)
            self._rows[row_id] = (text, value)
            self._held[id(value)] = [value, _UNSET]
            self._chars += len(text)
            while self._chars > self.max_chars:  # the oldest put goes first: a tail stays
                self._drop(self._rows.pop(next(iter(self._rows))))

    def _drop(self, entry: tuple[str, Any]) -> None:
        text, value = entry
        self._chars -= len(text)
        self._held.pop(id(value), None)

    def __len__(self) -> int:
        return len(self._rows)


async def newest_values(
    fetch: Callable[[int], Awaitable[Sequence[Sequence[Any]]]],
    n: int,
    reuse: Reuse,
    *,
    skip: tuple[type[Exception], ...] = (ValueError,),
) -> list[Any]:
    """The newest ``n`` values of the ``(id, text)`` rows ``fetch(window)`` reads, newest first.

    As the SDK's reads do, ``n`` counts rows that parse: the window doubles while rows
    left out keep it short.
    """
    window = n
    while True:
        rows = await fetch(window)
        values = reuse.values(rows, skip)
        if len(values) >= n or len(rows) < window:
            return values[-n:]
        window *= 2


class Identity(Generic[V]):
    """A value derived from an object, memoised while that very object is seen again.

    For objects a ``Reuse`` hands back: an identity check instead of hashing content.
    Each entry keeps its object alive, so an id is never reused while it is cached; the
    map is emptied when it grows past ``size`` entries or ``max_chars`` (each entry
    weighs what ``put`` is told), and an entry over an eighth of that is not kept.
    """

    def __init__(self, size: int = 4096, max_chars: int = 16 << 20) -> None:
        self.size = size
        self.max_chars = max_chars
        self._values: dict[int, tuple[object, V]] = {}
        self._chars = 0

    def get(self, obj: object) -> V | None:
        known = self._values.get(id(obj))
        return known[1] if known is not None and known[0] is obj else None

    def put(self, obj: object, value: V, chars: int = 0) -> V:
        if chars > self.max_chars // 8:
            return value
        if len(self._values) >= self.size or self._chars + chars > self.max_chars:
            self._values, self._chars = {}, 0
        self._values[id(obj)] = (obj, value)
        self._chars += chars
        return value
