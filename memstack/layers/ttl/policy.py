"""TTL's policy, pure: what is live, what a view shows, what a purge may delete.

    >>> from memstack.layers.ttl.policy import Expiry
    >>> from memstack.layers.ttl.record import read_record, write_record
    >>> expiry = Expiry(ttl=60.0, idle_ttl=None)
    >>> stored = [write_record({"role": "user", "content": "hi"}, written=0.0)]
    >>> expiry.resolve(stored, 30.0, whole=True, read=read_record).visible
    [0]
    >>> expiry.resolve(stored, 60.0, whole=True, read=read_record).visible
    []

No I/O and no clock: ``TTLSession`` reads the store and asks these functions; its
capability adapter (``capabilities``) asks the same ones, so the two never disagree.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from memstack.backends.capabilities import Predicate
from memstack.history import cut_points, is_output, pair_key, split_units
from memstack.layers.ttl.record import Stamp, UnknownRecord, read_record, write_record

__all__ = [
    "Expiry",
    "Snapshot",
    "at_most",
    "doomed",
    "known_time",
    "new_records",
    "shows_open_unit",
    "unit_anchors",
]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Stored values read from the tail, oldest first, and what the view shows of them.

    Records before ``start`` are dead, or hidden by a dead one, and were not even parsed;
    ``stamps`` are those of ``stored[start:]``, ``visible`` indexes the records shown.
    ``complete`` is False when a read with a limit stopped early, having found enough
    live records: ``start`` is then not known.
    """

    stored: list[Any]
    start: int
    stamps: list[Stamp]
    visible: list[int]
    generation: int
    now: float
    complete: bool
    #: The records from ``start`` on are objects shared between reads (read-only).
    shared: bool = False

    def stamp(self, index: int) -> Stamp:
        return self.stamps[index - self.start]

    def view(self, limit: int | None = None) -> list[Stamp]:
        shown = self.visible if limit is None else self.visible[-limit:]
        return [self.stamp(index) for index in shown]

    @property
    def hidden(self) -> Any:
        """The newest stored value before the first one shown, or None: purge through it."""
        first = self.visible[0] if self.visible else len(self.stored)
        return self.stored[first - 1] if self.complete and first else None


_STAMPED = operator.attrgetter("stamped")
_GENERATION = operator.attrgetter("generation")
_ANCHOR = operator.attrgetter("anchor")


@dataclass(frozen=True, slots=True)
class Expiry:
    """When records die: ``ttl`` after their unit began, or all once idle for ``idle_ttl``."""

    ttl: float | None
    idle_ttl: float | None

    def idle(self, newest: Stamp, now: float) -> bool:
        return (
            newest.stamped and self.idle_ttl is not None and newest.written + self.idle_ttl <= now
        )

    def dead(self, stamp: Stamp, generation: int, now: float) -> bool:
        # An unstamped item is live: it is dated on first sight (``adopt``); only where
        # the store cannot be rewritten does it stay unstamped, and then it never expires.
        return stamp.stamped and (
            stamp.generation < generation
            or (self.ttl is not None and stamp.anchor + self.ttl <= now)
        )

    def ends_view(self, stamp: Stamp, generation: int, now: float) -> bool:
        """Dead, and hiding everything before it: all dead records but derived ones."""
        if stamp.derived and stamp.generation == generation:
            return False  # a summary stamped with its sources' time hides only itself
        return self.dead(stamp, generation, now)

    def resolve(
        self,
        stored: list[Any],
        now: float,
        *,
        whole: bool,
        read: Callable[[object], Stamp],
        at: Callable[[int], Stamp] | None = None,
    ) -> Snapshot:
        """What the view shows of ``stored``, the newest records of the history.

        Scans from the newest record back: the first dead one ends the view even if older
        records look alive (a writer's clock ran ahead), so expiry never punches holes.
        ``at(index)``, when given, is the stamp of ``stored[index]`` (one read kept).
        """
        if at is None:
            at = lambda index: read(stored[index])  # noqa: E731
        newest = at(len(stored) - 1) if stored else None
        generation = newest.generation if newest is not None else 0
        start = len(stored) if newest is not None and self.idle(newest, now) else None
        # Parsed from the newest back, and only down to where the view ends.
        index, backwards = len(stored) - 1, []
        while start is None and index >= 0:
            last = index == len(stored) - 1
            stamp = newest if last and newest is not None else at(index)
            if self.ends_view(stamp, generation, now):
                start = index + 1
            else:
                backwards.append(stamp)
            index -= 1
        complete = start is not None or whole
        start = start or 0
        stamps = backwards[::-1]
        visible = [
            start + offset
            for offset, stamp in enumerate(stamps)
            if not self.dead(stamp, generation, now)
        ]
        if complete:
            # Outputs heading the view lost their call (purged, or in a dead generation).
            while visible and is_output(stamps[visible[0] - start].item):
                visible.pop(0)
        return Snapshot(stored, start, stamps, visible, generation, now, complete)

    def resolve_live(
        self, stored: list[Any], stamps: Sequence[Stamp], now: float, *, whole: bool
    ) -> Snapshot | None:
        """``resolve``'s answer when ``stamps`` (of every record of ``stored``) are all
        stamped, of the newest generation and within ``ttl``, and the history is not idle:
        nothing is dead, so the view is all of it. None otherwise (ask ``resolve``).

        Three passes at C speed over the stamps, where ``resolve`` asks per record.
        """
        if not stamps or len(stamps) != len(stored) or self.idle(stamps[-1], now):
            return None
        if not all(map(_STAMPED, stamps)):
            return None
        generation = stamps[-1].generation
        if min(map(_GENERATION, stamps)) < generation:
            return None
        if self.ttl is not None and min(map(_ANCHOR, stamps)) + self.ttl <= now:
            return None
        first = 0
        if whole:  # as ``resolve``: outputs heading a whole view lost their call
            while first < len(stamps) and is_output(stamps[first].item):
                first += 1
        visible = list(range(first, len(stamps)))
        return Snapshot(stored, 0, list(stamps), visible, generation, now, whole)

    def next_generation(self, tail: Sequence[Stamp], now: float) -> int:
        """The generation a write after ``tail`` (the newest stored records) belongs to."""
        generation = tail[-1].generation if tail else 0
        if tail and self.idle(tail[-1], now):
            generation += 1  # the idle history is dead; this write begins the next one
        return generation

    def expired_after(self, newest: Stamp, now: float) -> Predicate:
        """A test for stored records that are dead now, given the newest stored one."""
        return self.expired(newest.generation, idle=self.idle(newest, now), now=now)

    def purge_plan(
        self, snapshot: Snapshot, read: Callable[[object], Stamp]
    ) -> tuple[Predicate, bool] | None:
        """What to delete of a complete ``snapshot``, and whether a prefix-only delete will
        do; None when nothing is to go.

        Everything the view hides goes; so do derived items that expired among shown
        ones, which need a scan past the first shown record.
        """
        if not snapshot.stored:
            return None
        expired = self.expired_after(read(snapshot.stored[-1]), snapshot.now)
        first = snapshot.visible[0] if snapshot.visible else len(snapshot.stored)
        stray = any(expired(value) for value in snapshot.stored[first:])
        if snapshot.hidden is None and not stray:
            return None
        return doomed(snapshot.hidden, expired, prefix=not stray), not stray

    def expired(self, generation: int, *, idle: bool, now: float) -> Predicate:
        def expired(value: dict[str, Any]) -> bool:
            try:
                stamp = read_record(value)
            except UnknownRecord:
                return False  # never delete what this code cannot read
            # Idle: everything up to the newest generation. New writes start the next one.
            idled = idle and stamp.stamped and stamp.generation <= generation
            return idled or self.dead(stamp, generation, now)

        return expired


def shows_open_unit(stored: list[dict[str, Any]], items: Sequence[Any]) -> bool:
    """Whether ``stored`` reaches back to the start of every unit the batch continues."""
    combined = [*stored, *items]
    ok = cut_points(combined)
    if not any(ok[1 : len(stored) + 1]):
        return False  # the unit the batch joins may begin before the window
    calls = {pair_key(item) for item in combined if not is_output(item)}
    return all(pair_key(item) in calls for item in items if is_output(item) and pair_key(item))


def new_records(
    tail: Sequence[Stamp],
    items: Sequence[Any],
    *,
    now: float,
    generation: int,
    derived_from: float | None = None,
) -> list[dict[str, Any]]:
    """Records for a batch written after ``tail`` (the newest stored records, any open unit).

    Items derived from older data (a summary, ``derived_from``) expire with it; their
    write time stays ``now``: the write is activity all the same.
    """
    origin = now if derived_from is None else min(derived_from, now)
    return [
        write_record(
            dict(item),
            written=now,
            anchor=anchor,
            generation=generation,
            derived=derived_from is not None,
        )
        for item, anchor in zip(items, unit_anchors(tail, items, origin), strict=True)
    ]


def unit_anchors(tail: Sequence[Stamp], items: Sequence[Any], origin: float) -> list[float]:
    """When each new item's unit began: a unit begun in storage keeps its oldest time."""
    join = len(tail)
    anchors: list[float] = []
    for span in split_units([*(stamp.item for stamp in tail), *items]):
        if span.stop > join:
            begun = [tail[i].anchor for i in range(span.start, join) if tail[i].stamped]
            anchors += [min([origin, *begun])] * (span.stop - max(span.start, join))
    return anchors


def known_time(stamp: Stamp) -> float | None:
    """When the item's unit began, for layers above; None for an item not yet dated."""
    return stamp.anchor if stamp.stamped else None


def at_most(limit: int, predicate: Predicate) -> Predicate:
    """``predicate``, until it has matched ``limit`` times (with ``prefix_only``, a bound)."""
    taken = 0

    def capped(item: dict[str, Any]) -> bool:
        nonlocal taken
        if taken >= limit or not predicate(item):
            return False
        taken += 1
        return True

    return capped


def doomed(last: Any, expired: Predicate, *, prefix: bool) -> Predicate:
    """Records through ``last`` (the newest one the view hides), then expired ones.

    Called once per record, oldest first. Up to ``last`` it also takes records written
    before it that are not expired themselves but hidden. After it, only records that
    cannot un-hide anything: expired ones at the head (``prefix``), else expired derived
    ones. Nothing written after ``last`` is taken unless expired, even if another purger
    deleted ``last`` meanwhile.
    """
    boundary = read_record(last).written if last is not None else None
    passed = last is None

    def doomed(value: dict[str, Any]) -> bool:
        nonlocal passed
        try:
            stamp = read_record(value)
        except UnknownRecord:
            return False
        if not passed:
            if value == last:
                passed = True
                return True
            older = stamp.stamped and boundary is not None and stamp.written < boundary
            return expired(value) or older
        return expired(value) and (prefix or stamp.derived)

    return doomed
