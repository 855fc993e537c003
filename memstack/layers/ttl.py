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
import math
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, Any, Self, cast

from agents.memory import Session
from agents.memory.session_settings import resolve_session_limit
from pydantic import BeforeValidator, Field, model_validator

from memstack.backends.adapters import capabilities_of
from memstack.backends.capabilities import (
    READ_ALL,
    GenericCapabilities,
    Predicate,
    StorageCapabilities,
)
from memstack.base import SessionLayer
from memstack.errors import BackendError, CapabilityError, ConfigurationError
from memstack.history import is_output
from memstack.layers.ttl_adoption import adopted_records, through_last_unstamped, unstamped
from memstack.layers.ttl_policy import (
    Expiry,
    Snapshot,
    at_most,
    doomed,
    shows_open_unit,
    unit_anchors,
)
from memstack.layers.ttl_record import Stamp, UnknownRecord, read_record, write_record
from memstack.options import (
    BatchSize,
    Duration,
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


class _PurgeOptions(Options):
    older_than: Duration
    batch_size: BatchSize = 500


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
        self.purge_every = options.purge_every
        self.purge_batch = options.purge_batch
        self._last_purge = -math.inf
        self._can_purge = True  # False once the store turned out to be skip-only
        self._hint = _FIRST_READ  # records the next unbounded read starts with
        self._counts_cheaply: bool | None = None  # the generic adapter counts by reading all
        self._adopting = True  # False once the store turned out unable to date items in place
        self.expiry = Expiry(self.ttl, self.idle_ttl)

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
        by now, its first sight. One ``replace_oldest(…, expect=…)`` transaction, read
        again when the history changed meanwhile. A store without atomic rewrites is
        refused unless ``allow_non_atomic=True`` (clear and refill).
        """
        name = type(self).__name__
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise ConfigurationError(
                f"max_attempts must be an int >= 1, got {max_attempts!r}",
                layer=name,
                session_id=self.session_id,
            )
        caps = capabilities_of(self.inner)
        if not caps.atomic:
            if not allow_non_atomic:
                raise CapabilityError(
                    f"{caps!r} cannot rewrite history atomically, so unstamped items stay "
                    "undated and never expire; pass allow_non_atomic=True to clear and "
                    "refill the session with them dated",
                    layer=name,
                    session_id=self.session_id,
                )
            caps = GenericCapabilities(self.inner, allow_non_atomic=True)
        for _ in range(max_attempts):
            stored: list[Any] = list(await self.inner.get_items(limit=READ_ALL))
            n = through_last_unstamped(stored)
            if n == 0:
                return 0
            try:
                ages = await caps.write_ages(n)
            except CapabilityError:
                ages = None  # the store's dialect has no age: count from first sight
            records, count = adopted_records(stored[:n], ages=ages, now=self.clock())
            if await caps.replace_oldest(n, records, expect=stored[:n]):
                logger.info(
                    "dated %d unstamped items of session %r (%s)",
                    count,
                    self.session_id,
                    "store write times" if ages is not None else "first seen now",
                )
                return count
        raise CapabilityError(
            f"history changed during each of {max_attempts} adoption attempts; retry later",
            layer=name,
            session_id=self.session_id,
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
        derived = derived_from
        origin = now if derived is None else min(derived, now)
        tail = await self._context(items, forward)
        generation = tail[-1].generation if tail else 0
        if tail and self.expiry.idle(tail[-1], now):
            generation += 1  # the idle history is dead; this write begins the next one
        records = [
            write_record(
                dict(item),
                written=now,
                anchor=anchor,
                generation=generation,
                derived=derived is not None,
            )
            for item, anchor in zip(items, unit_anchors(tail, items, origin), strict=True)
        ]
        await self.inner.add_items(cast("list[TResponseInputItem]", records), **forward)
        self._hint += len(records)
        await self._purge_after_write(generation, now)

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
        scan = await self.scan(None, {})
        if not scan.stored:
            return 0
        newest, now = self._read(scan.stored[-1]), scan.now
        expired = self.expiry.expired(
            newest.generation, idle=self.expiry.idle(newest, now), now=now
        )
        # Derived items that expired among shown ones need a scan past the first shown.
        first = scan.visible[0] if scan.visible else len(scan.stored)
        stray = any(expired(value) for value in scan.stored[first:])
        if scan.hidden is None and not stray:
            return 0
        return await self._purge(doomed(scan.hidden, expired, prefix=not stray), prefix=not stray)

    async def expired_now(self) -> Predicate | None:
        """A test for stored records that are dead now; None when nothing is stored."""
        newest = await self.inner.get_items(limit=1)
        if not newest:
            return None
        stamp, now = self._read(newest[-1]), self.clock()
        return self.expiry.expired(stamp.generation, idle=self.expiry.idle(stamp, now), now=now)

    async def _purge(
        self, doomed: Predicate, *, prefix: bool = True, limit: int | None = None
    ) -> int:
        predicate = doomed if limit is None else at_most(limit, doomed)
        caps = capabilities_of(self.inner)
        try:
            return await caps.delete_where(
                predicate, batch_size=self.purge_batch, prefix_only=prefix
            )
        except CapabilityError as exc:
            raise CapabilityError(
                f"{caps!r} cannot delete items; TTLSession can only skip expired items on "
                f"this store (they stay stored): {exc.reason}",
                layer=type(self).__name__,
                session_id=self.session_id,
            ) from exc

    async def _purge_after_write(self, generation: int, now: float) -> None:
        """The expired head of the history, ``purge_batch`` records at most, on schedule.

        Stateless: the store's adapter finds the dead prefix itself (a prefix-only delete
        stops at the first live record). Best effort: the write already succeeded, so
        failures only log.
        """
        if self.purge_every is None or not self._can_purge:
            return
        if now - self._last_purge < self.purge_every:
            return
        self._last_purge = now
        expired = self.expiry.expired(generation, idle=False, now=now)
        try:
            await self._purge(expired, limit=self.purge_batch)
        except CapabilityError as exc:
            self._can_purge = False
            logger.info("%s; skipping expired items only", exc)
        except BackendError as exc:
            logger.warning("purge after write failed, retrying later: %s", exc)

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


async def purge_written_before(
    store: Session, *, older_than: Seconds, batch_size: int = 500
) -> int:
    """Delete a session's rows its store wrote over ``older_than`` ago; return how many.

    The retention job for TTL above encryption: it compares the store's own write-time
    column with the store's own clock and reads no item, so it needs no key. SQL stores
    only; the others keep no per-item write time and raise ``CapabilityError``.
    """
    options = _PurgeOptions.check(older_than=older_than, batch_size=batch_size)
    return await capabilities_of(store).delete_written_before(
        options.older_than, batch_size=options.batch_size
    )
