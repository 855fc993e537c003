"""Dating items a TTL layer finds unstamped: history written before it, or around it.

    >>> from memstack.layers.ttl.adoption import adopted_records, unstamped
    >>> old = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    >>> records, count = adopted_records(old, ages=[120.0, 60.0], now=1000.0)
    >>> count, [record["t"] for record in records]
    (2, [880.0, 940.0])
    >>> unstamped(old[0]), unstamped(records[0])
    (True, False)

Such an item is dated by the store's own write time when the store records one (its age,
read with ``write_ages``), else by now: the moment the layer first saw it. An atomic
unit (a tool call and its output) starts when its oldest item was written, as for
items the layer stamped itself. Records already stamped are kept as they are.
``adopt_history`` does the rewrite through the store's capability adapter; the rest of
this module is pure.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from agents.memory import Session

from memstack.backends.adapters import capabilities_of
from memstack.backends.capabilities import GenericCapabilities
from memstack.base import stored_values
from memstack.errors import CapabilityError, ConfigurationError
from memstack.history import split_units
from memstack.layers.ttl.record import MARKER, read_record, write_record
from memstack.options import Count, Options

__all__ = ["adopt_history", "adopted_records", "through_last_unstamped", "unstamped"]

logger = logging.getLogger("memstack.ttl")


class _AdoptOptions(Options, layer="TTLSession"):
    max_attempts: Count = 5


def unstamped(value: object) -> bool:
    """A stored item without a TTL record around it, which the layer can date."""
    return type(value) is dict and MARKER not in value


def through_last_unstamped(stored: Sequence[object]) -> int:
    """How many of the oldest values a rewrite must cover to reach every unstamped one."""
    for index in range(len(stored) - 1, -1, -1):
        if unstamped(stored[index]):
            return index + 1
    return 0


def adopted_records(
    stored: Sequence[Any], *, ages: Sequence[float] | None, now: float
) -> tuple[list[Any], int]:
    """``stored`` with every unstamped item dated; and how many were."""
    dated = ages is not None and len(ages) == len(stored)
    stamps = [read_record(value) for value in stored]
    written = [
        (now - ages[index] if dated and ages is not None else now)
        if unstamped(value)
        else stamps[index].written
        for index, value in enumerate(stored)
    ]
    generation = max((stamp.generation for stamp in stamps if stamp.stamped), default=0)
    records = list(stored)
    count = 0
    for span in split_units([stamp.item for stamp in stamps]):
        members = range(span.start, span.stop)
        begun = min(written[i] if unstamped(stored[i]) else stamps[i].anchor for i in members)
        for i in members:
            if unstamped(stored[i]):
                records[i] = write_record(
                    dict(stored[i]), written=written[i], anchor=begun, generation=generation
                )
                count += 1
    return records, count


async def adopt_history(
    store: Session,
    *,
    clock: Callable[[], float],
    allow_non_atomic: bool = False,
    max_attempts: int = 5,
    layer: str | None = None,
) -> int:
    """Date every unstamped item of ``store``'s history; return how many.

    One ``replace_oldest(…, expect=…)`` transaction, read again when the history changed
    meanwhile. A store without atomic rewrites is refused unless ``allow_non_atomic``
    (clear and refill).
    """
    try:
        _AdoptOptions.check(max_attempts=max_attempts)
    except ConfigurationError as exc:
        raise ConfigurationError(exc.reason, layer=layer, session_id=store.session_id) from None
    caps = capabilities_of(store)
    if not caps.atomic:
        if not allow_non_atomic:
            raise CapabilityError(
                f"{caps!r} cannot rewrite history atomically, so unstamped items stay "
                "undated and never expire; pass allow_non_atomic=True to clear and "
                "refill the session with them dated",
                layer=layer,
                session_id=store.session_id,
            )
        caps = GenericCapabilities(store, allow_non_atomic=True)
    for _ in range(max_attempts):
        stored: list[Any] = await stored_values(store)
        n = through_last_unstamped(stored)
        if n == 0:
            return 0
        try:
            ages = await caps.write_ages(n)
        except CapabilityError:
            ages = None  # the store's dialect has no age: count from first sight
        records, count = adopted_records(stored[:n], ages=ages, now=clock())
        if await caps.replace_oldest(n, records, expect=stored[:n]):
            logger.info(
                "dated %d unstamped items of session %r (%s)",
                count,
                store.session_id,
                "store write times" if ages is not None else "first seen now",
            )
            return count
    raise CapabilityError(
        f"history changed during each of {max_attempts} adoption attempts; retry later",
        layer=layer,
        session_id=store.session_id,
    )
