"""Retention that really deletes: items expire ``ttl`` after they were written.

    >>> import asyncio
    >>> from memstack.layers import TTLSession
    >>> from memstack.testing import FakeClock, InMemorySession
    >>> clock, store = FakeClock(), InMemorySession("user-42")
    >>> session = TTLSession(store, ttl=3600, clock=clock)
    >>> asyncio.run(session.add_items([{"role": "user", "content": "hi"}]))
    >>> _ = clock.tick(3600)
    >>> asyncio.run(session.get_items())
    []
    >>> asyncio.run(session.purge_expired()), store.rows
    (1, [])

Every item is stored in a record stamped with its write time (``record``). An atomic
unit (a tool call and its output, reasoning and what follows it) expires when its oldest
item does, and an expired record hides everything stored before it, so expiry removes
the start of a history, whole units at a time, and never punches holes. Reads and
``pop_item`` only skip; deleting happens in ``purge_expired()`` and, bounded by
``purge_batch``, after a write at most every ``purge_every`` seconds, through the
store's capability adapter.

An item stored without a stamp (history written before the layer, or around it) is not
expired but dated on first sight, by the store's own write time where it keeps one
(``adopt``, ``adoption``).

Derived items (a summary, written with ``add_derived(items, derived_from=t)``, which
layers above reach through the capability adapter) expire with their oldest source and
hide nothing else. The adapter's ``read_tail(n)`` returns each live item with its stamp.

Below encryption (store → TTL → Encrypted) the records wrap envelopes in plaintext, so a
retention job purges with ``TTLSession(store, ttl=…).purge_expired()`` and no key. Above
encryption the records are sealed; a job without the key can only use the store's own
write times: ``purge_written_before(store, older_than=…)``.

This file only wires: ``policy`` decides (pure), ``purge`` deletes, ``adoption`` dates,
``capabilities`` serves layers above; reads go through the stack's one loop
(``memstack.pipeline``), which hands ``shape`` the newest records.
"""

from __future__ import annotations

import logging
import operator
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, Any, Self

from agents.memory import Session
from pydantic import BeforeValidator, Field, model_validator

import memstack.incremental as incremental
from memstack.backends.adapters import capabilities_of
from memstack.backends.capabilities import Predicate, StorageCapabilities, Tail
from memstack.backends.translate import store_errors
from memstack.base import SessionLayer
from memstack.content_keys import derived_key
from memstack.errors import CapabilityError
from memstack.history import is_output, reading_only
from memstack.layers.ttl.adoption import adopt_history, unstamped
from memstack.layers.ttl.policy import (
    Expiry,
    Snapshot,
    known_time,
    new_records,
    shows_open_unit,
)
from memstack.layers.ttl.purge import (
    PurgeSchedule,
    delete_records,
    purge_head,
    purge_written_before,
)
from memstack.layers.ttl.record import Stamp, UnknownRecord, read_record
from memstack.options import (
    BatchSize,
    MaybeDuration,
    MaybePositiveDuration,
    Options,
    must_be_callable,
    shared,
)
from memstack.pipeline import Need

if TYPE_CHECKING:
    from agents.run_context import RunContextWrapper

__all__ = ["TTLSession", "purge_written_before"]

logger = logging.getLogger("memstack.ttl")

_CONTEXT = 4  # stored records a write reads first: the newest one, and any unit left open
_WHOLE_FIRST = 256  # records a read of the whole history asks for first
_FIRST, _SECOND = operator.itemgetter(0), operator.itemgetter(1)
_ANCHOR = operator.attrgetter("anchor")
# A kept row's own: a Stamp (a tuple of six), the pair it sits in, its item's derived key
# and an anchor (its item and time are the parsed row's, weighed by the rows read).
_STAMP_WEIGHT = 88 + 56 + incremental.KEY_WEIGHT + 24

Seconds = float | int | timedelta
Clock = Callable[[], float]


class TTLOptions(Options, layer="TTLSession"):
    ttl: MaybePositiveDuration
    idle_ttl: MaybePositiveDuration = None
    clock: Annotated[
        Callable[[], float],
        BeforeValidator(must_be_callable),
        Field(description="a callable returning seconds, like time.time"),
    ] = time.time
    purge_every: MaybeDuration = 60.0
    purge_batch: BatchSize = 200

    @model_validator(mode="after")
    def _some_limit(self) -> Self:
        if self.ttl is None and self.idle_ttl is None:
            raise ValueError("set ttl, idle_ttl or both (seconds > 0)")
        return self


class _Unstamped(Exception):
    """A write's tail holds undated items: it stops, writing nothing, to date them first."""


class _PurgeEvery(Options, layer="TTLSession"):
    purge_every: MaybeDuration


class TTLSession(SessionLayer):
    """Hides, then deletes, items older than ``ttl`` and sessions idle for ``idle_ttl``."""

    layer_name = "ttl"
    transforms_items = True

    def __init__(
        self,
        inner: Session,
        *,
        ttl: Seconds | None,
        idle_ttl: Seconds | None = None,
        clock: Clock = time.time,
        purge_every: Seconds | None = 60.0,
        purge_batch: int = 200,
    ) -> None:
        super().__init__(inner)
        options = TTLOptions.check(
            ttl=ttl,
            idle_ttl=idle_ttl,
            clock=clock,
            purge_every=purge_every,
            purge_batch=purge_batch,
        )
        self.ttl, self.idle_ttl = options.ttl, options.idle_ttl
        self.clock = clock
        self.purge_schedule = PurgeSchedule(options.purge_every)
        self.purge_batch = options.purge_batch
        self.expiry = shared(Expiry(self.ttl, self.idle_ttl))
        self._adopting = True  # False once the store turned out unable to date items in place

    @property
    def _dates_on_sight(self) -> bool:
        """Whether meeting undated history dates it in the store now (not inside
        ``read_only()``, nor once the store proved unable to)."""
        return self._adopting and not reading_only()

    @property
    def purge_every(self) -> float | None:
        return self.purge_schedule.every

    @purge_every.setter
    def purge_every(self, value: Seconds | None) -> None:
        self.purge_schedule.every = _PurgeEvery.check(purge_every=value).purge_every

    def read(self, value: object) -> Stamp:
        """One stored value's stamp; ``UnknownRecord`` naming the layer and session."""
        try:
            return read_record(value)
        except UnknownRecord as exc:
            raise UnknownRecord(
                exc.reason, layer=type(self).__name__, session_id=self.session_id
            ) from exc

    def resolve(self, stored: Tail, now: float) -> Snapshot:
        """What the view shows of ``stored`` (the newest records below) at ``now``."""
        return self.expiry.resolve(list(stored.items), now, whole=stored.complete, read=self.read)

    def _resolve_keyed(self, stored: Tail, now: float) -> tuple[Snapshot, list[Any]]:
        """``resolve``, and each record's ``(stamp, key of its item)`` where it was read.

        A record the last read of this session saw is not read again: its stamp and key
        are kept by content key (``memstack.incremental``).
        """
        items, keys = list(stored.items), stored.keys
        slot = ("ttl stamps", self.session_id)
        known = incremental.previous(slot, keys)

        def at(index: int) -> Stamp:
            found = known[index]
            if found is incremental.MISSING:
                key = keys[index]
                found = known[index] = (
                    self.read(items[index]),
                    None if key is None else derived_key(key, b"ttl record"),
                )
            return found[0]  # type: ignore[no-any-return]

        snapshot = self.expiry.resolve(items, now, whole=stored.complete, read=self.read, at=at)
        # A stamp's item is a value of the rows read (weighed there): the stamp is its own.
        incremental.keep(slot, keys, known, weight=_STAMP_WEIGHT * len(keys))
        return snapshot, known

    # -- the layer protocol -----------------------------------------------------------------
    def _live_keyed(self, stored: Tail, now: float) -> tuple[Snapshot, list[Any]] | None:
        """``_resolve_keyed``'s answer where nothing is dead (``Expiry.resolve_live``);
        None otherwise. Tried first on every read: a live history (most reads, and every
        warm one) is then resolved in passes at C speed; where a record is dead, the
        stamps read here answer ``_resolve_keyed``'s."""
        keys = stored.keys
        slot = ("ttl stamps", self.session_id)
        known = incremental.previous(slot, keys)
        if not known:
            return None
        items = stored.items
        for index, found in enumerate(known if incremental.MISSING in known else ()):
            if found is incremental.MISSING:
                key = keys[index]
                try:  # a record ``resolve`` would not reach (behind a dead one) may be
                    stamp = self.read(items[index])  # of a format it never reads
                except UnknownRecord:
                    return None
                known[index] = (stamp, None if key is None else derived_key(key, b"ttl record"))
        stamps = list(map(_FIRST, known))
        snapshot = self.expiry.resolve_live(list(items), stamps, now, whole=stored.complete)
        incremental.keep(slot, keys, known, weight=_STAMP_WEIGHT * len(keys))
        return None if snapshot is None else (snapshot, known)

    # -- the layer protocol -----------------------------------------------------------------
    async def shape(self, below: Tail, wrapper: RunContextWrapper[Any] | None) -> Tail | Need:
        """The live items of ``below``, with when each one's expiry counts from.

        Unstamped items (history written before this layer) are dated first, then read
        again. Of an incomplete tail only what is decided shows: outputs at its head may
        belong to a call before it that is dead.
        """
        now = self.clock()
        live = self._live_keyed(below, now)  # every record stamped: nothing to adopt
        stamped = live is not None
        if live is None:
            if self._dates_on_sight and any(map(unstamped, below.items)):
                return await self._adopt_on_sight(now)
            live = self._resolve_keyed(below, now)
        snapshot, known = live
        shown = snapshot.visible
        if not snapshot.complete:
            first = next(
                (n for n, i in enumerate(shown) if not is_output(snapshot.stamp(i).item)),
                len(shown),
            )
            shown = shown[first:]
        if shown and shown[0] + len(shown) == len(snapshot.stored) == shown[-1] + 1:
            # The newest records, all shown (what a read of a live history finds): sliced
            # and mapped at C speed.
            stamps = snapshot.stamps[shown[0] - snapshot.start :]
            keys = list(map(_SECOND, known[shown[0] :]))
        else:
            stamps = [snapshot.stamp(index) for index in shown]
            keys = [known[i][1] for i in shown]
        return Tail(
            list(map(_FIRST, stamps)),
            # Where every record is stamped, each one's time is its anchor (``known_time``).
            list(map(_ANCHOR if stamped else known_time, stamps)),
            keys,
            snapshot.complete,
            # A view that ends at a dead record needed that record, and nothing before it.
            below.reach_from(snapshot.start - 1) if snapshot.start else below.reach,
        )

    async def write(self, items: Sequence[Any], wrapper: RunContextWrapper[Any] | None) -> None:
        await self._write(items, wrapper, derived_from=None)

    async def add_derived(
        self,
        items: Sequence[Any],
        *,
        derived_from: float | None,
        wrapper: RunContextWrapper[Any] | None = None,
    ) -> None:
        """Append items derived from data written at ``derived_from``: they expire with it.

        A summary must not outlive its sources. Its write time stays now: the write is
        activity all the same. With ``derived_from=None``, the same as ``add_items``.
        """
        await self._write(items, wrapper, derived_from=derived_from)

    async def _write(
        self,
        items: Sequence[Any],
        wrapper: RunContextWrapper[Any] | None,
        *,
        derived_from: float | None,
    ) -> None:
        if not items:  # still the store's call: a closed or broken store says so
            await self.write_below([], wrapper)
            return
        now = self.clock()
        if isinstance(self.inner, SessionLayer):
            tail = await self._context(items, wrapper, now)
            generation = self.expiry.next_generation(tail, now)
            records = new_records(
                tail, items, now=now, generation=generation, derived_from=derived_from
            )
            await self.write_below(records, wrapper)
        else:
            generation = await self._append(items, wrapper, now, derived_from=derived_from)
        await purge_head(
            self.inner,
            self.expiry.expired(generation, idle=False, now=now),
            self.purge_schedule,
            now=now,
            batch_size=self.purge_batch,
            layer=type(self).__name__,
            session_id=self.session_id,
            place=(type(self.backend).__name__, self.session_id),
        )

    async def _append(
        self,
        items: Sequence[Any],
        wrapper: RunContextWrapper[Any] | None,
        now: float,
        *,
        derived_from: float | None,
    ) -> int:
        """Write ``items``' records after the stored tail they may continue; their generation.

        Over a store, the tail is read by the store's ``append_after``: in the write's own
        transaction where the store allows it, so one round trip, and the stamps follow
        what is stored at the moment of writing, whoever wrote it.
        """
        generations: list[int] = []

        def compose(stored: Tail) -> list[dict[str, Any]] | None:
            if self._dates_on_sight and any(map(unstamped, stored.items)):
                raise _Unstamped
            tail = [self.read(value) for value in stored.items]
            if not (stored.complete or shows_open_unit([stamp.item for stamp in tail], items)):
                return None
            generations.append(self.expiry.next_generation(tail, now))
            return new_records(
                tail, items, now=now, generation=generations[-1], derived_from=derived_from
            )

        while True:
            try:
                with store_errors(self.inner):  # named by the layer whose method was called
                    await capabilities_of(self.inner).append_after(
                        compose, first=_CONTEXT, wrapper=wrapper
                    )
                return generations[-1]  # the attempt that committed composed last
            except _Unstamped:
                await self._adopt_on_sight(now)  # then read again, dated (or given up on)

    async def _context(
        self, items: Sequence[Any], wrapper: RunContextWrapper[Any] | None, now: float
    ) -> list[Stamp]:
        """The stored tail a new batch may continue: the newest record and any open unit."""

        async def enough(stored: Tail) -> list[Stamp] | Need | None:
            if self._dates_on_sight and any(map(unstamped, stored.items)):
                return await self._adopt_on_sight(now)
            tail = [self.read(value) for value in stored.items]
            if stored.complete or shows_open_unit([stamp.item for stamp in tail], items):
                return tail
            return None

        return await self.read_below(enough, wrapper, first=_CONTEXT, hinted=False)

    async def pop(self, wrapper: RunContextWrapper[Any] | None) -> Any:
        while True:
            value = await self.pop_below(wrapper)
            if value is None:
                return None
            try:
                stamp = self.read(value)
            except UnknownRecord:
                # Popping must not destroy what could not be read: put it back, then fail.
                await self.write_below([value], wrapper)
                raise
            now = self.clock()
            if not (self.expiry.idle(stamp, now) or self.expiry.dead(stamp, stamp.generation, now)):
                return stamp.item
            # The newest record was dead, hence not shown; it is deleted now, which
            # retention allows. Anything shown lies below it (unless it was a summary).
            if not stamp.derived:
                return None

    # -- reading whole, for maintenance --------------------------------------------------------
    async def snapshot(self) -> Snapshot:
        """The whole stored history, for rewrites that must name what they replace."""
        now = self.clock()

        async def whole(stored: Tail) -> Snapshot | Need | None:
            if not stored.complete:
                return None
            if self._dates_on_sight and any(map(unstamped, stored.items)):
                return await self._adopt_on_sight(now)
            return self.resolve(stored, now)

        return await self.read_below(whole, None, first=_WHOLE_FIRST)

    async def adopt(self, *, allow_non_atomic: bool = False, max_attempts: int = 5) -> int:
        """Date every unstamped item (written before this layer, or around it); return how many.

        Runs by itself the first time a read or write meets such an item. An item is
        dated by the store's own write time where the store keeps one (SQL stores), else
        by now, its first sight (``adoption``). A store without atomic rewrites is
        refused unless ``allow_non_atomic=True`` (clear and refill).
        """
        return await adopt_history(
            self.inner,
            clock=self.clock,
            allow_non_atomic=allow_non_atomic,
            max_attempts=max_attempts,
            layer=type(self).__name__,
        )

    async def _adopt_on_sight(self, now: float) -> Need:
        try:
            await adopt_history(self.inner, clock=lambda: now, layer=type(self).__name__)
        except CapabilityError as exc:
            # A skip-only store, or a history that kept changing: unstamped items stay,
            # live, for this layer (the next one built tries again).
            self._adopting = False
            logger.info("unstamped items stay undated for now: %s", exc)
        return Need.AGAIN

    # -- deleting ---------------------------------------------------------------------------
    async def purge_expired(self) -> int:
        """Delete every stored record the view no longer shows; return how many went.

        Reads the tail back to where expiry ends (the live part, at most), then deletes
        oldest first, in batches of ``purge_batch``, one transaction each, stopping at
        the first record it keeps; only a derived item expired among live ones makes it
        scan the rest. Raises ``CapabilityError`` when the store has no capability
        adapter: there expired items can only be skipped.
        """
        plan = self.expiry.purge_plan(await self._until_expiry_ends(), self.read)
        if plan is None:
            return 0
        doomed, prefix = plan
        return await delete_records(
            self.inner,
            doomed,
            batch_size=self.purge_batch,
            prefix=prefix,
            layer=type(self).__name__,
            session_id=self.session_id,
        )

    async def _until_expiry_ends(self) -> Snapshot:
        """The newest records back to the first dead one (all, when none is)."""
        now = self.clock()

        async def decided(stored: Tail) -> Snapshot | Need | None:
            if self._dates_on_sight and any(map(unstamped, stored.items)):
                return await self._adopt_on_sight(now)
            snapshot = self.resolve(stored, now)
            return snapshot if snapshot.complete else None

        return await self.read_below(decided, None, first=_WHOLE_FIRST)

    async def expired_now(self) -> Predicate | None:
        """A test for stored records that are dead now; None when nothing is stored."""
        newest = await self.newest_below(1, None)
        if not newest.items:
            return None
        return self.expiry.expired_after(self.read(newest.items[-1]), self.clock())

    def storage_capabilities(self) -> StorageCapabilities:
        from memstack.layers.ttl.capabilities import TTLCapabilities

        return TTLCapabilities(self)

    def repr_options(self) -> dict[str, object]:
        options: dict[str, object] = {}
        for name in ("ttl", "idle_ttl"):
            if getattr(self, name) is not None:
                options[name] = getattr(self, name)
        options["purge_every"] = self.purge_every
        return options
