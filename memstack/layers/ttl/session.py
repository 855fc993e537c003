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

This file only wires: ``policy`` decides (pure), ``reader`` reads the tail,
``purge`` deletes, ``adoption`` dates, ``capabilities`` serves layers above.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, Any, Self, cast

from agents.memory import Session
from agents.memory.session_settings import resolve_session_limit
from pydantic import BeforeValidator, Field, model_validator

from memstack.backends.capabilities import Predicate, StorageCapabilities
from memstack.base import SessionLayer
from memstack.layers.ttl.adoption import adopt_history
from memstack.layers.ttl.policy import Expiry, Snapshot, new_records
from memstack.layers.ttl.purge import (
    PurgeSchedule,
    delete_records,
    purge_head,
    purge_written_before,
)
from memstack.layers.ttl.reader import TailReader
from memstack.layers.ttl.record import UnknownRecord
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


class _PurgeEvery(Options, layer="TTLSession"):
    purge_every: MaybeDuration


class TTLSession(SessionLayer):
    """Hides, then deletes, items older than ``ttl`` and sessions idle for ``idle_ttl``."""

    layer_name = "ttl"
    alters_what_it_reads = False
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
        self.expiry = Expiry(self.ttl, self.idle_ttl)
        self.reader = TailReader(inner, self.expiry, layer=type(self).__name__)

    @property
    def purge_every(self) -> float | None:
        return self.purge_schedule.every

    @purge_every.setter
    def purge_every(self, value: Seconds | None) -> None:
        self.purge_schedule.every = _PurgeEvery.check(purge_every=value).purge_every

    async def scan(
        self, want: int | None, forward: dict[str, Any], *, shared: bool = False
    ) -> Snapshot:
        """Read the tail, growing it, until the newest ``want`` shown records are known.

        ``shared``: the caller treats the records read-only and hands none on, so rows
        unchanged since an earlier read come back as the same objects (``read_values``).
        """
        return await self.reader.scan(want, forward, now=self.clock(), shared=shared)

    async def snapshot(self) -> Snapshot:
        """The whole stored history, for rewrites that must name what they replace."""
        return await self.reader.snapshot(now=self.clock())

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
        tail = await self.reader.context(items, forward, now=now)
        generation = self.expiry.next_generation(tail, now)
        records = new_records(
            tail, items, now=now, generation=generation, derived_from=derived_from
        )
        await self.inner.add_items(cast("list[TResponseInputItem]", records), **forward)
        self.reader.wrote(len(records))
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
            stamp = self.reader.read(value)
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

    # -- deleting ---------------------------------------------------------------------------
    async def purge_expired(self) -> int:
        """Delete every stored record the view no longer shows; return how many went.

        Reads the tail back to where expiry ends (the live part, at most), then deletes
        oldest first, in batches of ``purge_batch``, one transaction each, stopping at
        the first record it keeps; only a derived item expired among live ones makes it
        scan the rest. Raises ``CapabilityError`` when the store has no capability
        adapter: there expired items can only be skipped.
        """
        plan = self.expiry.purge_plan(await self.scan(None, {}), self.reader.read)
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
        if not newest:
            return None
        return self.expiry.expired_after(self.reader.read(newest[-1]), self.clock())

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
