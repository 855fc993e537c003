"""One cache for the whole process, under one byte budget: what a read re-derives.

    >>> from memstack import cache
    >>> cache.configure(max_bytes=64 << 20)
    >>> cache.get_or_put(("demo", 1), lambda: "value", weight=5)
    'value'
    >>> cache.stats()["demo"].hits, cache.stats()["demo"].misses
    (0, 1)

Stacks are built per request in a server and thousands live in one process, so nothing
that makes a read fast may belong to one stack: parsed rows, opened envelopes, token
counts, masked outputs and each session's last read (``memstack.incremental``) are kept
here, least recently used first out, within ``max_bytes`` (64 MiB by default;
``configure``, or ``[cache] max_bytes`` in a recipe).
Every key says what makes its entry trustworthy: a stored row's entry answers only for
the same text, an opened envelope's only under the same derived session key (see
``memstack.crypto.envelope``), a count only for the same content key. Failures are never
cached. Entries are shared between readers and read-only: a layer builds new objects
instead of changing one, and the top of a stack hands its caller copies.
"""

from __future__ import annotations

import re
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = [
    "DEFAULT_MAX_BYTES",
    "MISSING",
    "ProcessCache",
    "Stats",
    "clear",
    "compact",
    "configure",
    "discard",
    "get",
    "get_or_put",
    "max_bytes",
    "parse_size",
    "parsed_weight",
    "put",
    "stats",
    "total_bytes",
]

V = TypeVar("V")

DEFAULT_MAX_BYTES = 64 << 20
# What an entry costs beyond the weight its caller gives: the key tuple, the OrderedDict
# node and the entry's own slot, measured with tracemalloc (see tests/test_cache.py).
ENTRY_OVERHEAD = 240
PARSED_ITEM_OVERHEAD = 240  # see parsed_weight
_MISSING: Any = object()


@dataclass
class Stats:
    """Counters of one namespace (the first element of its keys)."""

    hits: int = 0
    misses: int = 0
    entries: int = 0
    bytes: int = 0
    evictions: int = 0


class ProcessCache:
    """A least-recently-used map weighed in bytes; thread-safe (threads run their own loops)."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        # key -> (value, cost, its namespace's counters)
        self._entries: OrderedDict[tuple[Hashable, ...], tuple[Any, int, Stats]] = OrderedDict()
        self._bytes = 0
        self._stats: dict[Hashable, Stats] = {}
        self._lock = threading.Lock()  # changes of entries and bytes; reads need none

    def get(self, key: tuple[Hashable, ...]) -> Any:
        """The value under ``key``, or ``MISSING``; counts a hit or a miss.

        Runs several times per item read, so it takes no lock: one dict lookup is atomic,
        an entry evicted meanwhile only skips its move to the newest end, and the hit
        and miss counts are exact for one thread, about right for several.
        """
        found = self._entries.get(key)
        if found is None:
            self._namespace(key).misses += 1
            return _MISSING
        try:  # noqa: SIM105 (suppress() would cost a third of this method)
            self._entries.move_to_end(key)
        except KeyError:
            pass
        found[2].hits += 1
        return found[0]

    def put(self, key: tuple[Hashable, ...], value: Any, weight: int) -> None:
        """Keep ``value`` under ``key``; ``weight``: bytes it holds (the overhead is added).

        An entry over an eighth of the budget is not kept: one huge tool output must not
        push a whole session's tail out.
        """
        cost = weight + ENTRY_OVERHEAD
        with self._lock:
            if cost > self.max_bytes // 8:
                return
            old = self._entries.pop(key, None)
            stats = self._namespace(key)
            if old is not None:
                self._forget(key, old[1], stats)
            self._entries[key] = (value, cost, stats)
            self._bytes += cost
            stats.entries += 1
            stats.bytes += cost
            self._shrink(self.max_bytes)

    def discard(self, key: tuple[Hashable, ...]) -> None:
        """Drop the entry under ``key``, if any (what it answered for has changed)."""
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._forget(key, old[1], old[2])

    def resize(self, max_bytes: int) -> None:
        with self._lock:
            self.max_bytes = max_bytes
            self._shrink(max_bytes)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0
            self._stats.clear()

    def stats(self) -> dict[Hashable, Stats]:
        with self._lock:
            return {name: Stats(**vars(stats)) for name, stats in self._stats.items()}

    @property
    def bytes(self) -> int:
        return self._bytes

    def _shrink(self, limit: int) -> None:
        while self._bytes > limit and self._entries:
            key, (_, cost, stats) = self._entries.popitem(last=False)
            self._forget(key, cost, stats)
            stats.evictions += 1

    def _forget(self, key: tuple[Hashable, ...], cost: int, stats: Stats) -> None:
        self._bytes -= cost
        stats.entries -= 1
        stats.bytes -= cost

    def _namespace(self, key: tuple[Hashable, ...]) -> Stats:
        name = key[0]
        stats = self._stats.get(name)
        if stats is None:
            stats = self._stats[name] = Stats()
        return stats


_CACHE = ProcessCache()
MISSING = _MISSING


def configure(*, max_bytes: int | str) -> None:
    """Set the process's cache budget (0 turns caching off); evicts what is over.

    ``max_bytes`` is a number of bytes or a size such as ``"256MB"`` or ``"1GiB"``.
    """
    _CACHE.resize(parse_size(max_bytes))


_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9}
_UNITS.update({"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30})
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*", re.IGNORECASE)


def parse_size(value: int | str) -> int:
    """Bytes of ``value``: an int, or a size with its unit (KB/MB/GB: 1000s, KiB/MiB/GiB: 1024s)."""
    from memstack.errors import ConfigurationError

    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    match = _SIZE.fullmatch(value) if isinstance(value, str) else None
    if match is None or match.group(2).lower() not in _UNITS:
        raise ConfigurationError(
            f"cache max_bytes must be a number of bytes >= 0 or a size such as '256MB' or "
            f"'1GiB' (units: B, KB, MB, GB, KiB, MiB, GiB), not {value!r}"
        )
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def max_bytes() -> int:
    return _CACHE.max_bytes


def parsed_weight(chars: int, items: int = 1) -> int:
    """Bytes Python holds for ``items`` JSON items parsed from ``chars`` characters of text.

    Items made by ``compact`` (their keys and short strings shared): up to two bytes a
    character (a non-Latin text takes two or four a character, its JSON escapes more
    characters than it holds), and a few hundred for the objects of an item (its dicts,
    each string's header), measured with tracemalloc (``tests/test_cache.py``).
    """
    return 2 * chars + PARSED_ITEM_OVERHEAD * items


_SHORT = 16  # strings this short are names (keys, roles, types, key ids): shared
_intern = sys.intern


def compact(value: Any) -> Any:
    """A parsed JSON value, its dict keys and short strings shared with every other's.

    ``json.loads`` makes new strings for every key of every object it parses: a short
    chat item kept as parsed holds more bytes in ``"role"``, ``"content"`` and the like
    than in its text. Values kept for the whole process are compacted once, when made.
    """
    kind = type(value)
    if kind is dict:
        return {
            _intern(k) if type(k) is str else k: compact(v)
            if type(v) in _NESTED or (type(v) is str and len(v) <= _SHORT)
            else v
            for k, v in value.items()
        }
    if kind is list:
        return [
            compact(v) if type(v) in _NESTED or (type(v) is str and len(v) <= _SHORT) else v
            for v in value
        ]
    if kind is str and len(value) <= _SHORT:
        return _intern(value)
    return value


_NESTED = (dict, list)


get = _CACHE.get  # the value cached under a key, or ``cache.MISSING`` (no extra call)


def put(key: tuple[Hashable, ...], value: Any, *, weight: int) -> None:
    _CACHE.put(key, value, weight)


def discard(key: tuple[Hashable, ...]) -> None:
    _CACHE.discard(key)


def get_or_put(key: tuple[Hashable, ...], compute: Callable[[], V], *, weight: int) -> V:
    """The value under ``key``; else ``compute()``, kept (a raising compute keeps nothing)."""
    found = _CACHE.get(key)
    if found is not _MISSING:
        return found  # type: ignore[no-any-return]
    value = compute()
    _CACHE.put(key, value, weight)
    return value


def stats() -> dict[Hashable, Stats]:
    """Hits, misses, entries, bytes and evictions per namespace (a copy)."""
    return _CACHE.stats()


def total_bytes() -> int:
    """What every entry weighs together, overheads included: at most ``max_bytes()``."""
    return _CACHE.bytes


def clear() -> None:
    """Drop every entry and reset the counters (tests; a key revoked everywhere at once)."""
    _CACHE.clear()
