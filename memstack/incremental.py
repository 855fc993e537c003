"""What a read derives per row, re-derived only for rows the last read did not see.

    >>> from memstack import incremental
    >>> seen = []
    >>> def read(keys, values):
    ...     results = incremental.previous(("demo reads", "s1"), keys)
    ...     for index, result in enumerate(results):
    ...         if result is incremental.MISSING:
    ...             seen.append(values[index])
    ...             results[index] = 2 * values[index]
    ...     incremental.keep(("demo reads", "s1"), keys, results)
    ...     return results
    >>> read([b"k1", b"k2"], [1, 2]), read([b"k1", b"k2", b"k3"], [1, 2, 3]), seen
    ([2, 4], [2, 4, 6], [1, 2, 3])

A session's consecutive reads see the same rows and a few new ones: the same tail, longer
(a small session), or moved on by the rows written since (a long one). What a layer makes
of one row (a parsed row, a TTL record's stamp, an opened envelope, a token count) is a
pure function of the row's content, named by its content key (``memstack.content_keys``)
or its stored text. So one read's results, kept in the process cache (``memstack.cache``)
under one slot with the keys they came from, answer for the next read wherever the two
reads' keys line up, position by position: the lists are compared and sliced at C speed,
and only the new rows are derived in Python.

Equal keys mean equal content, so a kept result is right for any row with that key,
wherever it stands and whoever wrote it: another process's write, a pop, a clear or a
rewrite changes the keys a read sees, and a read whose keys do not line up with the last
one takes each key's result from wherever the last read had it (a view whose middle
changed, as when masking replaces an older output, derives only what changed). What else
a result depends on (the session key an envelope was opened under, a counter's way of
counting) goes in the slot, or in ``extra``, checked by the caller before it trusts the
results. A read with a row of unknown key keeps nothing. Results are
shared: read-only.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import memstack.cache as cache

__all__ = ["KEY_WEIGHT", "MISSING", "WEIGHT_PER_ROW", "keep", "previous", "previous_with"]

MISSING: Any = cache.MISSING  # a position whose result the last read did not give
# What a kept read holds of its own per row: two list slots (its keys are the read's,
# made and weighed by the layer below, or by the rows read for a store's own keys). A
# read whose results hold objects of their own (parsed rows, stamps, opened items, derived
# keys) says so with ``weight``: the values it keeps stay alive as long as it does,
# whether or not their own entries are still in the cache.
WEIGHT_PER_ROW = 24
KEY_WEIGHT = 49  # a 16-byte content key (``bytes``) made by the read that keeps it


def previous(slot: tuple[Hashable, ...], keys: Sequence[Hashable | None]) -> list[Any]:
    """The last read's result for each of ``keys`` that lines up with it, else ``MISSING``."""
    return previous_with(slot, keys)[0]


def previous_with(
    slot: tuple[Hashable, ...], keys: Sequence[Hashable | None]
) -> tuple[list[Any], Any]:
    """``previous``, and the ``extra`` the last read kept beside its results (or None)."""
    n = len(keys)
    known = cache.get(slot)
    if known is MISSING or not n or None in keys:
        return [MISSING] * n, None
    old_keys, old_results, extra = known
    if not old_keys:
        return [MISSING] * n, None
    if old_keys[0] == keys[0]:
        start, offset = 0, 0  # the same tail, perhaps longer or shorter
    elif (found := _index(old_keys, keys[0])) >= 0:
        start, offset = 0, found  # the tail moved on: its head is inside the last one
    elif (found := _index(keys, old_keys[0])) >= 0:
        start, offset = found, 0  # a longer read: the last one is inside this one
    else:
        return _by_key(keys, old_keys, old_results), extra
    shared = min(n - start, len(old_keys) - offset)
    if keys[start : start + shared] != old_keys[offset : offset + shared]:
        return _by_key(keys, old_keys, old_results), extra
    results = [MISSING] * start
    results += old_results[offset : offset + shared]
    results += [MISSING] * (n - start - shared)
    return results, extra


def keep(
    slot: tuple[Hashable, ...],
    keys: Sequence[Hashable | None],
    results: Sequence[Any],
    extra: Any = None,
    *,
    shared: bool = False,
    weight: int = 0,
) -> None:
    """Keep one read's results (``MISSING`` where it derived none) for the next read.

    A read whose tail begins inside the last one's (a short read of the newest rows
    between two long ones) keeps the last one's older rows too, as many as it had.
    ``shared``: keep ``results`` itself (a list), which the read then fills in.
    ``weight``: bytes the results hold beyond ``WEIGHT_PER_ROW`` a row (their values).
    """
    if None in keys:
        return
    keys = list(keys)
    results = results if shared and isinstance(results, list) else list(results)
    known = cache.get(slot)
    n = len(keys)
    if known is not MISSING and keys and known[0] and known[0][0] != keys[0]:
        old_keys, old_results, _ = known
        offset = _index(old_keys, keys[0])
        if offset > 0 and old_keys[offset : offset + len(keys)] == keys[: len(old_keys) - offset]:
            size = max(len(old_keys), len(keys))
            keys = (old_keys[:offset] + keys)[-size:]
            results = (old_results[:offset] + results)[-size:]
    # Older rows carried over from the last read weigh as much, on average, as this one's.
    weight = (WEIGHT_PER_ROW + weight // max(n, 1)) * len(keys) + 64
    cache.put(slot, (keys, results, extra), weight=weight)


def _by_key(
    keys: Sequence[Hashable | None], old_keys: Sequence[Hashable], old_results: Sequence[Any]
) -> list[Any]:
    """Where the two reads do not line up, each key's result wherever the last read had it:
    a result is a function of its key (and of what the slot and ``extra`` name) alone."""
    found = dict(zip(old_keys, old_results, strict=False))
    return [found.get(key, MISSING) for key in keys]


def _index(values: Sequence[Hashable | None], value: Hashable | None) -> int:
    try:
        return values.index(value)
    except ValueError:
        return -1
