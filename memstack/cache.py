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

One rule decides where a new entry goes when the cache is full. Least recently used
alone fails a round robin bigger than the budget (sessions read in turn, more than fit):
each entry goes just before it is asked for again, and nothing ever hits. So, as CPU
caches do (dynamic insertion, Qureshi et al., ISCA 2007), a new entry goes in *guarded*
when that pays: at the old end, first out unless asked for again, and one in 32 at the
new end, so the part of a round robin that fits stays and keeps hitting. Whether it pays
is measured all the time: one key in 32 (by hash) is also played through two shadow
caches that hold only keys and weights within those keys' share of the budget, one
least recently used, one guarded, and new entries go in guarded while the guarded shadow
missed less lately. A working set that moves on (and fits) is then taken up again within
a few passes over it (the shadows' misses count for less as they age). ``Stats.guarded``
counts entries that went in guarded; ``guarding()`` tells the rule in force.

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
    "guarding",
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
# Guarded insertion (see the module docstring): one key in _SAMPLE, by hash, is played
# through the shadows too; a guarded entry goes to the new end one in _SAMPLE all the same.
_SAMPLE = 32
_HALF_LIFE = 32  # shadow misses counted before both counts are halved: recent ones count


class _Shadow:
    """Keys and weights alone, under one insertion rule: how that rule would have fared."""

    def __init__(self, *, guarded: bool) -> None:
        self.guarded = guarded
        self.entries: OrderedDict[int, int] = OrderedDict()
        self.bytes = 0
        self.misses = 0.0
        self.puts = 0

    def get(self, token: int) -> bool:
        """Whether ``token`` is held (then it is the newest); a miss is counted. Lock-free,
        as ``ProcessCache.get``: a put evicting it meanwhile only skips the move."""
        try:
            self.entries.move_to_end(token)
        except KeyError:
            self.misses += 1
            return False
        return True

    def put(self, token: int, cost: int, budget: int) -> None:
        old = self.entries.pop(token, None)
        if old is not None:
            self.bytes -= old
        full = old is None and self.bytes + cost > budget
        while self.entries and self.bytes + cost > budget:
            self.bytes -= self.entries.popitem(last=False)[1]
        self.entries[token] = cost
        self.bytes += cost
        if full and self.guarded:
            self.puts += 1
            if self.puts % _SAMPLE:
                self.entries.move_to_end(token, last=False)


@dataclass
class Stats:
    """Counters of one namespace (the first element of its keys)."""

    hits: int = 0
    misses: int = 0
    entries: int = 0
    bytes: int = 0
    evictions: int = 0
    guarded: int = 0  # entries that went in at the old end (the cache was thrashing)


class ProcessCache:
    """A least-recently-used map weighed in bytes, guarded against round robins that do
    not fit (see the module docstring); thread-safe (threads run their own loops)."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        # key -> (value, cost, its namespace's counters)
        self._entries: OrderedDict[tuple[Hashable, ...], tuple[Any, int, Stats]] = OrderedDict()
        self._bytes = 0
        self._stats: dict[Hashable, Stats] = {}
        self._lock = threading.Lock()  # changes of entries and bytes; reads need none
        self._shadows = (_Shadow(guarded=False), _Shadow(guarded=True))
        self._guarded_puts = 0
        # Bytes put lately, and of them the sampled keys': the shadows' share of the budget.
        self._put_bytes = self._sampled_bytes = 1

    def get(self, key: tuple[Hashable, ...]) -> Any:
        """The value under ``key``, or ``MISSING``; counts a hit or a miss.

        Runs several times per item read, so it takes no lock: one dict lookup is atomic,
        an entry evicted meanwhile only skips its move to the newest end, and the hit
        and miss counts are exact for one thread, about right for several.
        """
        token = hash(key)
        if not token % _SAMPLE:
            self._shadow_get(token)
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
            token = hash(key)
            self._put_bytes += cost
            if not token % _SAMPLE:
                self._sampled_bytes += cost
                budget = self.max_bytes * self._sampled_bytes // self._put_bytes
                for shadow in self._shadows:
                    shadow.put(token, cost, budget)
            if self._put_bytes > 8 * self.max_bytes:
                self._put_bytes //= 2
                self._sampled_bytes //= 2
            full = old is None and self._bytes + cost > self.max_bytes
            self._shrink(self.max_bytes - cost)
            self._entries[key] = (value, cost, stats)
            self._bytes += cost
            stats.entries += 1
            stats.bytes += cost
            if full and self._guards():
                self._entries.move_to_end(key, last=False)
                stats.guarded += 1

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
            self._shadows = (_Shadow(guarded=False), _Shadow(guarded=True))
            self._put_bytes = self._sampled_bytes = 1

    def stats(self) -> dict[Hashable, Stats]:
        with self._lock:
            return {name: Stats(**vars(stats)) for name, stats in self._stats.items()}

    @property
    def bytes(self) -> int:
        return self._bytes

    def _shadow_get(self, token: int) -> None:
        lru, guarded = self._shadows
        lru.get(token)
        guarded.get(token)
        if lru.misses + guarded.misses > _HALF_LIFE:
            lru.misses /= 2
            guarded.misses /= 2

    def _guards(self) -> bool:
        """Whether a new entry, put into a full cache, goes in at the old end."""
        if not self.guarding():
            return False
        self._guarded_puts += 1
        return self._guarded_puts % _SAMPLE != 0  # one in _SAMPLE at the new end all the same

    def guarding(self) -> bool:
        """Whether new entries put into a full cache go in guarded now: the guarded shadow
        missed less lately than the least-recently-used one."""
        lru, guarded = self._shadows
        return guarded.misses < lru.misses

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
    than in its text. Values kept for the whole process are compacted once, when made; a
    value nested deeper than Python's recursion limit allows twice over is kept as it is.
    """
    try:
        return _compact(value)
    except RecursionError:
        return value


def _compact(value: Any) -> Any:
    # A loop, not a comprehension with a conditional per value: a third fewer instructions
    # on a cold read, which compacts every value it parses.
    kind = type(value)
    if kind is dict:
        out = {}
        for k, v in value.items():
            kind = type(v)
            if kind is str:
                if len(v) <= _SHORT:
                    v = _intern(v)
            elif kind is dict or kind is list:
                v = _compact(v)
            out[_intern(k) if type(k) is str else k] = v
        return out
    if kind is list:
        return [
            _compact(v) if type(v) in _NESTED or (type(v) is str and len(v) <= _SHORT) else v
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


def guarding() -> bool:
    """Whether new entries put into the full cache go in guarded now (module docstring)."""
    return _CACHE.guarding()


def total_bytes() -> int:
    """What every entry weighs together, overheads included: at most ``max_bytes()``."""
    return _CACHE.bytes


def clear() -> None:
    """Drop every entry and reset the counters (tests; a key revoked everywhere at once)."""
    _CACHE.clear()
