"""Sequence numbers a scope's cached vectors may still be missing, and when to stop waiting.

    >>> from memstack.memory.gaps import Gaps
    >>> gaps = Gaps().found(range(5, 10), present={5, 6, 8, 9}, now=0.0)
    >>> gaps.numbers
    (7,)
    >>> gaps.filled({7}, now=1.0).numbers, gaps.filled(set(), now=601.0).numbers
    ((), ())

The vectors table numbers rows as they are inserted, but transactions commit in any
order: a reader that has seen row 9 may not yet see row 7, still in flight in another
transaction (PostgreSQL sequences, MariaDB auto-increment; SQLite serialises writers).
Reading only ``seq > 9`` next time would miss row 7 for as long as the cache keeps the
scope. So every number below the mark that was not seen is kept here and asked for again
until it shows up or is too old to be in flight. A gap may also be a row rolled back or
deleted, which never shows up: hence the age bound, and the window.

Why gaps and not the others: an overlap window re-reads rows it has (and still misses a
transaction slower than the window); PostgreSQL's snapshot xmin has no MariaDB
equivalent a plain user can read. Gaps cost nothing while nothing is in flight: the one
extra query lists the numbers just read past (integers by primary key), and another asks
for the open ones only while there are some.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

__all__ = ["FIRST_WINDOW", "MAX_AGE", "MAX_OPEN", "WINDOW", "Gaps"]

# A gap older than this (seconds) is taken for a rolled-back or deleted row: a memstack
# write transaction lasts well under a second (embedding happens before it opens).
MAX_AGE = 600.0
# Numbers read past in one refresh checked for gaps: the newest this many. A transaction
# still in flight while this many later rows committed is not waited for.
WINDOW = 10_000
# On a scope's first read, only the newest numbers below its mark: further down, a gap is
# almost always a row deleted long ago, and each open gap is asked for on every recall
# (10,000 of them made recall 3x slower on PostgreSQL).
FIRST_WINDOW = 128
# Open gaps kept, the newest: rows in flight hold the newest numbers.
MAX_OPEN = 128


@dataclass(frozen=True, slots=True)
class Gaps:
    """Open sequence numbers, each with the time it was first found open."""

    open: tuple[tuple[int, float], ...] = ()

    @property
    def numbers(self) -> tuple[int, ...]:
        return tuple(number for number, _ in self.open)

    def found(self, span: Iterable[int], *, present: Collection[int], now: float) -> Gaps:
        """These gaps plus the numbers of ``span`` not in ``present``."""
        new = tuple((number, now) for number in span if number not in present)
        return Gaps((self.open + new)[-MAX_OPEN:]) if new else self

    def filled(self, numbers: Collection[int], *, now: float, max_age: float = MAX_AGE) -> Gaps:
        """These gaps less ``numbers`` (rows that showed up) and those older than
        ``max_age``."""
        kept = tuple(
            (number, since)
            for number, since in self.open
            if number not in numbers and now - since <= max_age
        )
        return self if len(kept) == len(self.open) else Gaps(kept)
