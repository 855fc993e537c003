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

Every item is stored in a record stamped with its write time (``ttl_record``). An atomic
unit (a tool call and its output, reasoning and what follows it) expires when its oldest
item does, and an expired record hides everything stored before it, so expiry removes
the start of a history, whole units at a time, and never punches holes. Reads and
``pop_item`` only skip; deleting happens in ``purge_expired()`` and, bounded by
``purge_batch``, after a write at most every ``purge_every`` seconds, through the
store's capability adapter.

An item stored without a stamp (history written before the layer, or around it) is not
expired but dated on first sight, by the store's own write time where it keeps one
(``adopt``, ``ttl_adoption``).

Derived items (a summary, written with ``add_derived(items, derived_from=t)``, which
layers above reach through the capability adapter) expire with their oldest source and
hide nothing else. The adapter's ``read_tail(n)`` returns each live item with its stamp.

Below encryption (store → TTL → Encrypted) the records wrap envelopes in plaintext, so a
retention job purges with ``TTLSession(store, ttl=…).purge_expired()`` and no key. Above
encryption the records are sealed; a job without the key can only use the store's own
write times: ``purge_written_before(store, older_than=…)``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, Any, Self, cast

from agents.memory import Session
from agents.memory.session_settings import resolve_session_limit
from pydantic import BeforeValidator, Field, model_validator

from memstack.backends.adapters import capabilities_of
from memstack.backends.capabilities import READ_ALL, Predicate, StorageCapabilities
from memstack.base import SessionLayer
from memstack.errors import CapabilityError
from memstack.history import is_output
from memstack.layers.ttl_adoption import adopt_history, unstamped
from memstack.layers.ttl_policy import Expiry, Snapshot, new_records, shows_open_unit
from memstack.layers.ttl_purge import (
    PurgeSchedule,
    delete_records,
    purge_head,
    purge_written_before,
)
from memstack.layers.ttl_record import Stamp, UnknownRecord, read_record
from memstack.options import (
    BatchSize,
    MaybeDuration,
    MaybePositiveDuration,
    Options,
    must_be_callable,
)

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.run_context import RunContextWrapper

__all__ = ["TTLSession", "purge_written_before"]

logger = logging.getLogger("memstack.ttl")

Seconds = float | int | timedelta
Clock = Callable[[], float]

_FIRST_READ = 256  # records an unbounded read asks for before it knows the history
_GROWTH = 4  # tail reads grow by this factor; each re-reads the tail, so total <= 4/3 of last
_SLACK = 16  # records the next unbounded read adds, for what other writers appended
_CONTEXT = 4  # stored records a write reads first: the newest one, and any unit left open


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
        self._hint = _FIRST_READ  # records the next unbounded read starts with
        self._counts_cheaply: bool | None = None  # the generic adapter counts by reading all
        self._adopting = True  # False once the store turned out unable to date items in place
        self.expiry = Expiry(self.ttl, self.idle_ttl)

    @property
    def purge_every(self) -> float | None:
        return self.purge_schedule.every

    def _read(self, value: object) -> Stamp:
        try:
            return read_record(value)
        except UnknownRecord as exc:
            raise UnknownRecord(
                exc.reason, layer=type(self).__name__, session_id=self.session_id
            ) from exc

    async def scan(self, want: int | None, forward: dict[str, Any]) -> Snapshot:
        """Read the tail, growing it, until the newest ``want`` shown records are known."""
        now = self.clock()
        size = want + 1 if want is not None else self._hint
        while True:
            stored = await self._tail(size, forward)
            snapshot = self.expiry.resolve(stored, now, whole=len(stored) < size, read=self._read)
            if snapshot.complete:
                if want is None:
                    self._hint = max(_FIRST_READ, len(stored) - snapshot.start + 1 + _SLACK)
                return snapshot
            # Enough live records, and the slice is final unless outputs heading the view
            # could reach into it.
            shown = snapshot.visible
            if (
                want is not None
                and len(shown) > want
                and not all(is_output(snapshot.stamp(i).item) for i in shown[:-want])
            ):
                return snapshot
            size = await self._next_size(size)

    async def _next_size(self, size: int) -> int:
        """How many records the next tail read asks for.

        ``_GROWTH`` times more; or, when the store counts cheaply and holds at most
        ``_GROWTH`` squared times ``size``, everything at once, saving a round of re-reading.
        """
        caps = capabilities_of(self.inner)
        if self._counts_cheaply is None:
            self._counts_cheaply = caps.counts_cheaply
        if self._counts_cheaply and await caps.count() <= size * _GROWTH * _GROWTH:
            return size * _GROWTH * _GROWTH
        return size * _GROWTH

    async def snapshot(self) -> Snapshot:
        """The whole stored history, for rewrites that must name what they replace."""
        stored = await self._tail(READ_ALL, {})
        return self.expiry.resolve(stored, self.clock(), whole=True, read=self._read)

    async def _tail(self, size: int, forward: dict[str, Any]) -> list[Any]:
        """The newest ``size`` stored values, after dating any unstamped one among them."""
        stored = list(await self.inner.get_items(limit=size, **forward))
        if self._adopting and any(unstamped(value) for value in stored):
            await self._adopt_on_sight()
            stored = list(await self.inner.get_items(limit=size, **forward))
        return stored

    async def _adopt_on_sight(self) -> None:
        try:
            await self.adopt()
        except CapabilityError as exc:
            if not capabilities_of(self.inner).atomic:
                self._adopting = False  # skip-only store: unstamped items stay, live
            logger.info("unstamped items stay undated for now: %s", exc)

    async def adopt(self, *, allow_non_atomic: bool = False, max_attempts: int = 5) -> int:
        """Date every unstamped item (written before this layer, or around it); return how many.

        Runs by itself the first time a read or write meets such an item. An item is
        dated by the store's own write time where the store keeps one (SQL stores), else
        by now, its first sight (``ttl_adoption``). A store without atomic rewrites is
        refused unless ``allow_non_atomic=True`` (clear and refill).
        """
        return await adopt_history(
            self.inner,
            clock=self.clock,
            allow_non_atomic=allow_non_atomic,
            max_attempts=max_attempts,
            layer=type(self).__name__,
        )

    # -- the Session protocol -----------------------------------------------------------------
    async def get_items(
        self, limit: int | None = None, *, wrapper: RunContextWrapper[Any] | None = None
    ) -> list[TResponseInputItem]:
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is not None and limit <= 0:
            return []
        scan = await self.scan(limit, self.forward(wrapper))
        return cast("list[TResponseInputItem]", [stamp.item for stamp in scan.view(limit)])

    async def add_items(
        self, items: list[TResponseInputItem], *, wrapper: RunContextWrapper[Any] | None = None
    ) -> None:
        await self._write(items, self.forward(wrapper), derived_from=None)

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
        await self._write(items, self.forward(wrapper), derived_from=derived_from)

    async def _write(
        self, items: Sequence[Any], forward: dict[str, Any], *, derived_from: float | None
    ) -> None:
        if not items:  # still the store's call: a closed or broken store says so
            await self.inner.add_items([], **forward)
            return
        now = self.clock()
        tail = await self._context(items, forward)
        generation = self.expiry.next_generation(tail, now)
        records = new_records(
            tail, items, now=now, generation=generation, derived_from=derived_from
        )
        await self.inner.add_items(cast("list[TResponseInputItem]", records), **forward)
        self._hint += len(records)
        await purge_head(
            self.inner,
            self.expiry.expired(generation, idle=False, now=now),
            self.purge_schedule,
            now=now,
            batch_size=self.purge_batch,
            layer=type(self).__name__,
            session_id=self.session_id,
        )

    async def pop_item(
        self, *, wrapper: RunContextWrapper[Any] | None = None
    ) -> TResponseInputItem | None:
        forward = self.forward(wrapper)
        value = await self.inner.pop_item(**forward)
        if value is None:
            return None
        try:
            stamp = self._read(value)
        except UnknownRecord:
            # Popping must not destroy what could not be read: put it back, then fail.
            await self.inner.add_items([value], **forward)
            raise
        now = self.clock()
        if self.expiry.idle(stamp, now) or self.expiry.dead(stamp, stamp.generation, now):
            # The newest record was dead, hence not shown; it is deleted now, which
            # retention allows. Anything shown lies below it.
            return await self.pop_item(wrapper=wrapper) if stamp.derived else None
        return cast("TResponseInputItem", stamp.item)

    async def _context(self, items: Sequence[Any], forward: dict[str, Any]) -> list[Stamp]:
        """The stored tail a new batch may continue: the newest record and any open unit."""
        size = _CONTEXT
        while True:
            tail = [self._read(v) for v in await self._tail(size, forward)]
            if len(tail) < size or shows_open_unit([s.item for s in tail], items):
                return tail
            size *= _GROWTH

    # -- deleting ---------------------------------------------------------------------------
    async def purge_expired(self) -> int:
        """Delete every stored record the view no longer shows; return how many went.

        Reads the tail back to where expiry ends (the live part, at most), then deletes
        oldest first, in batches of ``purge_batch``, one transaction each, stopping at
        the first record it keeps; only a derived item expired among live ones makes it
        scan the rest. Raises ``CapabilityError`` when the store has no capability
        adapter: there expired items can only be skipped.
        """
        plan = self.expiry.purge_plan(await self.scan(None, {}), self._read)
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

    async def expired_now(self) -> Predicate | None:
        """A test for stored records that are dead now; None when nothing is stored."""
        newest = await self.inner.get_items(limit=1)
        return self.expiry.expired_after(self._read(newest[-1]), self.clock()) if newest else None

    def storage_capabilities(self) -> StorageCapabilities:
        from memstack.layers.ttl_capabilities import TTLCapabilities

        return TTLCapabilities(self)

    def repr_options(self) -> dict[str, object]:
        options: dict[str, object] = {}
        for name in ("ttl", "idle_ttl"):
            if getattr(self, name) is not None:
                options[name] = getattr(self, name)
        options["purge_every"] = self.purge_every
        return options
