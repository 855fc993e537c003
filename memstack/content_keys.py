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
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar, cast

__all__ = ["Memo", "content_key"]

V = TypeVar("V")
Item = Mapping[str, Any]


def content_key(item: Item) -> bytes:
    """A 16-byte digest of ``item``'s content, for caches in this process."""
    try:
        data = marshal.dumps(cast("dict[str, Any]", item), 2)
    except ValueError:  # a value marshal cannot write: canonical JSON instead
        data = json.dumps(item, sort_keys=True, default=str).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=16).digest()


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
