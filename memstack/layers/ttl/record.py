"""How TTLSession stores an item: a small versioned record around it.

    >>> from memstack.layers.ttl.record import read_record, write_record
    >>> record = write_record({"role": "user", "content": "hi"}, written=1700000000.0)
    >>> record
    {'__memstack_ttl__': 1, 't': 1700000000.0, 'item': {'role': 'user', 'content': 'hi'}}
    >>> read_record(record).written
    1700000000.0

Format 1: ``t`` is when the item was written (the writer's clock, seconds since the Unix
epoch). ``u``, present only when older than ``t``, is the time the item expires from:
when its atomic unit began (an output written after its call carries the call's time),
or when the oldest item it derives from was written. ``d: 1`` marks derived items (a
summary): their expiry hides nothing but themselves. ``g``, present only when not 0, is
the session's generation: a write into an idle-expired session starts the next one, and
older generations are dead. A value without the marker was written before the layer, or
around it: ``TTLSession`` dates it on first sight (``adoption``).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, cast

from memstack.errors import BackendError

__all__ = ["MARKER", "VERSION", "Stamp", "UnknownRecord", "read_record", "write_record"]

MARKER = "__memstack_ttl__"
VERSION = 1
_NUMBERS = (float, int)


class UnknownRecord(BackendError):
    """A record of a newer format, or a damaged one: never guessed at, never deleted."""


class Stamp(NamedTuple):
    """One stored value, read back: the item and when it (and its unit) was written."""

    item: dict[str, Any]
    written: float
    anchor: float
    generation: int
    derived: bool = False
    stamped: bool = True


def write_record(
    item: dict[str, Any],
    *,
    written: float,
    anchor: float | None = None,
    generation: int = 0,
    derived: bool = False,
) -> dict[str, Any]:
    record: dict[str, Any] = {MARKER: VERSION, "t": written, "item": item}
    if anchor is not None and anchor < written:
        record["u"] = anchor
    if derived:
        record["d"] = 1
    if generation:
        record["g"] = generation
    return record


_new_stamp = tuple.__new__  # a Stamp without NamedTuple's Python-level __new__


def read_record(value: object) -> Stamp:
    """The stamp of one stored value; ``UnknownRecord`` for formats this code cannot read."""
    # Runs once per stored item on a cold read: type() checks, and no helper calls. Most
    # records are the marker, the time and the item: that stamp is made in one step.
    if type(value) is dict and len(value) == 3:
        written, stored = value.get("t"), value.get("item")
        if (
            type(written) is float
            and type(stored) is dict
            and value.get(MARKER) == VERSION
            and math.isfinite(written)
        ):
            return _new_stamp(Stamp, (stored, written, written, 0, False, True))
    if not isinstance(value, dict) or MARKER not in value:
        # Written before or around the layer: live, and dated by TTLSession.adopt().
        item = value if isinstance(value, dict) else {"value": value}
        return Stamp(item, 0.0, 0.0, 0, stamped=False)
    if value[MARKER] != VERSION:
        raise UnknownRecord(
            f"stored TTL record has format {value[MARKER]!r}; this memstack reads format "
            f"{VERSION} (upgrade memstack to read it)"
        )
    written, stored = value.get("t"), value.get("item")
    anchor, generation, derived = value.get("u", written), value.get("g", 0), value.get("d", 0)
    if (
        type(written) in _NUMBERS  # bool is an int subclass: type(), not isinstance()
        and type(anchor) in _NUMBERS
        and type(stored) is dict
        and type(generation) is int
        and derived in (0, 1)
    ):
        t, u = float(cast("float", written)), float(cast("float", anchor))
        if math.isfinite(t) and math.isfinite(u):
            return Stamp(stored, t, u, generation, derived == 1)
    raise UnknownRecord(f"stored TTL record is damaged: {str(value)[:200]}")
