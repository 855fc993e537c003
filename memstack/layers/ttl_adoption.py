"""Dating items a TTL layer finds unstamped: history written before it, or around it.

    >>> from memstack.layers.ttl_adoption import adopted_records, unstamped
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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memstack.history import split_units
from memstack.layers.ttl_record import MARKER, read_record, write_record

__all__ = ["adopted_records", "through_last_unstamped", "unstamped"]


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
