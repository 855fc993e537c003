"""Content keys: what a cache of values derived from an item is keyed by, in this process.

    >>> from memstack.content_keys import content_key, derived_key
    >>> content_key({"a": 1, "b": 2}) == content_key({"b": 2, "a": 1})
    False
    >>> key = content_key({"role": "user", "content": "hi"})
    >>> derived_key(key, b"ttl") != key
    True

Every read hands a layer mostly the same content as the last read did, and what it derives
from an item (a token count, a placeholder) is a pure function of that content. A key says
"equal content": equal keys mean equal items. ``content_key`` hashes an item's ``marshal``
format-2 bytes (its content without back-references; a quarter of canonical JSON's cost);
a read that starts from stored rows knows a key without hashing the item (a digest of the
row's text, ``memstack.backends.rows``), and a layer that maps each item by a pure function
(unwrapping a TTL record, opening an envelope) gives the result ``derived_key(key, tag)``:
the same row read through different layers never shares a key with what it holds. Keys
hold within one process only (marshal output may change between Python versions) and
depend on key order: a reordered copy is a miss, never a wrong answer.
"""

from __future__ import annotations

import hashlib
import json
import marshal
from collections.abc import Mapping, Sequence
from typing import Any, cast

__all__ = ["content_key", "derived_key", "derived_keys", "key_of", "keyed_by"]

Item = Mapping[str, Any]


def content_key(item: Item) -> bytes:
    """A 16-byte digest of ``item``'s content, for caches in this process."""
    try:
        data = marshal.dumps(cast("dict[str, Any]", item), 2)
    except ValueError:  # a value marshal cannot write: canonical JSON instead
        data = json.dumps(item, sort_keys=True, default=str).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=16).digest()


def key_of(item: Item, key: bytes | None) -> bytes:
    """``key`` when a read knew it, else ``item``'s content key."""
    return key if key is not None else content_key(item)


def derived_key(key: bytes, tag: bytes) -> bytes:
    """The key of what a pure function named ``tag`` makes of the item keyed ``key``."""
    hasher = _hasher(tag)
    hasher.update(key)
    return hasher.digest()


def keyed_by(key: bytes, text: str, tag: bytes) -> bytes:
    """The key of what a function named ``tag`` makes of the item keyed ``key`` and ``text``."""
    hasher = _hasher(tag)
    hasher.update(key + text.encode("utf-8", "surrogatepass"))
    return hasher.digest()


_HASHERS: dict[bytes, hashlib.blake2b] = {}  # a tag's empty hasher: copied, never updated itself


def _hasher(tag: bytes) -> hashlib.blake2b:
    """A fresh blake2b personalised by ``tag``: a copy of one made once per tag (half the
    cost of making one; a read derives two keys per item)."""
    made = _HASHERS.get(tag)
    if made is None:
        made = hashlib.blake2b(digest_size=16, person=tag[:16])
        if len(_HASHERS) < 256:  # tags are names, a few; a caller's own are not kept all
            _HASHERS[tag] = made
    return made.copy()


def derived_keys(keys: Sequence[bytes | None], tag: bytes) -> list[bytes | None]:
    return [None if key is None else derived_key(key, tag) for key in keys]
