"""Process-local cache keys for an item's content, and a bounded memo keyed by them.

    >>> from memstack.content_keys import Memo, content_key
    >>> content_key({"a": 1, "b": 2}) == content_key({"b": 2, "a": 1})
    False
    >>> lengths: Memo[int] = Memo(100)
    >>> lengths.get_or_compute({"role": "user", "content": "hi"}, lambda item: len(item["content"]))
    2

Every read hands a layer fresh dicts, mostly the same content as the last read's, and the
values derived from them (a token count, a canonical content hash) are pure functions of
that content. ``marshal`` format 2 writes a dict's content without back-references (later
formats write references that depend on reference counts, not content), and its blake2b
digest costs a quarter of canonical JSON. The keys hold within one process only (marshal
output may change between Python versions) and depend on key order: a reordered copy is a
miss that computes again, never a wrong answer.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Generic, TypeVar, cast

__all__ = ["Memo", "content_key", "known_keys", "note_key", "noting", "packed_key"]

V = TypeVar("V")
Item = Mapping[str, Any]


def content_key(item: Item) -> bytes:
    """A 16-byte digest of ``item``'s content, for caches in this process."""
    known = _known_keys.get()
    if known is not None and (hint := known.get(id(item))) is not None and hint[0] is item:
        return hint[1]
    try:
        data = marshal.dumps(cast("dict[str, Any]", item), 2)
    except ValueError:  # a value marshal cannot write: canonical JSON instead
        data = json.dumps(item, sort_keys=True, default=str).encode("utf-8", "surrogatepass")
    return packed_key(data)


def packed_key(data: bytes) -> bytes:
    """The content key of an item whose ``marshal`` format-2 bytes are ``data``."""
    return hashlib.blake2b(data, digest_size=16).digest()


# Keys already known for items built during one read of a stack (``known_keys``).
_known_keys: ContextVar[dict[int, tuple[object, bytes]] | None] = ContextVar(
    "memstack_known_keys", default=None
)


@contextmanager
def known_keys() -> Iterator[None]:
    """Within this block, keys given to ``note_key`` answer ``content_key`` at once.

    A layer that builds items from bytes it already holds (encryption rebuilds each
    item from cached ``marshal`` bytes) knows their keys without hashing. The notes live
    only as long as the block, one read of a stack whose layers never alter what they
    read: nothing can change an item between its note and its use.
    """
    token = _known_keys.set({})
    try:
        yield
    finally:
        _known_keys.reset(token)


def noting() -> bool:
    """True inside ``known_keys()``: a key worth knowing may be noted."""
    return _known_keys.get() is not None


def note_key(item: object, key: bytes) -> None:
    """``key`` is the content key of ``item`` (inside ``known_keys()``; else ignored)."""
    known = _known_keys.get()
    if known is not None:
        known[id(item)] = (item, key)


class Memo(Generic[V]):
    """A least-recently-used map from item content to a value derived from it."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._values: OrderedDict[bytes, V] = OrderedDict()
        # Threads with their own event loops may share one stack: an LRU update is two steps.
        self._lock = threading.Lock()

    def get_or_compute(self, item: Item, compute: Callable[[Item], V]) -> V:
        key = content_key(item)
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]
        value = compute(item)
        if self.size:
            with self._lock:
                self._values[key] = value
                if len(self._values) > self.size:
                    self._values.popitem(last=False)
        return value

    def __len__(self) -> int:
        return len(self._values)
